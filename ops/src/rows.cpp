// Row kernels (rows.hpp): softmax, log_softmax, rms_norm, layer_norm and
// add_rms_norm as tx tile programs.
//
// One kernel per (op, dtypes, row length N, configuration) serves every row
// count (the flat extent n = rows * N is a T::dim). A row is owned by one
// warp (rows up to 4 KB: four rows per CTA, no barrier) or by one CTA. Its
// owner's threads take chunks of v elements (16-byte vector copies where N
// allows): thread t's chunk k starts at column (k * RT + t) * v, RT the
// threads per row, so a warp's copies are contiguous. With at most 128
// bytes per thread the row stays in registers between the reduction and
// the epilogue (x is read once); longer rows are read again for each pass
// (from L2: a row of 10^5 f32 is 400 KB).
//
// A row statistic (a max, a sum) is a reduction over all RT threads: each
// thread folds its elements (Tx.thread), a warp folds its lanes (Tx.warp
// over a tile with one element per lane: the shuffle butterfly), and, for a
// CTA per row, the warps' results meet in shared memory behind one barrier,
// where every thread reads them all (the broadcast of the statistic).
#include "tx/ops/rows.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <limits>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "special_ops.hpp"

namespace tx::ops {

namespace {

enum class RowOp { softmax, log_softmax, rms_norm, layer_norm, add_rms_norm };

const char* row_op_name(RowOp op) {
  switch (op) {
    case RowOp::softmax:
      return "softmax";
    case RowOp::log_softmax:
      return "log_softmax";
    case RowOp::rms_norm:
      return "rms_norm";
    case RowOp::layer_norm:
      return "layer_norm";
    case RowOp::add_rms_norm:
      return "add_rms_norm";
  }
  return "?";
}

std::string op_error_name(RowOp op) { return std::string("tx.ops.") + row_op_name(op); }

struct RowSpec {
  RowOp op = RowOp::softmax;
  DType dtype = f32;
  DType wdtype = f32;  // weight and bias
  DType ydtype = f32;  // y: dtype, or (the norms) another float dtype, fp8 included
  bool has_weight = false, has_bias = false;
  std::int64_t cols = 0;  // N
  int v = 1;              // elements per chunk
  int threads = 128;      // per CTA
  int row_threads = 32;   // RT: 32 (a warp per row) or threads (a CTA per row)
  int chunks = 1;         // K per thread per row
  bool cached = true;     // the row stays in registers
  bool operator==(const RowSpec&) const = default;
  int rows_per_cta() const { return threads / row_threads; }
  std::string name() const {
    std::ostringstream o;
    o << "tx_" << row_op_name(op) << "_" << dtype.short_name();
    if (has_weight) o << "_w" << wdtype.short_name();
    if (has_bias) o << "_b";
    if (ydtype != dtype) o << "_y" << ydtype.short_name();
    o << "_n" << cols << "_t" << threads << "_rt" << row_threads << "_v" << v << "_k" << chunks
      << (cached ? "_reg" : "_stream");
    return o.str();
  }
};

// The configuration for rows of N elements of `t`.
RowSpec plan(RowOp op, DType t, std::int64_t cols) {
  RowSpec s;
  s.op = op;
  s.dtype = t;
  s.ydtype = t;
  s.cols = cols;
  s.v = 1;
  while (s.v * 2 * t.bytes() <= 16 && cols % (s.v * 2) == 0) s.v *= 2;
  const std::int64_t vectors = cols / s.v;
  const std::int64_t row_bytes = cols * t.bytes();
  // Registers a thread may hold its part of the row in: 128 bytes (32
  // registers), as 8 chunks of f32 or 4 of bf16.
  auto fits = [&](std::int64_t chunks) { return chunks * s.v * t.bytes() <= 128; };
  if (row_bytes <= 4096) {
    // A warp per row (no barrier), four rows per CTA.
    s.row_threads = 32;
    s.threads = 128;
    s.chunks = static_cast<int>((vectors + 31) / 32);
  } else {
    // A CTA per row, each thread with 4 to 8 chunks in flight (measured on
    // an H200: one 16-byte chunk per thread left a (16384, 4096) bf16
    // softmax at 0.77 of copy, its loads idle while the CTA reduced), 128
    // to 512 threads; up to 1024 where fewer would not hold the row.
    auto round32 = [](std::int64_t x) { return (x + 31) / 32 * 32; };
    // softmax and log_softmax, with two exps per element, keep 8 chunks per
    // thread where the row allows (H200, (4096, 16384) bf16: 0.85 of copy
    // with 4, 0.92 with 8), the norms 4 (rms_norm 0.94 with 4, 0.91 with 8).
    const std::int64_t per_thread = op == RowOp::softmax || op == RowOp::log_softmax ? 8 : 4;
    std::int64_t threads =
        std::clamp<std::int64_t>(round32((vectors + per_thread - 1) / per_thread), 128, 512);
    if (!fits((vectors + threads - 1) / threads)) threads = 1024;
    s.threads = static_cast<int>(std::min<std::int64_t>(threads, round32(vectors)));
    s.threads = std::max(s.threads, 32);
    s.row_threads = s.threads;
    s.chunks = static_cast<int>((vectors + s.threads - 1) / s.threads);
  }
  s.cached = fits(s.chunks);
  return s;
}

PrimFunc build_rows(const RowSpec& s) {
  const RowOp op = s.op;
  const int v = s.v, K = s.chunks, RT = s.row_threads, rows_per_cta = s.rows_per_cta();
  const auto N = static_cast<int>(s.cols);
  const bool add = op == RowOp::add_rms_norm;
  std::vector<std::string> names{"x_ptr"};
  if (add) names.push_back("residual_ptr");
  if (s.has_weight) names.push_back("weight_ptr");
  if (s.has_bias) names.push_back("bias_ptr");
  names.push_back("y_ptr");
  if (add) names.push_back("residual_out_ptr");
  names.push_back("eps_ptr");
  // An output of another dtype is y / scale: the kernel takes 1 / scale.
  const bool scaled = s.ydtype != s.dtype;
  if (scaled) names.push_back("inv_scale_ptr");
  return T::prim_func_n(s.name(), names, [&](const std::vector<Handle>& h) {
    std::size_t at = 0;
    Var n = T::dim("n", {.min = 1, .max = 2147483647, .multiple_of = s.cols});
    auto X = T::match_buffer(h[at++], {n}, s.dtype, std::nullopt, "x");
    TileBuffer Res, W, B;  // residual, weight, bias
    if (add) Res = T::match_buffer(h[at++], {n}, s.dtype, std::nullopt, "residual");
    if (s.has_weight) W = T::match_buffer(h[at++], {s.cols}, s.wdtype, std::nullopt, "weight");
    if (s.has_bias) B = T::match_buffer(h[at++], {s.cols}, s.wdtype, std::nullopt, "bias");
    auto Y = T::match_buffer(h[at++], {n}, s.ydtype, std::nullopt, "y");
    TileBuffer ResOut;
    if (add) ResOut = T::match_buffer(h[at++], {n}, s.dtype, std::nullopt, "residual_out");
    Var eps = T::match_scalar(h[at++], f32, "eps");
    Var inv_scale;
    if (scaled) inv_scale = T::match_scalar(h[at++], f32, "inv_scale");

    auto bx = T::cta_id({ceildiv(n, N * rows_per_cta)}, "bx");
    auto warp = T::warp_id({s.threads / 32}, "warp");
    auto lane = T::lane_id({32}, "lane");
    auto tid = T::thread_id({s.threads}, "tid");
    // This thread's row and its index among the row's threads.
    Var row = T::let(rows_per_cta == 1 ? Expr(bx) : bx * rows_per_cta + warp, "row");
    Var t = T::let(rows_per_cta == 1 ? Expr(tid) : Expr(lane), "t");
    Var base = T::let(row * N, "base");

    auto f32_of = [](const Expr& e) { return e.dtype() == f32 ? e : Expr(cast(e, f32)); };
    auto out_of = [&](const Expr& e) { return s.dtype == f32 ? e : Expr(cast(e, s.dtype)); };

    // A statistic of the row: every thread's partial folded over the row's
    // threads; every thread gets the result. The partials form a tile spread
    // over the row's threads (one element each, written through the
    // thread's own view of it); Tx.warp.sum/max folds a warp's with the
    // shuffle butterfly, Tx.cta.sum/max a CTA's across its warps
    // (reduction/cross_warp: one value per warp through shared memory, one
    // barrier).
    int reductions = 0;
    auto row_reduce_n = [&](const std::vector<Expr>& partial, bool is_max) -> std::vector<Var> {
      const std::string tag = std::to_string(reductions++);
      const auto m = static_cast<std::int64_t>(partial.size());
      const bool warp_row = RT == 32;
      // Thread t holds element (i, t) of the partials: its own m registers.
      auto parts = T::alloc_buffer({m, RT}, f32, scope::local,
                                   warp_row ? TileLayout(S({m, 32}, {1, 1 * laneid}))
                                            : TileLayout(S({m, RT}, {1, 1 * axes::tx})),
                                   "partials" + tag);
      for (std::int64_t i = 0; i < m; ++i) parts.local()(i) = partial[static_cast<std::size_t>(i)];
      auto total = T::alloc_buffer({m}, f32, scope::local,
                                   warp_row ? TileLayout(S({m}), R({32}, {1 * laneid}))
                                            : TileLayout(S({m}), R({RT}, {1 * axes::tx})),
                                   "total" + tag);
      if (warp_row) {
        if (is_max)
          Tx::warp::max(total, parts, {.axes = {1}});
        else
          Tx::warp::sum(total, parts, {.axes = {1}});
      } else {
        if (is_max)
          Tx::cta::max(total, parts, {.axes = {1}});
        else
          Tx::cta::sum(total, parts, {.axes = {1}});
      }
      std::vector<Var> out;
      for (std::int64_t i = 0; i < m; ++i)
        out.push_back(T::let(total(i), "stat" + tag + "_" + std::to_string(i)));
      return out;
    };
    auto row_reduce = [&](const Expr& partial, bool is_max) -> Var {
      return row_reduce_n({partial}, is_max)[0];
    };

    // Chunk k of this thread: column c = (k * RT + t) * v. Chunks that
    // may pass the end of the row are guarded (`c < N`; lowering then
    // knows c <= N - v: the tile is inside).
    auto column = [&](const Expr& k) { return (k * RT + t) * v; };
    const bool ragged = s.cols % (static_cast<std::int64_t>(RT) * v) != 0;
    auto for_chunks = [&](const std::function<void(const Expr& k, const Var& c)>& body) {
      auto one = [&](const Expr& k, bool maybe_out) {
        Var c = T::let(column(k), "c");
        if (maybe_out)
          T::if_(c < N, [&] { body(k, c); });
        else
          body(k, c);
      };
      if (s.cached) {
        for (int k = 0; k < K; ++k) one(Expr(k), ragged && k == K - 1);
      } else {
        for (Var k : T::serial(K, "k")) one(k, ragged);
      }
    };

    // The row's elements in registers (cached), or a chunk at a time.
    TileBuffer rowbuf =
        T::alloc_buffer({s.cached ? K * v : v}, s.dtype, scope::local, std::nullopt, "xr");
    auto chunk_of = [&](const Expr& k) {
      return s.cached ? rowbuf[region(span(k * v, v))] : rowbuf[region(span(0, v))];
    };
    auto slot = [&](const Expr& k, const Expr& j) { return s.cached ? k * v + j : j; };
    // Loads chunk k of the row into registers. The add: h = x + residual,
    // rounded to the dtype, written as the new residual in the first pass
    // and read back from there in the later ones (residual_out may be
    // residual itself: vLLM's in-place form).
    auto load = [&](const Expr& k, const Var& c, bool first_pass) {
      if (add && !first_pass) {
        Tx::thread::copy(chunk_of(k), ResOut[region(span(base + c, v))]);
        return;
      }
      Tx::thread::copy(chunk_of(k), X[region(span(base + c, v))]);
      if (!add) return;
      auto rr = T::alloc_buffer({v}, s.dtype, scope::local, std::nullopt, "rr");
      Tx::thread::copy(rr, Res[region(span(base + c, v))]);
      for (Var j : T::unroll(v, "j"))
        rowbuf(slot(k, j)) = out_of(f32_of(rowbuf(slot(k, j))) + f32_of(rr(j)));
      Tx::thread::copy(ResOut[region(span(base + c, v))], chunk_of(k));
    };

    T::if_(base + N <= n, [&] {
      auto acc = T::alloc_buffer({2}, f32, scope::local, std::nullopt, "acc");
      // layer_norm of f16 / bf16 rows in registers: both statistics in one
      // reduction (one barrier, not two), around the row's first element c0:
      // S1 = sum(x - c0), S2 = sum((x - c0)^2), var = S2 / N - (S1 / N)^2.
      // The cancellation costs about 2^-24 * (1 + z^2) relative in var, z
      // the z-score of x[0], z^2 <= N - 1 for any row (Samuelson): for bf16
      // rows up to 2^14 at most 2^-10 in var, 2^-11 in rstd, under bf16's
      // half ulp (2^-9); for f16 (half ulp 2^-12) rows up to 2^11. f32 rows,
      // longer rows and rows not held in registers keep the two-pass form.
      const bool shifted =
          op == RowOp::layer_norm && s.cached &&
          ((s.dtype == bf16 && N <= (1 << 14)) || (s.dtype == f16 && N <= (1 << 11)));
      // Pass 1 (loads the row when it is cached).
      const bool first_is_max = op == RowOp::softmax || op == RowOp::log_softmax;
      acc(0) = first_is_max ? -std::numeric_limits<float>::infinity() : 0.0f;
      Var c0;
      if (shifted) {
        c0 = T::let(f32_of(X(base)), "c0");
        acc(1) = 0.0f;
      }
      for_chunks([&](const Expr& k, const Var& c) {
        load(k, c, /*first_pass=*/true);
        for (Var j : T::unroll(v, "j")) {
          Var x = T::let(f32_of(rowbuf(slot(k, j))), "x");
          if (first_is_max) {
            acc(0) = max(acc(0), x);
          } else if (shifted) {
            Var d = T::let(x - c0, "d");
            acc(0) = acc(0) + d;
            acc(1) = acc(1) + d * d;
          } else if (op == RowOp::layer_norm) {
            acc(0) = acc(0) + x;
          } else {
            acc(0) = acc(0) + x * x;
          }
        }
      });
      Var stat1, stat2;
      if (shifted) {
        auto st = row_reduce_n({acc(0), acc(1)}, false);
        Var d_mean = T::let(st[0] * (1.0f / static_cast<float>(N)), "d_mean");
        stat1 = T::let(c0 + d_mean, "mean");  // the mean itself (not a sum)
        stat2 =
            T::let(max(st[1] - d_mean * st[0], 0.0f), "m2");  // sum((x - mean)^2) = S2 - S1^2 / N
      } else {
        stat1 = row_reduce(acc(0), first_is_max);
      }
      // Pass 2: a second statistic around the first.
      if (!shifted && op != RowOp::rms_norm && op != RowOp::add_rms_norm) {
        Var mean;
        if (op == RowOp::layer_norm) mean = T::let(stat1 * (1.0f / static_cast<float>(N)), "mean");
        acc(0) = 0.0f;
        for_chunks([&](const Expr& k, const Var& c) {
          if (!s.cached) load(k, c, false);
          for (Var j : T::unroll(v, "j")) {
            Var x = T::let(f32_of(rowbuf(slot(k, j))), "x");
            if (op == RowOp::layer_norm) {
              Var d = T::let(x - mean, "d");
              acc(0) = acc(0) + d * d;
            } else {
              acc(0) = acc(0) + exp(x - stat1);
            }
          }
        });
        stat2 = row_reduce(acc(0), false);
      }
      // The epilogue's per-row scalars.
      Var scale, shift;
      switch (op) {
        case RowOp::softmax:
          scale = T::let(1.0f / stat2, "inv_sum");
          break;
        case RowOp::log_softmax:
          // (x - max) - log(sum), in that order: max + log(sum) would lose
          // log(sum) next to a max of 1e30.
          shift = T::let(log(stat2), "log_sum");
          break;
        case RowOp::rms_norm:
        case RowOp::add_rms_norm:
          scale = T::let(rsqrt(stat1 * (1.0f / static_cast<float>(N)) + eps), "rstd");
          break;
        case RowOp::layer_norm:
          shift = shifted ? stat1 : T::let(stat1 * (1.0f / static_cast<float>(N)), "mu");
          scale = T::let(rsqrt(stat2 * (1.0f / static_cast<float>(N)) + eps), "rstd");
          break;
      }
      // Pass 3: y.
      for_chunks([&](const Expr& k, const Var& c) {
        if (!s.cached) load(k, c, false);
        TileBuffer wr, br;
        if (s.has_weight) {
          wr = T::alloc_buffer({v}, s.wdtype, scope::local, std::nullopt, "wr");
          Tx::thread::copy(wr, W[region(span(c, v))]);
        }
        if (s.has_bias) {
          br = T::alloc_buffer({v}, s.wdtype, scope::local, std::nullopt, "br");
          Tx::thread::copy(br, B[region(span(c, v))]);
        }
        auto yr = T::alloc_buffer({v}, s.ydtype, scope::local, std::nullopt, "yr");
        for (Var j : T::unroll(v, "j")) {
          Var x = T::let(f32_of(rowbuf(slot(k, j))), "x");
          Expr y;
          switch (op) {
            case RowOp::softmax:
              y = exp(x - stat1) * scale;
              break;
            case RowOp::log_softmax:
              y = (x - stat1) - shift;
              break;
            case RowOp::rms_norm:
            case RowOp::add_rms_norm:
              y = x * scale;
              break;
            case RowOp::layer_norm:
              y = (x - shift) * scale;
              break;
          }
          if (s.has_weight) y = y * f32_of(wr(j));
          if (s.has_bias) y = y + f32_of(br(j));
          if (scaled) y = y * inv_scale;
          // One rounding into y's dtype (fp8: to nearest, e4m3 saturating).
          yr(j) = s.ydtype == f32 ? y : Expr(cast(y, s.ydtype));
        }
        Tx::thread::copy(Y[region(span(base + c, v))], yr);
      });
    });
  });
}

Kernel row_kernel_for(const RowSpec& s, const Device& d, SourceLoc loc) {
  static std::mutex mu;
  static auto* recent = new std::vector<std::pair<std::pair<RowSpec, Device>, Kernel>>();
  {
    std::lock_guard<std::mutex> lock(mu);
    for (const auto& [key, k] : *recent)
      if (key.first == s && key.second == d) return k;
  }
  const std::string op = op_error_name(s.op);
  Kernel k = detail::special_cached(s.name() + "|" + d.str(), [&] {
    try {
      return compile(build_rows(s), {.device = d});
    } catch (const Error& e) {
      fail(op, e.operand(), loc, e.reason(), "  raised by " + e.op() + "\n" + e.detail());
    }
  });
  std::lock_guard<std::mutex> lock(mu);
  recent->emplace_back(std::pair{s, d}, k);
  return k;
}

std::string shape_str(const std::vector<std::int64_t>& s) {
  std::string r = "(";
  for (std::size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + (s.size() == 1 ? ",)" : ")");
}

struct Prepared {
  RowSpec spec;
  Tensor x, residual, weight, bias;  // contiguous
  std::int64_t rows = 0;
};

Prepared prepare(RowOp op, const Tensor& x, const Tensor* residual, const Tensor& weight,
                 const Tensor& bias, SourceLoc loc) {
  const std::string name = op_error_name(op);
  if (!x.defined()) fail(name, "x", loc, "tensor is undefined");
  const DType t = x.dtype();
  if (t != f32 && t != f16 && t != bf16)
    fail(name, "x", loc, "dtype " + t.name() + " is not supported (f32, f16, bf16)");
  if (x.shape().empty())
    fail(name, "x", loc, "is a scalar (shape ()); rows need at least one dimension");
  const std::int64_t cols = x.shape().back();
  if (cols <= 0 || x.numel() == 0)
    fail(name, "x", loc, "shape " + shape_str(x.shape()) + " has no elements");
  if (x.numel() >= std::numeric_limits<std::int32_t>::max())
    fail(name, "x", loc, "tensors of 2^31 elements or more are not supported yet");
  Prepared p;
  p.x = x.is_contiguous() ? x : x.contiguous();
  p.rows = x.numel() / cols;
  const Device d = x.device();
  auto check_vec = [&](const Tensor& w, const char* operand) {
    if (!w.defined()) return;
    if (w.shape() != std::vector<std::int64_t>{cols})
      fail(name, operand, loc,
           "shape " + shape_str(w.shape()) + " but the rows have " + std::to_string(cols) +
               " elements: it must be (" + std::to_string(cols) + ",)");
    if (w.dtype() != t && w.dtype() != f32)
      fail(name, operand, loc,
           "dtype " + w.dtype().name() + " but x is " + t.name() +
               " (it must be x's dtype or float32)");
    if (!(w.device() == d))
      fail(name, operand, loc, "is on " + w.device().str() + " but x is on " + d.str());
  };
  check_vec(weight, "weight");
  check_vec(bias, "bias");
  if (weight.defined() && bias.defined() && weight.dtype() != bias.dtype())
    fail(name, "bias", loc,
         "dtype " + bias.dtype().name() + " but weight is " + weight.dtype().name());
  if (residual) {
    const Tensor& r = *residual;
    if (!r.defined()) fail(name, "residual", loc, "tensor is undefined");
    if (r.shape() != x.shape())
      fail(name, "residual", loc,
           "shape " + shape_str(r.shape()) + " but x is " + shape_str(x.shape()));
    if (r.dtype() != t)
      fail(name, "residual", loc, "dtype " + r.dtype().name() + " but x is " + t.name());
    if (!(r.device() == d))
      fail(name, "residual", loc, "is on " + r.device().str() + " but x is on " + d.str());
    p.residual = r.is_contiguous() ? r : r.contiguous();
  }
  p.spec = plan(op, t, cols);
  p.weight = weight.defined() ? (weight.is_contiguous() ? weight : weight.contiguous()) : Tensor();
  p.bias = bias.defined() ? (bias.is_contiguous() ? bias : bias.contiguous()) : Tensor();
  p.spec.has_weight = weight.defined();
  p.spec.has_bias = bias.defined();
  p.spec.wdtype = weight.defined() ? weight.dtype() : bias.defined() ? bias.dtype() : f32;
  return p;
}

void run(const Prepared& p, Tensor& y, const Tensor& residual_out, double eps, SourceLoc loc,
         double scale = 1.0) {
  const std::string name = op_error_name(p.spec.op);
  if (!(eps >= 0) || !std::isfinite(eps))
    fail(name, "eps", loc, "must be finite and >= 0, got " + std::to_string(eps));
  Kernel k = row_kernel_for(p.spec, p.x.device(), loc);
  const std::int64_t n = p.x.numel();
  auto flat = [n](const Tensor& t) { return t.shape().size() == 1 ? t : t.reshape({n}); };
  Tensor xf = flat(p.x), yf = flat(y), rf = p.residual.defined() ? flat(p.residual) : Tensor();
  Tensor rof = residual_out.defined() ? flat(residual_out) : Tensor();
  if (p.spec.ydtype != p.spec.dtype && (!(scale > 0) || !std::isfinite(scale)))
    fail(name, "scale", loc, "must be finite and > 0, got " + std::to_string(scale));
  std::array<Kernel::Arg, 8> args;
  std::size_t i = 0;
  args[i++] = xf;
  if (p.residual.defined()) args[i++] = rf;
  if (p.weight.defined()) args[i++] = p.weight;
  if (p.bias.defined()) args[i++] = p.bias;
  args[i++] = yf;
  if (rof.defined()) args[i++] = rof;
  args[i++] = eps;
  if (p.spec.ydtype != p.spec.dtype) args[i++] = 1.0 / scale;
  try {
    k.launch(args.data(), i, loc);
  } catch (const Error& e) {
    if (e.op() == name) throw;
    fail(name, e.operand(), loc, e.reason(), "  raised by " + e.op() + "\n" + e.detail());
  }
}

void check_dim(RowOp op, const Tensor& x, int dim, SourceLoc loc) {
  if (!x.defined()) return;
  const auto rank = static_cast<int>(x.shape().size());
  if (dim != -1 && dim != rank - 1)
    fail(op_error_name(op), "dim", loc,
         "is " + std::to_string(dim) + "; tx reduces over the last dimension only (-1 or " +
             std::to_string(rank - 1) + "): move the dimension last (x.transpose(...))");
}

Tensor unary_row(RowOp op, const Tensor& x, const Tensor& w, const Tensor& b, double eps,
                 SourceLoc loc) {
  Prepared p = prepare(op, x, nullptr, w, b, loc);
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  run(p, y, Tensor(), eps, loc);
  return y;
}

}  // namespace

Tensor softmax(const Tensor& x, int dim, std::source_location loc) {
  check_dim(RowOp::softmax, x, dim, loc);
  return unary_row(RowOp::softmax, x, Tensor(), Tensor(), 0.0, loc);
}

Tensor log_softmax(const Tensor& x, int dim, std::source_location loc) {
  check_dim(RowOp::log_softmax, x, dim, loc);
  return unary_row(RowOp::log_softmax, x, Tensor(), Tensor(), 0.0, loc);
}

Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps, std::source_location loc) {
  return unary_row(RowOp::rms_norm, x, weight, Tensor(), eps, loc);
}

Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                  std::source_location loc) {
  return unary_row(RowOp::layer_norm, x, weight, bias, eps, loc);
}

