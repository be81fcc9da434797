#include "test_support.hpp"

#include <chrono>
#include <cmath>
#include <cstdlib>

#include "tx/expr.hpp"

namespace tx::test {

// TX_TEST_SEED=N replays a run (failures print the seed); cross_device sets
// it so that the GPU and the host see the same inputs.
std::uint64_t rng_seed() {
  static const std::uint64_t seed = []() -> std::uint64_t {
    if (const char* v = std::getenv("TX_TEST_SEED"); v && *v) return std::strtoull(v, nullptr, 10);
    return static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  }();
  return seed;
}

std::mt19937_64& rng() {
  static std::mt19937_64 g(rng_seed());
  return g;
}

std::vector<double> random_values(std::size_t n, DType dtype, double lo, double hi) {
  std::vector<double> v(n);
  if (dtype.is_integer() || dtype.is_bool()) {
    double dl =
        std::max(lo, dtype.is_uint() || dtype.is_bool() ? 0.0 : -std::ldexp(1.0, dtype.bits - 1));
    double dh = std::min(
        hi, dtype.is_bool() ? 2.0 : std::ldexp(1.0, dtype.bits - (dtype.is_uint() ? 0 : 1)));
    std::uniform_int_distribution<std::int64_t> d(static_cast<std::int64_t>(dl),
                                                  static_cast<std::int64_t>(dh) - 1);
    for (auto& x : v) x = static_cast<double>(d(rng()));
    return v;
  }
  std::uniform_real_distribution<double> d(lo, hi);
  for (auto& x : v) {
    do {
      x = quantize(d(rng()), dtype);
    } while (x == 0.0);  // never zeros: they hide unwritten outputs
  }
  return v;
}

std::uint64_t poison_bits(DType dtype) {
  switch (dtype.code) {
    case TypeCode::Float:
      return dtype.bits == 64 ? 0x7ff8dead0000beefull : dtype.bits == 32 ? 0x7fc0dead : 0x7e01;
    case TypeCode::BFloat:
      return 0x7fc1;
    case TypeCode::Float8E4M3:
      return 0x7f;
    case TypeCode::Float8E5M2:
      return 0x7f;
    default:
      return 0xa5a5a5a5a5a5a5a5ull;
  }
}

double max_rel_error(const std::vector<double>& got, const std::vector<double>& want, double atol,
                     double rtol) {
  if (got.size() != want.size()) return INFINITY;
  double worst = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    double g = got[i], w = want[i];
    if (std::isnan(w) && std::isnan(g)) continue;
    if (std::isnan(g) || std::isnan(w)) return INFINITY;
    if (std::isinf(w) || std::isinf(g)) {
      if (g != w) return INFINITY;
      continue;
    }
    double e = std::fabs(g - w) / (atol + rtol * std::fabs(w));
    worst = std::max(worst, e);
  }
  return worst;
}

double subnormal_ulp(DType dtype) {
  if (dtype == f16) return 0x1p-24;
  if (dtype == bf16) return 0x1p-133;
  if (dtype == f8e4m3) return 0x1p-9;
  if (dtype == f8e5m2) return 0x1p-16;
  return 1e-30;
}

double default_rtol(DType dtype) {
  if (dtype == f64) return 1e-12;
  if (dtype == f32) return 1e-5;
  if (dtype == f16) return 1e-3;
  if (dtype == bf16) return 1.6e-2;
  if (dtype.is_fp8()) return 1.3e-1;
  return 0;
}

}  // namespace tx::test
