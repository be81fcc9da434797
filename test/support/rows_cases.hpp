// The row kernels (softmax, log_softmax, rms_norm, layer_norm, add_rms_norm)
// on the device TX_ROWS_DEVICE (host_rows.cpp: the host JIT; gpu_rows.cpp:
// the GPU), against float64 references written here. Fresh random inputs
// each run; outputs poisoned before every launch.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>

#include "test_support.hpp"
#include "tx/ops/ops.hpp"
#include "tx/tx.hpp"

#ifndef TX_ROWS_DEVICE
#error "define TX_ROWS_DEVICE before including rows_cases.hpp"
#endif

namespace rowcase {

using namespace tx;

inline Device device() { return TX_ROWS_DEVICE; }

enum class Op { softmax, log_softmax, rms_norm, layer_norm, add_rms_norm };
inline const char* name(Op op) {
  switch (op) {
    case Op::softmax:
      return "softmax";
    case Op::log_softmax:
      return "log_softmax";
    case Op::rms_norm:
      return "rms_norm";
    case Op::layer_norm:
      return "layer_norm";
    case Op::add_rms_norm:
      return "add_rms_norm";
  }
  return "?";
}

struct Inputs {
  std::vector<double> x, residual, weight, bias;
};

// The float64 reference of one op over rows of `cols` (x, residual already
// rounded to the dtype; h = x + residual rounded to it, as the op defines).
struct Want {
  std::vector<double> y, residual;
};
inline Want reference(Op op, const Inputs& in, std::int64_t cols, DType t, double eps) {
  const std::size_t n = in.x.size(), N = static_cast<std::size_t>(cols);
  Want w;
  w.y.resize(n);
  std::vector<double> x = in.x;
  if (op == Op::add_rms_norm) {
    for (std::size_t i = 0; i < n; ++i) x[i] = quantize(in.x[i] + in.residual[i], t);
    w.residual = x;
  }
  for (std::size_t r = 0; r < n / N; ++r) {
    const double* row = &x[r * N];
    double* y = &w.y[r * N];
    switch (op) {
      case Op::softmax:
      case Op::log_softmax: {
        double m = -std::numeric_limits<double>::infinity();
        for (std::size_t i = 0; i < N; ++i) m = std::max(m, row[i]);
        double s = 0;
        for (std::size_t i = 0; i < N; ++i) s += std::exp(row[i] - m);
        for (std::size_t i = 0; i < N; ++i)
          y[i] = op == Op::softmax ? std::exp(row[i] - m) / s : row[i] - m - std::log(s);
        break;
      }
      case Op::rms_norm:
      case Op::add_rms_norm: {
        double ss = 0;
        for (std::size_t i = 0; i < N; ++i) ss += row[i] * row[i];
        const double r_ = 1 / std::sqrt(ss / static_cast<double>(N) + eps);
        for (std::size_t i = 0; i < N; ++i)
          y[i] = row[i] * r_ * (in.weight.empty() ? 1.0 : in.weight[i]);
        break;
      }
      case Op::layer_norm: {
        double mean = 0;
        for (std::size_t i = 0; i < N; ++i) mean += row[i];
        mean /= static_cast<double>(N);
        double var = 0;
        for (std::size_t i = 0; i < N; ++i) var += (row[i] - mean) * (row[i] - mean);
        const double r_ = 1 / std::sqrt(var / static_cast<double>(N) + eps);
        for (std::size_t i = 0; i < N; ++i)
          y[i] = (row[i] - mean) * r_ * (in.weight.empty() ? 1.0 : in.weight[i]) +
                 (in.bias.empty() ? 0.0 : in.bias[i]);
        break;
      }
    }
  }
  return w;
}

// Tolerances as the elementwise ops' (relative to the dtype); an absolute
// part where the output is a difference (log_softmax near its max,
// layer_norm near the mean) and for f32 the statistics' own rounding.
inline double atol(Op op, DType t, std::int64_t cols) {
  const double r = test::default_rtol(t);
  if (op == Op::log_softmax) return r * (1 + std::log(static_cast<double>(cols)));
  if (op == Op::layer_norm) return r;
  return test::subnormal_ulp(t);
}

inline Tensor make(const std::vector<double>& v, std::vector<std::int64_t> shape, DType t) {
  return Tensor::from_doubles(v, std::move(shape), t, device());
}

// One op on (rows, cols) with the given inputs: y (and the new residual)
// against the reference.
inline void check(Op op, const Inputs& in, std::int64_t rows, std::int64_t cols, DType t, DType wt,
                  double eps = 1e-5) {
  const std::string what = std::string(name(op)) + " rows " + std::to_string(rows) + " cols " +
                           std::to_string(cols) + " " + t.name() + " weight " + wt.name();
  INFO(what);
  Tensor x = make(in.x, {rows, cols}, t);
  Tensor w = in.weight.empty() ? Tensor() : make(in.weight, {cols}, wt);
  Tensor b = in.bias.empty() ? Tensor() : make(in.bias, {cols}, wt);
  Want want = reference(op, in, cols, t, eps);
  std::vector<double> got, got_res;
  switch (op) {
    case Op::softmax:
      got = ops::softmax(x).to_doubles();
      break;
    case Op::log_softmax:
      got = ops::log_softmax(x).to_doubles();
      break;
    case Op::rms_norm:
      got = ops::rms_norm(x, w, eps).to_doubles();
      break;
    case Op::layer_norm:
      got = ops::layer_norm(x, w, b, eps).to_doubles();
      break;
    case Op::add_rms_norm: {
      Tensor res = make(in.residual, {rows, cols}, t);
      auto [y, h] = ops::add_rms_norm(x, res, w, eps);
      got = y.to_doubles();
      got_res = h.to_doubles();
      CHECK(res.to_doubles() == in.residual);  // the functional form leaves residual alone
      // Into tensors the caller allocated (poisoned first): the same bits.
      Tensor yo = Tensor::empty({rows, cols}, t, x.device());
      Tensor ho = Tensor::empty({rows, cols}, t, x.device());
      yo.fill_bits(~0ull);  // NaN in every float dtype
      ho.fill_bits(~0ull);
      ops::add_rms_norm_into(yo, ho, x, res, w, eps);
      CHECK(yo.to_doubles() == got);
      CHECK(ho.to_doubles() == got_res);
      // The in-place form: the same bits.
      ops::add_rms_norm_(x, res, w, eps);
      CHECK(x.to_doubles() == got);
      CHECK(res.to_doubles() == got_res);
      break;
    }
  }
  // The reference rounded to the dtype (a log_softmax below f16's range is -inf there too).
  for (double& w_ : want.y) w_ = quantize(w_, t);
  CHECK(test::max_rel_error(got, want.y, atol(op, t, cols), test::default_rtol(t)) <= 1.0);
  if (op == Op::add_rms_norm) CHECK(got_res == want.residual);
}

inline Inputs random_inputs(Op op, std::int64_t rows, std::int64_t cols, DType t, DType wt,
                            double lo = -4, double hi = 4) {
  const auto n = static_cast<std::size_t>(rows * cols);
  Inputs in;
  in.x = test::random_values(n, t, lo, hi);
  if (op == Op::add_rms_norm) in.residual = test::random_values(n, t, lo, hi);
  if (op == Op::rms_norm || op == Op::layer_norm || op == Op::add_rms_norm)
    in.weight = test::random_values(static_cast<std::size_t>(cols), wt, 0.5, 1.5);
  if (op == Op::layer_norm)
    in.bias = test::random_values(static_cast<std::size_t>(cols), wt, -1, 1);
  return in;
}

constexpr Op kAll[] = {Op::softmax, Op::log_softmax, Op::rms_norm, Op::layer_norm,
                       Op::add_rms_norm};

}  // namespace rowcase

