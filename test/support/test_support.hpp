// Helpers shared by the test suites: fresh random inputs, poisoning, and
// comparison against double-precision references.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "tx/dtype.hpp"

namespace tx::test {

// A generator seeded from the clock (printed by the suite on failure via
// the returned seed) so every run sees fresh inputs.
std::mt19937_64& rng();
std::uint64_t rng_seed();

// n values uniform in [lo, hi), already rounded to dtype.
std::vector<double> random_values(std::size_t n, DType dtype, double lo = -4.0, double hi = 4.0);

// A bit pattern that is NaN for float dtypes and an unlikely value otherwise.
std::uint64_t poison_bits(DType dtype);

// Largest |got - want| / (atol + rtol * |want|) over all elements; NaN
// compares equal to NaN only. Values > 1 fail.
double max_rel_error(const std::vector<double>& got, const std::vector<double>& want, double atol,
                     double rtol);
// Default tolerance for results computed in `dtype`.
double default_rtol(DType dtype);
// One unit in the last place of `dtype` at zero (its smallest subnormal; 1e-30
// for f32/f64): the absolute error a result computed in f32 and rounded once
// may carry when the exact value is within a rounding of the subnormal range.
double subnormal_ulp(DType dtype);

// A GEMM's worst error against float64, as a ratio to the bound (<= 1
// passes): |C - C_exact| <= (K 2^-23 + mag_rel) sum |a b| + ulp |C_exact|.
// K 2^-23: f32 sums whose addends the tensor cores align by truncation; ulp:
// one rounding of the output; mag_rel: what a kernel adds beyond that (fp8 on
// wgmma: the tensor cores' ~14-bit accumulation). A (M, K) and B (K, N)
// row-major; a NaN is infinitely wrong.
inline double gemm_error(const std::vector<double>& a, const std::vector<double>& b,
                         const std::vector<double>& got, std::int64_t M, std::int64_t N,
                         std::int64_t K, double ulp, double mag_rel = 0) {
  double worst = 0;
  for (std::int64_t i = 0; i < M; ++i)
    for (std::int64_t j = 0; j < N; ++j) {
      double want = 0, mag = 0;
      for (std::int64_t p = 0; p < K; ++p) {
        const double x =
            a[static_cast<std::size_t>(i * K + p)] * b[static_cast<std::size_t>(p * N + j)];
        want += x;
        mag += std::fabs(x);
      }
      const double tol =
          (static_cast<double>(K) * 0x1p-23 + mag_rel) * mag + ulp * std::fabs(want) + 1e-30;
      const double g = got[static_cast<std::size_t>(i * N + j)];
      if (std::isnan(g)) return INFINITY;
      worst = std::max(worst, std::fabs(g - want) / tol);
    }
  return worst;
}

}  // namespace tx::test