AddRmsNormResult add_rms_norm(const Tensor& x, const Tensor& residual, const Tensor& weight,
                              double eps, std::source_location loc) {
  Prepared p = prepare(RowOp::add_rms_norm, x, &residual, weight, Tensor(), loc);
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  Tensor h = Tensor::empty(x.shape(), x.dtype(), x.device());
  run(p, y, h, eps, loc);
  return {y, h};
}

void add_rms_norm_into(Tensor& out, Tensor& residual_out, const Tensor& x, const Tensor& residual,
                       const Tensor& weight, double eps, std::source_location loc) {
  Prepared p = prepare(RowOp::add_rms_norm, x, &residual, weight, Tensor(), loc);
  const std::string name = op_error_name(RowOp::add_rms_norm);
  for (const Tensor* t : {&out, &residual_out}) {
    const char* what = t == &out ? "out" : "residual_out";
    if (!t->defined()) fail(name, what, loc, "tensor is undefined");
    if (t->shape() != x.shape() || t->dtype() != x.dtype() || !(t->device() == x.device()))
      fail(name, what, loc,
           "must have x's shape " + shape_str(x.shape()) + ", dtype " + x.dtype().name() +
               " and device " + x.device().str());
    if (!t->is_contiguous()) fail(name, what, loc, "is a strided view; it must be contiguous");
  }
  run(p, out, residual_out, eps, loc);
}