TEST_CASE("rows: every op, rows of 1 to 100000 elements, f32 / f16 / bf16") {
  using namespace rowcase;
  for (DType t : {f32, f16, bf16})
    for (Op op : kAll)
      for (auto [rows, cols] : {std::pair<std::int64_t, std::int64_t>{3, 1},
                                {5, 7},
                                {4, 1000},
                                {9, 1024},
                                {3, 4096},
                                {2, 16384},
                                {2, 100000}}) {
        // weight in x's dtype, and in f32 on one shape
        DType wt = cols == 1000 ? f32 : t;
        check(op, random_inputs(op, rows, cols, t, wt), rows, cols, t, wt);
      }
}

TEST_CASE("rows: -inf entries, large magnitudes, all-equal rows") {
  using namespace rowcase;
  const double inf = std::numeric_limits<double>::infinity();
  for (DType t : {f32, f16, bf16}) {
    // softmax with -inf entries (masked logits): those get 0 (log: -inf).
    for (Op op : {Op::softmax, Op::log_softmax}) {
      Inputs in = random_inputs(op, 4, 1000, t, t);
      for (std::size_t i = 0; i < in.x.size(); i += 3) in.x[i] = -inf;
      check(op, in, 4, 1000, t, t);
      // Large magnitudes: the max keeps exp in range.
      const double big = t == f16 ? 6e4 : 1e30;
      Inputs large = random_inputs(op, 3, 4096, t, t, -big, big);
      check(op, large, 3, 4096, t, t);
    }
    // All-equal rows: softmax 1/N, layer_norm gives the bias.
    for (Op op : kAll) {
      Inputs in = random_inputs(op, 2, 4096, t, t);
      std::fill(in.x.begin(), in.x.end(), quantize(1.25, t));
      check(op, in, 2, 4096, t, t);
    }
    // Norms of large values (|x| up to 1e4: x^2 sums stay finite in f32).
    for (Op op : {Op::rms_norm, Op::layer_norm, Op::add_rms_norm}) {
      const double big = t == f16 ? 1e4 : 1e4;
      check(op, random_inputs(op, 3, 4096, t, t, -big, big), 3, 4096, t, t);
    }
  }
  // A row of only -inf: NaN, as torch.softmax.
  tx::Tensor x = rowcase::make(std::vector<double>(64, -inf), {1, 64}, tx::f32);
  for (double y : tx::ops::softmax(x).to_doubles()) CHECK(std::isnan(y));
}

