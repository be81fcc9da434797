// The operator library's numeric tests, written once and run on the device
// the including suite picks (host_ops.cpp: the host JIT; gpu_ops.cpp: the
// GPU). Every op x every dtype it supports against the double-precision
// reference of the op table, with the seed's tolerances, on random inputs
// that include NaN, +-Inf, -0 and values past the fp8 range, on odd sizes
// and on the seed's broadcast pairs.
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>

#include "test_support.hpp"
#include "tx/ops/ops.hpp"
#include "tx/ops/registry.hpp"
#include "tx/tx.hpp"

#ifndef TX_OPS_DEVICE
#error "define TX_OPS_DEVICE before including ops_cases.hpp"
#endif

namespace opscase {

using namespace tx;

inline Device device() { return TX_OPS_DEVICE; }

inline const std::vector<DType>& float_dtypes() {
  static const std::vector<DType> t{f32, f16, bf16, f8e4m3, f8e5m2};
  return t;
}
inline const std::vector<DType>& int_dtypes() {
  static const std::vector<DType> t{i8, i32, i64, u8};
  return t;
}

// Random inputs for an op: mostly in a domain that keeps the op finite,
// with the special values mixed in.
inline std::vector<double> inputs_for(const ops::OpInfo& op, DType t, std::size_t n, int which) {
  if (t.is_bool()) {
    std::vector<double> v(n);
    for (auto& x : v) x = static_cast<double>(test::rng()() % 2);
    return v;
  }
  if (t.is_integer()) {
    double lo = t.is_uint() ? 0 : -100, hi = 100;
    if (op.name == "bitwise_and" || op.name == "bitwise_or" || op.name == "bitwise_xor" ||
        op.name == "bitwise_not")
      lo = t.is_uint() ? 0 : -1e9, hi = 1e9;
    return test::random_values(n, t, lo, hi);
  }
  double lo = -4, hi = 4;
  if (op.name == "pow") lo = which == 0 ? 0.1 : -3, hi = which == 0 ? 4 : 3;
  if (op.name == "div" || op.name == "remainder" || op.name == "floor_divide") {
    if (which == 1) lo = 0.25, hi = 4;
  }
  std::vector<double> v = test::random_values(n, t, lo, hi);
  // Specials at a few positions (never all of them: most values must be ordinary).
  static const double specials[] = {NAN, INFINITY, -INFINITY, -0.0, 1000.0, -1e5, 3e4};
  for (std::size_t i = 0; i < n; i += 37 + static_cast<std::size_t>(which)) v[i] = quantize(specials[(i / 37) % 7], t);
  return v;
}

// One ulp of dtype t at |x| (for the small float types).
inline double ulp(double x, DType t) {
  if (!std::isfinite(x)) return 0;
  std::uint64_t b = encode_bits(std::fabs(x), t);
  double next = decode_bits(b + 1, t);
  return std::isfinite(next) ? next - std::fabs(x) : std::fabs(x) - decode_bits(b - 1, t);
}

// Seed 004 tolerances: f32 1e-5, f16 1e-3, bf16 1.6e-2; exact for
// comparisons, bitwise, logical and where; fp8 within one fp8 ulp of the
// reference (computed in higher precision, then cast).
inline void compare(const ops::OpInfo& op, DType in, const std::vector<double>& got,
                    const std::vector<double>& want, const std::string& what) {
  REQUIRE(got.size() == want.size());
  DType out = ops::out_dtype_for(op, in);
  bool exact = out.is_bool() || out.is_integer() || op.name == "where" || op.name == "masked_fill";
  double rtol = in == f32 ? 1e-5 : in == f16 ? 1e-3 : in == bf16 ? 1.6e-2 : 0;
  std::size_t bad = 0, first = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    double g = got[i], w = want[i];
    bool okv;
    if (std::isnan(w) || std::isnan(g)) {
      okv = std::isnan(w) && std::isnan(g);
    } else if (exact || std::isinf(w) || std::isinf(g)) {
      okv = g == w;
    } else {
      double err = std::fabs(g - w);
      double atol = 1e-6;  // results that round to (near) zero
      okv = err <= atol + rtol * std::fabs(w) || err <= ulp(w, out) * 1.0001 ||
            (out.is_fp8() && err <= 2 * ulp(w, out));
    }
    if (!okv && bad++ == 0) first = i;
  }
  CHECK_MESSAGE(bad == 0, what << ": " << bad << " of " << got.size() << " elements wrong; first at " << first
                                << ": got " << got[first] << ", want " << want[first]
                                << " (seed " << test::rng_seed() << ")");
}