void add_rms_norm_(Tensor& x, Tensor& residual, const Tensor& weight, double eps,
                   std::source_location loc) {
  Prepared p = prepare(RowOp::add_rms_norm, x, &residual, weight, Tensor(), loc);
  const std::string name = op_error_name(RowOp::add_rms_norm);
  if (!x.is_contiguous())
    fail(name, "x", loc, "is a strided view; the in-place form needs a contiguous x");
  if (!residual.is_contiguous())
    fail(name, "residual", loc, "is a strided view; the in-place form needs a contiguous residual");
  // Each element's outputs are written after its own x and residual are
  // read, by the same thread: y may be x and residual_out residual.
  run(p, x, residual, eps, loc);
}

namespace {
// An output tensor of another dtype for a norm: its shape and device x's,
// a float dtype; the spec's y dtype becomes it.
void prepare_out(Prepared& p, const Tensor& out, const Tensor& x, SourceLoc loc) {
  const std::string name = op_error_name(p.spec.op);
  if (!out.defined()) fail(name, "out", loc, "tensor is undefined");
  if (out.shape() != x.shape())
    fail(name, "out", loc, "shape " + shape_str(out.shape()) + " but x is " + shape_str(x.shape()));
  if (!out.dtype().is_float() || out.dtype() == f64)
    fail(name, "out", loc,
         "dtype " + out.dtype().name() +
             " is not an output dtype (f32, f16, bf16, float8_e4m3fn, float8_e5m2)");
  if (!(out.device() == x.device()))
    fail(name, "out", loc, "is on " + out.device().str() + " but x is on " + x.device().str());
  if (!out.is_contiguous()) fail(name, "out", loc, "is a strided view; out must be contiguous");
  p.spec.ydtype = out.dtype();
}
}  // namespace