TEST_CASE("rows: layer_norm and rms_norm without weight or bias; 3-D inputs; strided x") {
  using namespace rowcase;
  using namespace tx;
  Inputs in = random_inputs(Op::layer_norm, 6, 512, bf16, bf16);
  in.weight.clear();
  in.bias.clear();
  check(Op::layer_norm, in, 6, 512, bf16, bf16);
  Inputs r = random_inputs(Op::rms_norm, 6, 512, f16, f16);
  r.weight.clear();
  check(Op::rms_norm, r, 6, 512, f16, f16);
  // [B, S, N]: rows are the last dimension.
  std::vector<double> v = test::random_values(2 * 3 * 256, f32);
  Tensor x3 = make(v, {2, 3, 256}, f32);
  Tensor y3 = ops::softmax(x3);
  CHECK(y3.shape() == std::vector<std::int64_t>{2, 3, 256});
  Want w = reference(Op::softmax, {v, {}, {}, {}}, 256, f32, 0);
  CHECK(test::max_rel_error(y3.to_doubles(), w.y, 0, 1e-5) <= 1.0);
  // A transposed x: copied to a contiguous tensor first, then rows as usual.
  std::vector<double> a = test::random_values(64 * 32, f32);
  Tensor at = make(a, {64, 32}, f32).transpose(0, 1);  // (32, 64), strided
  std::vector<double> contiguous(32 * 64);
  for (int i = 0; i < 32; ++i)
    for (int j = 0; j < 64; ++j) contiguous[static_cast<std::size_t>(i * 64 + j)] = a[j * 32 + i];
  Want wt = reference(Op::softmax, {contiguous, {}, {}, {}}, 64, f32, 0);
  CHECK(test::max_rel_error(ops::softmax(at).to_doubles(), wt.y, 0, 1e-5) <= 1.0);
}