inline std::vector<double> reference(const ops::OpInfo& op, DType t, const std::vector<std::vector<double>>& in,
                                     const std::vector<std::vector<std::int64_t>>& shapes, const ops::Params& p,
                                     std::vector<std::int64_t>* out_shape) {
  DType out = ops::out_dtype_for(op, t);
  if (op.tmpl == optable::Template::gated) {
    const auto& x = shapes[0];
    std::int64_t half = x.back() / 2, rows = static_cast<std::int64_t>(in[0].size()) / (2 * half);
    *out_shape = x;
    out_shape->back() = half;
    std::vector<double> r(static_cast<std::size_t>(rows * half));
    for (std::int64_t m = 0; m < rows; ++m)
      for (std::int64_t n = 0; n < half; ++n)
        r[static_cast<std::size_t>(m * half + n)] =
            quantize(op.ref({in[0][static_cast<std::size_t>(m * 2 * half + n)],
                             in[0][static_cast<std::size_t>(m * 2 * half + half + n)]}, p, t), out);
    return r;
  }
  // Broadcast: index each input by the output coordinate.
  std::size_t rank = 0;
  for (auto& s : shapes) rank = std::max(rank, s.size());
  std::vector<std::int64_t> os(rank, 1);
  for (auto& s : shapes)
    for (std::size_t d = 0; d < s.size(); ++d) os[rank - s.size() + d] = std::max(os[rank - s.size() + d], s[d]);
  *out_shape = os;
  std::int64_t n = 1;
  for (auto e : os) n *= e;
  std::vector<double> r(static_cast<std::size_t>(n));
  std::vector<std::int64_t> c(rank, 0);
  for (std::int64_t i = 0; i < n; ++i) {
    std::vector<double> args;
    for (std::size_t k = 0; k < shapes.size(); ++k) {
      std::int64_t off = 0;
      const auto& s = shapes[k];
      for (std::size_t d = 0; d < s.size(); ++d) {
        std::int64_t cd = s[d] == 1 ? 0 : c[rank - s.size() + d];
        off = off * s[d] + cd;
      }
      args.push_back(in[k][static_cast<std::size_t>(off)]);
    }
    r[static_cast<std::size_t>(i)] = quantize(op.ref(args, p, t), out);
    for (std::size_t d = rank; d-- > 0;) {
      if (++c[d] < os[d]) break;
      c[d] = 0;
    }
  }
  return r;
}

// Runs op on fresh inputs of `shapes` and compares with the reference.
inline void check_op(const ops::OpInfo& op, DType t, const std::vector<std::vector<std::int64_t>>& shapes,
                     const ops::Params& p = {}, const ops::Config& cfg = {}) {
  std::string what = op.name + " " + t.name();
  for (auto& s : shapes) {
    what += " (";
    for (std::size_t d = 0; d < s.size(); ++d) what += (d ? "," : "") + std::to_string(s[d]);
    what += ")";
  }
  if (cfg.strategy) what += std::string(" ") + ops::strategy_name(*cfg.strategy);
  INFO(what);
  std::vector<std::vector<double>> vals;
  std::vector<Tensor> ts;
  for (std::size_t k = 0; k < shapes.size(); ++k) {
    bool mask = (op.name == "where" && k == 0) || (op.name == "masked_fill" && k == 1);
    DType dk = mask ? boolean : t;
    std::int64_t n = 1;
    for (auto e : shapes[k]) n *= e;
    vals.push_back(inputs_for(op, dk, static_cast<std::size_t>(n), static_cast<int>(k)));
    ts.push_back(Tensor::from_doubles(vals.back(), shapes[k], dk, device()));
  }
  std::vector<std::int64_t> out_shape;
  std::vector<double> want = reference(op, t, vals, shapes, p, &out_shape);
  ops::Elementwise e(op.name, shapes, t, p, cfg, device());
  REQUIRE(e.out_shape() == out_shape);
  Tensor out = Tensor::empty(out_shape, e.out_dtype(), device());
  out.fill_bits(test::poison_bits(e.out_dtype()));
  e(ts, out);
  compare(op, t, out.to_doubles(), want, what);
}

inline std::vector<DType> dtypes_of(const ops::OpInfo& op) {
  std::vector<DType> out;
  for (DType t : float_dtypes())
    if (optable::accepts(op.dtypes, t)) out.push_back(t);
  for (DType t : int_dtypes())
    if (optable::accepts(op.dtypes, t)) out.push_back(t);
  if (optable::accepts(op.dtypes, boolean) && op.name != "where" && op.name != "masked_fill") out.push_back(boolean);
  return out;
}

