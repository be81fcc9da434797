// Helpers shared by the test suites: fresh random inputs, poisoning, and
// comparison against double-precision references.
#pragma once

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

}  // namespace tx::test