TEST_CASE("rows: bad inputs are tx errors naming the op and the operand") {
  using namespace tx;
  Tensor x = rowcase::make(std::vector<double>(8 * 16, 1.0), {8, 16}, f32);
  auto expect = [](const std::function<void()>& f, const std::string& op,
                   const std::string& operand, const std::string& what) {
    try {
      f();
      FAIL("expected a tx error: " << what);
    } catch (const Error& e) {
      INFO(e.what());
      CHECK(e.op() == op);
      CHECK(e.operand() == operand);
      CHECK(std::string(e.reason()).find(what) != std::string::npos);
      CHECK(e.loc().line > 0);
    }
  };
  expect([&] { ops::softmax(x, 0); }, "tx.ops.softmax", "dim", "last dimension only");
  expect([&] { ops::rms_norm(x, rowcase::make(std::vector<double>(8, 1.0), {8}, f32)); },
         "tx.ops.rms_norm", "weight", "it must be (16,)");
  expect([&] { ops::rms_norm(x, rowcase::make(std::vector<double>(16, 1.0), {16}, f16)); },
         "tx.ops.rms_norm", "weight", "x's dtype or float32");
  expect([&] { ops::layer_norm(x, Tensor(), Tensor(), -1.0); }, "tx.ops.layer_norm", "eps",
         "finite and >= 0");
  expect(
      [&] {
        ops::softmax(rowcase::make({1, 2, 3}, {3}, i32));
      },
      "tx.ops.softmax", "x", "not supported");
  expect(
      [&] {
        ops::add_rms_norm(x, rowcase::make(std::vector<double>(16, 1.0), {16}, f32), Tensor());
      },
      "tx.ops.add_rms_norm", "residual", "but x is (8, 16)");
  expect([&] { ops::softmax(Tensor()); }, "tx.ops.softmax", "x", "undefined");
  {
    Tensor r = rowcase::make(std::vector<double>(8 * 16, 1.0), {8, 16}, f32);
    Tensor w = rowcase::make(std::vector<double>(16, 1.0), {16}, f32);
    Tensor good = Tensor::empty({8, 16}, f32, rowcase::device());
    Tensor small = Tensor::empty({8, 8}, f32, rowcase::device());
    expect([&] { ops::add_rms_norm_into(good, small, x, r, w); }, "tx.ops.add_rms_norm",
           "residual_out", "must have x's shape (8, 16)");
    Tensor half = Tensor::empty({8, 16}, f16, rowcase::device());
    expect([&] { ops::add_rms_norm_into(half, good, x, r, w); }, "tx.ops.add_rms_norm", "out",
           "dtype float32");
  }
  Tensor out_i32 = Tensor::empty({8, 16}, i32, rowcase::device());
  expect([&] { ops::rms_norm_out(out_i32, x, Tensor()); }, "tx.ops.rms_norm", "out",
         "not an output dtype");
  Tensor out_fp8 = Tensor::empty({8, 16}, f8e4m3, rowcase::device());
  expect([&] { ops::rms_norm_out(out_fp8, x, Tensor(), 1e-6, 0.0); }, "tx.ops.rms_norm", "scale",
         "finite and > 0");
  Tensor out_short = Tensor::empty({8, 8}, f8e4m3, rowcase::device());
  expect([&] { ops::layer_norm_out(out_short, x, Tensor(), Tensor()); }, "tx.ops.layer_norm", "out",
         "but x is (8, 16)");
}