inline ops::Params params_of(const ops::OpInfo& op) {
  if (op.name == "leaky_relu") return {0.2};
  if (op.name == "elu") return {1.3};
  if (op.name == "hardtanh" || op.name == "clamp") return {-1.5, 2.25};
  if (op.name == "softplus") return {1.5, 10.0};
  if (op.name == "masked_fill") return {3.5};
  if (op.name == "nan_to_num") return {0.5, 100.0, -200.0};
  return {};
}

}  // namespace opscase

TEST_CASE("ops: every unary op and dtype on odd sizes") {
  using namespace opscase;
  for (const auto& op : tx::ops::all_ops()) {
    if (op.tmpl != tx::optable::Template::unary && !(op.tmpl == tx::optable::Template::independent && op.inputs == 1))
      continue;
    for (tx::DType t : dtypes_of(op)) {
      std::vector<std::int64_t> sizes = t == tx::f32 ? std::vector<std::int64_t>{1, 3, 4097, 999983}
                                                     : std::vector<std::int64_t>{3, 4097};
      for (std::int64_t n : sizes) check_op(op, t, {{n}}, params_of(op));
    }
  }
}

TEST_CASE("ops: every binary op and dtype, same shape and broadcast") {
  using namespace opscase;
  for (const auto& op : tx::ops::all_ops()) {
    if (op.tmpl != tx::optable::Template::binary) continue;
    for (tx::DType t : dtypes_of(op)) {
      check_op(op, t, {{4097}, {4097}});
      check_op(op, t, {{4, 1, 8}, {1, 8, 1}});
      check_op(op, t, {{64, 1}, {1, 128}});
      check_op(op, t, {{}, {4}});
    }
  }
}

TEST_CASE("ops: the seed's broadcast pairs") {
  using namespace opscase;
  const auto& add = *tx::ops::find_op("add");
  const auto& mul = *tx::ops::find_op("mul");
  for (tx::DType t : {tx::f32, tx::f16, tx::bf16}) {
    check_op(add, t, {{2, 512, 768}, {1, 1, 768}});
    check_op(mul, t, {{2, 512, 768}, {2, 512, 1}});
  }
  check_op(add, tx::f32, {{16, 256, 56, 56}, {256, 1, 1}});
  check_op(add, tx::f32, {{999983}, {999983}});
}

TEST_CASE("ops: fused gated activations") {
  using namespace opscase;
  for (const auto& op : tx::ops::all_ops()) {
    if (op.tmpl != tx::optable::Template::gated) continue;
    for (tx::DType t : dtypes_of(op)) {
      check_op(op, t, {{64, 2 * 256}});
      check_op(op, t, {{7, 2 * 13}});  // odd rows: scalar gather path
    }
  }
}

TEST_CASE("ops: where, masked_fill and prelu broadcast their extra inputs") {
  using namespace opscase;
  for (tx::DType t : {tx::f32, tx::f16, tx::f8e4m3, tx::i32}) {
    check_op(*tx::ops::find_op("where"), t, {{64, 1}, {64, 128}, {128}});
    check_op(*tx::ops::find_op("masked_fill"), t, {{64, 128}, {1, 128}}, {3.5});
  }
  for (tx::DType t : {tx::f32, tx::bf16}) check_op(*tx::ops::find_op("prelu"), t, {{8, 16, 33}, {16, 1}});
}

TEST_CASE("ops: the three strategies agree") {
  using namespace opscase;
  const auto& gelu = *tx::ops::find_op("gelu");
  const auto& add = *tx::ops::find_op("add");
  for (auto s : {tx::ops::Strategy::direct, tx::ops::Strategy::explicit_parallel, tx::ops::Strategy::register_copy})
    for (tx::DType t : {tx::f32, tx::f16, tx::f8e5m2}) {
      check_op(gelu, t, {{4097}}, {}, {.strategy = s});
      check_op(add, t, {{2, 64, 96}, {96}}, {}, {.strategy = s, .threads = 128, .num_per_thread = 2});
    }
}

TEST_CASE("ops: generative alibi and sinusoidal") {
  using namespace opscase;
  for (std::int64_t heads : {8, 12}) {
    tx::Tensor a = tx::ops::alibi(heads, 33, tx::f32, device());
    auto slopes = tx::ops::alibi_slopes(heads);
    std::vector<double> want;
    for (std::int64_t h = 0; h < heads; ++h)
      for (std::int64_t i = 0; i < 33; ++i)
        for (std::int64_t j = 0; j < 33; ++j) want.push_back(slopes[static_cast<std::size_t>(h)] * static_cast<double>(j - i));
    CHECK(a.shape() == std::vector<std::int64_t>{heads, 33, 33});
    CHECK(tx::test::max_rel_error(a.to_doubles(), want, 1e-5, 1e-5) <= 1.0);
  }
  tx::Tensor pe = tx::ops::sinusoidal(1000, 64, tx::f32, device());
  std::vector<double> want;
  for (int p = 0; p < 1000; ++p)
    for (int d = 0; d < 64; ++d) {
      double w = std::pow(10000.0, -(d / 2 * 2) / 64.0);
      want.push_back(d % 2 == 0 ? std::sin(p * w) : std::cos(p * w));
    }
  CHECK(tx::test::max_rel_error(pe.to_doubles(), want, 1e-6, 1e-5) <= 1.0);
}