void rms_norm_out(Tensor& out, const Tensor& x, const Tensor& weight, double eps, double scale,
                  std::source_location loc) {
  Prepared p = prepare(RowOp::rms_norm, x, nullptr, weight, Tensor(), loc);
  prepare_out(p, out, x, loc);
  run(p, out, Tensor(), eps, loc, scale);
}

void layer_norm_out(Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& bias,
                    double eps, double scale, std::source_location loc) {
  Prepared p = prepare(RowOp::layer_norm, x, nullptr, weight, bias, loc);
  prepare_out(p, out, x, loc);
  run(p, out, Tensor(), eps, loc, scale);
}

void add_rms_norm_out(Tensor& out, const Tensor& x, Tensor& residual, const Tensor& weight,
                      double eps, double scale, std::source_location loc) {
  Prepared p = prepare(RowOp::add_rms_norm, x, &residual, weight, Tensor(), loc);
  prepare_out(p, out, x, loc);
  if (!residual.is_contiguous())
    fail(op_error_name(RowOp::add_rms_norm), "residual", loc,
         "is a strided view; the in-place residual must be contiguous");
  run(p, out, residual, eps, loc, scale);
}

Kernel row_kernel(const std::string& op, const Tensor& x, std::source_location loc) {
  for (RowOp o : {RowOp::softmax, RowOp::log_softmax, RowOp::rms_norm, RowOp::layer_norm,
                  RowOp::add_rms_norm})
    if (op == row_op_name(o)) {
      Prepared p = prepare(o, x, o == RowOp::add_rms_norm ? &x : nullptr, Tensor(), Tensor(), loc);
      return row_kernel_for(p.spec, x.device(), loc);
    }
  fail("tx.ops.row_kernel", "op", loc,
       "'" + op + "' is not a row op (softmax, log_softmax, rms_norm, layer_norm, add_rms_norm)");
}

}  // namespace tx::ops