TEST_CASE("rows: layer_norm's one-reduction statistics hold for an outlier first element") {
  // bf16 rows up to 2^14 and f16 rows up to 2^11 take both statistics in one
  // reduction around x[0]; its worst case is x[0] far from the rest.
  using namespace rowcase;
  for (auto [t, cols] : {std::pair<DType, std::int64_t>{bf16, 16384}, {bf16, 4096}, {f16, 2048}})
    for (double first : {1000.0, -300.0}) {
      Inputs in = random_inputs(Op::layer_norm, 3, cols, t, t, -1, 1);
      for (std::int64_t r = 0; r < 3; ++r)
        in.x[static_cast<std::size_t>(r * cols)] = quantize(first, t);
      // and a row on a large common offset: 512 + small values
      for (std::int64_t i = 0; i < cols; ++i)
        in.x[static_cast<std::size_t>(2 * cols + i)] =
            quantize(512.0 + in.x[static_cast<std::size_t>(2 * cols + i)] * 8, t);
      check(Op::layer_norm, in, 3, cols, t, t);
    }
}

TEST_CASE("rows: the norms into fp8 (e4m3 saturating, e5m2) and other dtypes, scaled") {
  using namespace rowcase;
  for (DType t : {f32, bf16})
    for (DType out : {f8e4m3, f8e5m2, t == f32 ? bf16 : f32})
      for (Op op : {Op::rms_norm, Op::layer_norm, Op::add_rms_norm})
        for (auto [rows, cols] : {std::pair<std::int64_t, std::int64_t>{5, 1000}, {3, 8192}})
          // |y| up to ~2.6 (x uniform in [-4, 4], weight up to 1.5): a scale of
          // 1 / 256 puts the largest past e4m3's 448 (saturated), most below.
          for (double scale : {1.0, 1.0 / 256}) {
            INFO(std::string(name(op))
                 << " " << t.name() << " -> " << out.name() << " rows " << rows << " cols " << cols
                 << " scale " << scale << " (TX_TEST_SEED=" << test::rng_seed() << ")");
            Inputs in = random_inputs(op, rows, cols, t, t);
            Tensor x = make(in.x, {rows, cols}, t);
            Tensor w = make(in.weight, {cols}, t);
            Tensor b = in.bias.empty() ? Tensor() : make(in.bias, {cols}, t);
            Tensor y = Tensor::empty({rows, cols}, out, device());
            y.fill_bits(out.bits == 8 ? 0x7f : out.bits == 16 ? 0x7fc1 : 0x7fc0dead);  // NaNs
            Want want = reference(op, in, cols, t, 1e-5);
            Tensor res;
            switch (op) {
              case Op::rms_norm:
                ops::rms_norm_out(y, x, w, 1e-5, scale);
                break;
              case Op::layer_norm:
                ops::layer_norm_out(y, x, w, b, 1e-5, scale);
                break;
              default:
                res = make(in.residual, {rows, cols}, t);
                ops::add_rms_norm_out(y, x, res, w, 1e-5, scale);
                CHECK(res.to_doubles() == want.residual);  // the new residual, in place
                break;
            }
            // One rounding of y / scale into out (e4m3 saturates at 448).
            int saturated = 0;
            for (double& v : want.y) {
              v = quantize(v / scale, out);
              saturated += std::fabs(v) == 448.0 && out == f8e4m3;
            }
            if (scale != 1.0 && out == f8e4m3) CHECK(saturated > 0);  // the case is exercised
            // f32 math then one rounding (the absolute part, near the mean, grows by 1 / scale).
            // The f32 value can land on the other side of a rounding boundary than the
            // exact one: one unit of out apart. For e5m2 (2 mantissa bits) that is up to
            // 25% of the value, twice the usual fp8 tolerance (seen in CI: 1.54x it).
            const double rtol = out == f8e5m2 ? 0.2501 : test::default_rtol(out);
            CHECK(test::max_rel_error(y.to_doubles(), want.y, atol(op, out, cols) / scale, rtol) <=
                  1.0);
          }
}