TEST_CASE("ops: the API forms agree and check their inputs") {
  using namespace opscase;
  auto x = tx::Tensor::from_doubles(tx::test::random_values(1000, tx::f32), {10, 100}, tx::f32, device());
  tx::Tensor a = tx::ops::gelu(x);
  tx::Tensor b = tx::Tensor::empty({10, 100}, tx::f32, device());
  tx::ops::gelu(x, b);
  tx::ops::Elementwise op("gelu", {{10, 100}}, tx::f32, {}, {}, device());
  tx::Tensor c = op({x});
  CHECK(a.to_bytes() == b.to_bytes());
  CHECK(a.to_bytes() == c.to_bytes());
  auto h = tx::Tensor::from_doubles(tx::test::random_values(1000, tx::f16), {10, 100}, tx::f16, device());
  CHECK_THROWS_WITH_AS(tx::ops::add(x, h), doctest::Contains("dtype float16 but the op's dtype is float32"), tx::Error);
  auto y = tx::Tensor::from_doubles(tx::test::random_values(30, tx::f32), {3, 10}, tx::f32, device());
  CHECK_THROWS_WITH_AS(tx::ops::add(x, y), doctest::Contains("do not broadcast"), tx::Error);
  CHECK_THROWS_WITH_AS(tx::ops::exp(tx::Tensor::from_doubles({1, 2}, {2}, tx::i32, device())),
                       doctest::Contains("dtype int32 is not supported by exp"), tx::Error);
  CHECK_THROWS_WITH_AS(op({y}), doctest::Contains("shape (3, 10) but the op was built for (10, 100)"), tx::Error);
}

// GELU through the normal CDF keeps f32's relative accuracy where
// x/2 (1 + erf(x / sqrt2)) cancels: down to x = -14, where the result nears
// f32's smallest normal. 16-bit outputs (hardware approximations) within
// one ulp of the output dtype; the specials as torch.nn.functional.gelu.
TEST_CASE("ops: gelu keeps its relative accuracy in the far tail") {
  using namespace opscase;
  const std::size_t n = 200003;
  for (DType t : {f32, f16, bf16}) {
    INFO("gelu " << t.name());
    std::vector<double> x = test::random_values(n, t, -14.0, 6.0);
    const double specials[] = {INFINITY, -INFINITY, NAN, -0.0, 0.0, -13.9, 1e-30, -1e-30};
    for (std::size_t k = 0; k < std::size(specials); ++k) x[k * 1009] = quantize(specials[k], t);
    Tensor in = Tensor::from_doubles(x, {static_cast<std::int64_t>(n)}, t, device());
    Tensor out = Tensor::empty({static_cast<std::int64_t>(n)}, t, device());
    out.fill_bits(test::poison_bits(t));
    ops::gelu(in, out);
    std::vector<double> y = out.to_doubles();
    const double smallest = t == f16 ? 6.2e-5 : 1.2e-38;  // the output dtype's smallest normal
    double worst = 0;
    std::size_t at = 0;
    for (std::size_t i = 0; i < n; ++i) {
      double w = x[i] * 0.5 * std::erfc(-x[i] / std::sqrt(2.0));
      if (std::isnan(x[i]) || x[i] == -INFINITY) {
        CHECK_MESSAGE(std::isnan(y[i]), "gelu(" << x[i] << ") = " << y[i] << ", want NaN");
        continue;
      }
      if (std::isinf(w) || w == 0) {
        CHECK_MESSAGE(y[i] == w, "gelu(" << x[i] << ") = " << y[i] << ", want " << w);
        continue;
      }
      // Near-subnormal outputs: a CDF below 2^-126 flushes to zero (|gelu| < 1.6e-37).
      if (std::fabs(w) < smallest * 16) continue;
      double q = quantize(w, t);  // the correctly rounded result
      double units = std::fabs(y[i] - q) / ulp(q, t);
      if (!(units <= worst)) worst = units, at = i;
    }
    double limit = t == f32 ? 8 : 1;
    CHECK_MESSAGE(worst <= limit, "largest error " << worst << " ulp at x = " << x[at] << " (got " << y[at]
                                                    << "; seed " << test::rng_seed() << ")");
  }
}
