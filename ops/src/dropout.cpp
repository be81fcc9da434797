// dropout: y = x * keep / (1 - p), keep from Philox4x32-10 on (seed, offset
// + element index) (dropout.hpp has the exact definition).
//
// One shape-generic kernel per (dtype, mask dtype, strategy, threads, npt,
// offset class). Thread g owns the chunk [g * v, g * v + v), as in the
// elementwise template (nary_generic.cpp). When v is a multiple of 4 and the
// offset is too (the "a4" class, checked at launch through the offset's
// facts), a chunk's elements fall in v / 4 whole Philox counters: one
// Philox call gives four elements their words. Otherwise (v = 1 or 2, or an
// offset that is not a multiple of 4) each element computes its own counter
// and picks its word: the same bits, four times the arithmetic. The last,
// partial chunk always goes element by element.
#include "tx/ops/dropout.hpp"

#include <cmath>
#include <limits>
#include <optional>
#include <string>

#include "special_ops.hpp"

namespace tx::ops {

namespace {

constexpr const char* kOp = "tx.ops.dropout";

struct DropoutSpec {
  DType dtype = f32;
  bool with_mask = false;
  DType mask_dtype = u8;
  Strategy strategy = Strategy::register_copy;
  int threads = 256;
  int v = 4;
  bool aligned4 = false;  // offset % 4 == 0 and v % 4 == 0: grouped Philox
  std::string name() const {
    return std::string("tx_dropout_") + dtype.short_name() +
           (with_mask ? std::string("_m") + mask_dtype.short_name() : "") + "_" +
           strategy_name(strategy) + "_t" + std::to_string(threads) + "_v" + std::to_string(v) +
           (aligned4 ? "_a4" : "_a1");
  }
};

PrimFunc build_dropout(const DropoutSpec& s) {
  const int v = s.v;
  const int threads = s.threads;
  std::vector<std::string> names{"x_ptr", "y_ptr"};
  if (s.with_mask) names.push_back("mask_ptr");
  for (const char* n : {"k0_ptr", "k1_ptr", "offset_ptr", "thr_ptr", "q_ptr"}) names.push_back(n);
  return T::prim_func_n(s.name(), names, [&](const std::vector<Handle>& h) {
    Var n = T::dim("n");
    auto x = T::match_buffer(h[0], {n}, s.dtype, std::nullopt, "x");
    auto y = T::match_buffer(h[1], {n}, s.dtype, std::nullopt, "y");
    TileBuffer mask;
    std::size_t at = 2;
    if (s.with_mask) mask = T::match_buffer(h[at++], {n}, s.mask_dtype, std::nullopt, "mask");
    Var k0 = T::match_scalar(h[at++], u32, "k0");
    Var k1 = T::match_scalar(h[at++], u32, "k1");
    DimFacts off_facts{.min = 0,
                       .max = std::numeric_limits<std::int64_t>::max(),
                       .multiple_of = s.aligned4 ? 4 : 1};
    Var offset = T::match_scalar(h[at++], i64, "offset", off_facts);
    Var thr = T::match_scalar(h[at++], u32, "thr");
    Var q = T::match_scalar(h[at++], f32, "q");
    const std::int64_t chunk = static_cast<std::int64_t>(threads) * v;
    auto bx = T::cta_id({ceildiv(n, static_cast<int>(chunk))}, "bx");
    auto tid = T::thread_id({threads}, "tid");
    Var g = T::let(bx * threads + tid, "g");
    Var base = v == 1 ? g : T::let(g * v, "base");
    Expr zero = make_int(0, u32);

    // The four words of counter c (u64: the group index (offset + i) / 4).
    auto words = [&](const Expr& c) {
      Var cv = T::let(c, "ctr");
      return detail::philox4x32_10({Expr(cast(cv, u32)), Expr(cast(cv >> 32, u32)), zero, zero}, k0,
                                   k1);
    };
    // y and the mask from x's element and its keep bit.
    auto y_of = [&](const Expr& xe, const Expr& keep) -> Expr {
      // x * keep / (1 - p): kept elements are exactly x / (1 - p) in f32.
      Expr xf = xe.dtype() == f32 ? xe : Expr(cast(xe, f32));
      Expr r = xf * select(keep, 1.0f, 0.0f) / q;
      return s.dtype == f32 ? r : Expr(cast(r, s.dtype));
    };
    // One element on its own: its counter, its word, behind a guard.
    auto element = [&](const Expr& idx) {
      T::if_(idx < n, [&] {
        Var e = T::let(cast(offset, u64) + cast(idx, u64), "e");
        std::array<Expr, 4> w = words(e >> 2);
        Var lane = T::let(cast(e & 3, i32), "lane");
        Expr word = select(lane == 0, w[0], select(lane == 1, w[1], select(lane == 2, w[2], w[3])));
        Var keep = T::let(word >= thr, "keep");
        y(idx) = y_of(x(idx), keep);
        if (s.with_mask) mask(idx) = cast(keep, s.mask_dtype);
      });
    };
    if (s.strategy != Strategy::register_copy) {
      if (v == 1) {
        element(base);
      } else {
        for (Var j : T::unroll(v, "j")) element(base + j);
      }
      return;
    }
    auto emit_chunk = [&] {
      auto xr = T::alloc_buffer({v}, s.dtype, scope::local, std::nullopt, "x_r");
      auto yr = T::alloc_buffer({v}, s.dtype, scope::local, std::nullopt, "y_r");
      TileBuffer mr;
      if (s.with_mask) mr = T::alloc_buffer({v}, s.mask_dtype, scope::local, std::nullopt, "m_r");
      Tx::thread::copy(xr, x[region(span(base, v))]);
      if (s.aligned4) {
        // offset + base is a multiple of 4: group k's counter is (offset + base) / 4 + k.
        Var c0 = T::let((cast(offset, u64) + cast(base, u64)) >> 2, "c0");
        for (int k = 0; k < v / 4; ++k) {
          std::array<Expr, 4> w =
              words(k == 0 ? Expr(c0) : Expr(c0 + static_cast<std::uint64_t>(k)));
          for (int j = 0; j < 4; ++j) {
            Var keep = T::let(w[static_cast<std::size_t>(j)] >= thr, "keep");
            yr(4 * k + j) = y_of(xr(4 * k + j), keep);
            if (s.with_mask) mr(4 * k + j) = cast(keep, s.mask_dtype);
          }
        }
      } else {
        for (Var j : T::unroll(v, "j")) {
          Var e = T::let(cast(offset, u64) + cast(base + j, u64), "e");
          std::array<Expr, 4> w = words(e >> 2);
          Var lane = T::let(cast(e & 3, i32), "lane");
          Expr word =
              select(lane == 0, w[0], select(lane == 1, w[1], select(lane == 2, w[2], w[3])));
          Var keep = T::let(word >= thr, "keep");
          yr(j) = y_of(xr(j), keep);
          if (s.with_mask) mr(j) = cast(keep, s.mask_dtype);
        }
      }
      Tx::thread::copy(y[region(span(base, v))], yr);
      if (s.with_mask) Tx::thread::copy(mask[region(span(base, v))], mr);
    };
    T::if_(base + v <= n, emit_chunk).else_([&] {
      for (Var j : T::serial(v, "j")) element(base + j);
    });
  });
}

std::string shape_str(const std::vector<std::int64_t>& s) {
  std::string r = "(";
  for (std::size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + (s.size() == 1 ? ",)" : ")");
}

// Checks the call; returns its kernel, or an undefined one when nothing is
// to launch (no elements; p = 0 or 1, which it has then handled).
std::optional<Kernel> dropout_prepare(const Tensor& x, double p, std::int64_t offset, Tensor& y,
                                      Tensor* mask, const Config& cfg, SourceLoc loc,
                                      bool run_trivial) {
  if (!x.defined()) fail(kOp, "x", loc, "tensor is undefined");
  DType t = x.dtype();
  if (!t.is_float() || t == f64)
    fail(kOp, "x", loc, "dtype " + t.name() + " is not supported (f32, f16, bf16, f8e4m3, f8e5m2)");
  if (!(p >= 0.0 && p <= 1.0)) fail(kOp, "p", loc, "must be in [0, 1], got " + std::to_string(p));
  if (offset < 0) fail(kOp, "offset", loc, "must be >= 0, got " + std::to_string(offset));
  if (!y.defined() || y.shape() != x.shape() || y.dtype() != t)
    fail(kOp, "y", loc,
         "needs a " + t.name() + " tensor of shape " + shape_str(x.shape()) +
             (y.defined() ? ", got " + y.dtype().name() + " " + shape_str(y.shape()) : ""));
  if (!(y.device() == x.device()))
    fail(kOp, "y", loc, "is on " + y.device().str() + " but x is on " + x.device().str());
  if (!y.is_contiguous()) fail(kOp, "y", loc, "is a strided view; pass a contiguous tensor");
  const bool with_mask = mask && mask->defined();
  if (with_mask) {
    if (mask->shape() != x.shape() || (mask->dtype() != u8 && mask->dtype() != boolean))
      fail(kOp, "mask", loc,
           "needs a uint8 or bool tensor of shape " + shape_str(x.shape()) + ", got " +
               mask->dtype().name() + " " + shape_str(mask->shape()));
    if (!(mask->device() == x.device()))
      fail(kOp, "mask", loc, "is on " + mask->device().str() + " but x is on " + x.device().str());
    if (!mask->is_contiguous()) fail(kOp, "mask", loc, "is a strided view");
  }
  Config c = cfg;
  if (!c.strategy) c.strategy = Strategy::register_copy;
  if (c.threads == 0) c.threads = 256;
  // 16 bytes of x per thread (fp8: 16 too, so that four Philox calls, not
  // eight, sit between a thread's loads and stores); at least one counter.
  if (c.num_per_thread == 0)
    c.num_per_thread = *c.strategy == Strategy::direct ? 1 : std::max(4, 16 / t.bytes());
  if (c.threads <= 0 || c.threads > 1024 || c.threads % 32 != 0)
    fail(kOp, "threads", loc,
         "threads must be a multiple of 32 in [32, 1024], got " + std::to_string(c.threads));
  if (c.num_per_thread <= 0 || (c.num_per_thread & (c.num_per_thread - 1)) != 0 ||
      c.num_per_thread > 64)
    fail(kOp, "num_per_thread", loc,
         "num_per_thread must be a power of two <= 64, got " + std::to_string(c.num_per_thread));
  const std::int64_t n = x.numel();
  if (n == 0) return std::nullopt;
  if (n >= std::numeric_limits<std::int32_t>::max())
    fail(kOp, "x", loc, "tensors of 2^31 elements or more are not supported yet");
  if (p == 0.0 || p == 1.0) {
    if (!run_trivial) return std::nullopt;
    // The identity (a copy) or zeros; the mask all ones or all zeros.
    if (p == 0.0)
      ops::cast(x, y);
    else
      y.fill_bits(0);
    if (with_mask) mask->fill_bits(p == 0.0 ? 1 : 0);
    return std::nullopt;
  }
  DropoutSpec s;
  s.dtype = t;
  s.with_mask = with_mask;
  s.mask_dtype = with_mask ? mask->dtype() : u8;
  s.strategy = *c.strategy;
  s.threads = c.threads;
  s.v = s.strategy == Strategy::direct ? 1 : c.num_per_thread;
  s.aligned4 = s.strategy == Strategy::register_copy && s.v % 4 == 0 && offset % 4 == 0;
  const Device d = x.device();
  return detail::special_cached(s.name() + "|" + d.str(), [&] {
    try {
      return compile(build_dropout(s), {.device = d});
    } catch (const Error& e) {
      fail(kOp, e.operand(), loc, e.reason(), "  raised by " + e.op() + "\n" + e.detail());
    }
  });
}

void dropout_into(const Tensor& x, double p, std::uint64_t seed, std::int64_t offset, Tensor& y,
                  Tensor* mask, const Config& cfg, SourceLoc loc) {
  std::optional<Kernel> k = dropout_prepare(x, p, offset, y, mask, cfg, loc, /*run_trivial=*/true);
  if (!k) return;
  const bool with_mask = mask && mask->defined();
  const std::int64_t n = x.numel();
  Tensor xf = x.is_contiguous() ? x : x.contiguous();
  xf = xf.reshape({n});
  Tensor yf = y.reshape({n});
  Tensor mf = with_mask ? mask->reshape({n}) : Tensor();
  const std::uint64_t thr = dropout_threshold(p);
  const float q = static_cast<float>(1.0 - p);
  std::vector<Kernel::Arg> args{xf, yf};
  if (with_mask) args.emplace_back(mf);
  args.emplace_back(static_cast<std::int64_t>(seed & 0xFFFFFFFFu));
  args.emplace_back(static_cast<std::int64_t>(seed >> 32));
  args.emplace_back(offset);
  args.emplace_back(static_cast<std::int64_t>(thr));
  args.emplace_back(q);
  try {
    k->launch(args.data(), args.size(), loc);
  } catch (const Error& e) {
    fail(kOp, e.operand(), loc, e.reason(), "  raised by " + e.op() + "\n" + e.detail());
  }
}

}  // namespace

void philox4x32_10(const std::uint32_t ctr[4], const std::uint32_t key[2], std::uint32_t out[4]) {
  std::uint32_t c[4] = {ctr[0], ctr[1], ctr[2], ctr[3]};
  std::uint32_t k0 = key[0], k1 = key[1];
  for (int r = 0; r < 10; ++r) {
    if (r > 0) {
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    std::uint64_t p0 = static_cast<std::uint64_t>(0xD2511F53u) * c[0];
    std::uint64_t p1 = static_cast<std::uint64_t>(0xCD9E8D57u) * c[2];
    std::uint32_t n0 = static_cast<std::uint32_t>(p1 >> 32) ^ c[1] ^ k0;
    std::uint32_t n2 = static_cast<std::uint32_t>(p0 >> 32) ^ c[3] ^ k1;
    c[0] = n0;
    c[1] = static_cast<std::uint32_t>(p1);
    c[2] = n2;
    c[3] = static_cast<std::uint32_t>(p0);
  }
  for (int i = 0; i < 4; ++i) out[i] = c[i];
}

std::uint64_t dropout_threshold(double p) {
  double t = std::nearbyint(p * 4294967296.0);
  return static_cast<std::uint64_t>(std::min(std::max(t, 0.0), 4294967295.0));
}

bool dropout_keep(std::uint64_t seed, std::uint64_t element, double p) {
  if (p <= 0.0) return true;
  if (p >= 1.0) return false;
  const std::uint64_t c = element >> 2;
  const std::uint32_t ctr[4] = {static_cast<std::uint32_t>(c), static_cast<std::uint32_t>(c >> 32),
                                0, 0};
  const std::uint32_t key[2] = {static_cast<std::uint32_t>(seed),
                                static_cast<std::uint32_t>(seed >> 32)};
  std::uint32_t out[4];
  philox4x32_10(ctr, key, out);
  return out[element & 3] >= dropout_threshold(p);
}

DropoutResult dropout(const Tensor& x, double p, std::uint64_t seed, std::int64_t offset,
                      const DropoutOptions& opt, std::source_location loc) {
  if (!x.defined()) fail(kOp, "x", loc, "tensor is undefined");
  DropoutResult r;
  if (opt.mask) {
    if (opt.mask_dtype != u8 && opt.mask_dtype != boolean)
      fail(kOp, "mask_dtype", loc, "must be uint8 or bool, got " + opt.mask_dtype.name());
    r.mask = Tensor::empty(x.shape(), opt.mask_dtype, x.device());
  }
  if (!opt.training) {
    // The identity: x itself (as torch.nn.functional.dropout), every element kept.
    r.y = x;
    if (opt.mask && r.mask.numel() > 0) r.mask.fill_bits(1);
    return r;
  }
  r.y = Tensor::empty(x.shape(), x.dtype(), x.device());
  dropout_into(x, p, seed, offset, r.y, opt.mask ? &r.mask : nullptr, opt.config, loc);
  return r;
}

void dropout(const Tensor& x, double p, std::uint64_t seed, std::int64_t offset, Tensor& y,
             Tensor* mask, const Config& cfg, std::source_location loc) {
  dropout_into(x, p, seed, offset, y, mask, cfg, loc);
}

Kernel dropout_kernel(const Tensor& x, double p, std::int64_t offset, bool with_mask,
                      const Config& cfg, std::source_location loc) {
  if (!x.defined()) fail(kOp, "x", loc, "tensor is undefined");
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  Tensor m = with_mask ? Tensor::empty(x.shape(), u8, x.device()) : Tensor();
  return dropout_prepare(x, p, offset, y, with_mask ? &m : nullptr, cfg, loc, false)
      .value_or(Kernel());
}

}  // namespace tx::ops
