// dropout: y = x * keep / (1 - p), keep from Philox4x32-10 on (seed, offset
// + element index) (dropout.hpp has the exact definition: one Philox call
// gives eight elements a 16-bit draw each).
//
// One shape-generic kernel per (dtype, mask dtype, strategy, threads, npt,
// offset class). Thread g owns the chunk [g * v, g * v + v), as in the
// elementwise template (nary_generic.cpp). When v is a multiple of 8 and the
// offset is too (the "a8" class, checked at launch through the offset's
// facts), a chunk's elements fall in v / 8 whole Philox counters: one call
// serves eight elements. Otherwise (v < 8, or an offset that is not a
// multiple of 8) each element computes its own counter and picks its
// halfword: the same bits, eight times the arithmetic. The last, partial
// chunk always goes element by element.
//
// Why it is written this way (ncu on an H200, bf16 (16384, 16384)): the
// first version spent 66 instructions per element and ran at 0.38 of copy,
// issue-bound. An f32 division per element took the slow path of div.rn for
// every dropped element (a zero dividend) and diverged the warps; now the
// quotient is Markstein's (x * r, the remainder by an fma, one correcting
// fma: exactly x / q for every x whose quotient and remainder stay in the
// normal range; the rare rest, tiny or infinite x, divides). A 32-bit draw
// per element cost a Philox call per four elements; 16 bits per element
// halve it.
#include "tx/ops/dropout.hpp"

#include <cmath>
#include <functional>
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
  int v = 8;
  bool aligned8 = false;  // offset % 8 == 0 and v % 8 == 0: one Philox call per 8 elements
  std::string name() const {
    return std::string("tx_dropout_") + dtype.short_name() +
           (with_mask ? std::string("_m") + mask_dtype.short_name() : "") + "_" +
           strategy_name(strategy) + "_t" + std::to_string(threads) + "_v" + std::to_string(v) +
           (aligned8 ? "_a8" : "_a1");
  }
};

PrimFunc build_dropout(const DropoutSpec& s) {
  const int v = s.v;
  const int threads = s.threads;
  std::vector<std::string> names{"x_ptr", "y_ptr"};
  if (s.with_mask) names.push_back("mask_ptr");
  // The Philox round keys (detail::philox_round_keys), then the rest.
  for (int r = 0; r < 20; ++r) names.push_back("rk" + std::to_string(r) + "_ptr");
  for (const char* n : {"offset_ptr", "thr_ptr", "q_ptr", "r_ptr"}) names.push_back(n);
  return T::prim_func_n(s.name(), names, [&](const std::vector<Handle>& h) {
    Var n = T::dim("n");
    auto x = T::match_buffer(h[0], {n}, s.dtype, std::nullopt, "x");
    auto y = T::match_buffer(h[1], {n}, s.dtype, std::nullopt, "y");
    TileBuffer mask;
    std::size_t at = 2;
    if (s.with_mask) mask = T::match_buffer(h[at++], {n}, s.mask_dtype, std::nullopt, "mask");
    std::array<Expr, 10> rk0, rk1;
    for (std::size_t r = 0; r < 10; ++r)
      rk0[r] = T::match_scalar(h[at++], u32, "k0_" + std::to_string(r));
    for (std::size_t r = 0; r < 10; ++r)
      rk1[r] = T::match_scalar(h[at++], u32, "k1_" + std::to_string(r));
    DimFacts off_facts{.min = 0,
                       .max = std::numeric_limits<std::int64_t>::max(),
                       .multiple_of = s.aligned8 ? 8 : 1};
    Var offset = T::match_scalar(h[at++], i64, "offset", off_facts);
    Var thr = T::match_scalar(h[at++], u32, "thr");  // round(p * 2^16), in [1, 65535]
    Var q = T::match_scalar(h[at++], f32, "q");      // f32(1 - p)
    Var r = T::match_scalar(h[at++], f32, "r");      // f32(1 / q), correctly rounded
    const std::int64_t chunk = static_cast<std::int64_t>(threads) * v;
    auto bx = T::cta_id({ceildiv(n, static_cast<int>(chunk))}, "bx");
    auto tid = T::thread_id({threads}, "tid");
    Var g = T::let(bx * threads + tid, "g");
    Var base = v == 1 ? g : T::let(g * v, "base");
    Expr zero = make_int(0, u32);
    // Inputs that can hold values so small that the remainder of Markstein's
    // division would underflow (below 2^-100): f32 and bf16 (f32's range).
    const bool tiny_inputs = s.dtype == f32 || s.dtype == bf16;

    // The four words of counter c (u64: the group index (offset + i) / 8).
    auto words = [&](const Expr& c) {
      Var cv = T::let(c, "ctr");
      return detail::philox4x32_10({Expr(cast(cv, u32)), Expr(cast(cv >> 32, u32)), zero, zero},
                                   rk0, rk1);
    };
    // The 16-bit draw of halfword `half` (0 low, 1 high) of word w.
    auto draw = [](const Expr& w, int half) -> Expr {
      return half == 0 ? Expr(w & make_int(0xFFFF, u32)) : Expr(w >> 16);
    };
    // x / q, exactly, by Markstein's correction (see above): y0 = x * r, the
    // remainder t = y0 * q - x (exact in one fma), y0 - t * r rounded once.
    // Written so that -0 stays -0 without a copysign: for x = -0, t is +0
    // and -t * r + y0 is -0 + -0. Exact when the remainder does not
    // underflow and the quotient does not overflow; `Scaled` carries what
    // the range checks need.
    struct Scaled {
      Var xf, y0;
      Expr value, divided;  // the result in x's dtype: by Markstein, by x / q
    };
    auto scaled = [&](const Expr& xe, const Expr& keep) {
      auto out = [&](const Expr& v32) {
        Expr kept = select(keep, v32, make_float(0.0, f32));
        return s.dtype == f32 ? kept : Expr(cast(kept, s.dtype));
      };
      Var xf = T::let(xe.dtype() == f32 ? xe : Expr(cast(xe, f32)), "xf");
      Var y0 = T::let(xf * r, "y0");
      Var t = T::let(make_call(Intrinsic::fma, {Expr(y0), Expr(q), Expr(-xf)}), "t");
      Expr exact = make_call(Intrinsic::fma, {Expr(-t), Expr(r), Expr(y0)});
      return Scaled{xf, y0, out(exact), out(xf / q)};
    };
    // Outside Markstein's range: an infinite or huge quotient (its fma
    // gives NaN), or (f32 and bf16 inputs) a nonzero x below 2^-100. As
    // keys: |y0| (too big when >= 2^126, NaN included) and, on the bits of
    // x, 2 * bits - 1 (the sign shifted out; 0 wraps to the largest u32, so
    // only a tiny nonzero x is below 2 * bits(2^-100) - 1).
    const std::uint32_t tiny_key = 2u * 0x0D800000u - 1u;
    auto big_key = [&](const Scaled& v) { return make_call(Intrinsic::fabs, {Expr(v.y0)}); };
    auto tiny_key_of = [&](const Scaled& v) {
      return make_call(Intrinsic::reinterpret, {Expr(v.xf)}, {}, u32) * 2u - 1u;
    };
    auto needs_division = [&](const Expr& big, const Expr& tiny) {
      Expr slow = !(big < make_float(0x1p126, f32));
      // | not ||: no short-circuit branch around a compare.
      if (tiny_inputs) slow = slow | (tiny < make_int(tiny_key, u32));
      return slow;
    };
    // One element on its own: its counter, its halfword, behind a guard.
    auto element = [&](const Expr& idx) {
      T::if_(idx < n, [&] {
        Var e = T::let(cast(offset, u64) + cast(idx, u64), "e");
        std::array<Expr, 4> w = words(e >> 3);
        Var lane = T::let(cast((e >> 1) & 3, i32), "lane");
        Var word =
            T::let(select(lane == 0, w[0], select(lane == 1, w[1], select(lane == 2, w[2], w[3]))),
                   "word");
        Var u = T::let(select(cast(e & 1, i32) == 0, draw(word, 0), draw(word, 1)), "u");
        Var keep = T::let(u >= thr, "keep");
        Scaled v = scaled(x(idx), keep);
        Var slow = T::let(needs_division(big_key(v), tiny_key_of(v)), "slow");
        T::if_(slow, [&] { y(idx) = v.divided; }).else_([&] { y(idx) = v.value; });
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
      // Each element by Markstein; the range keys reduced over the chunk,
      // so one branch per chunk (almost never taken) redoes it by division.
      std::vector<Scaled> vals;
      Expr big, tiny;
      auto put = [&](int j, const Expr& keep) {
        Scaled sc = scaled(xr(j), keep);
        yr(j) = sc.value;
        vals.push_back(sc);
        big = big.defined() ? Expr(max(big, big_key(sc))) : big_key(sc);
        if (tiny_inputs) tiny = tiny.defined() ? Expr(min(tiny, tiny_key_of(sc))) : tiny_key_of(sc);
        if (s.with_mask) mr(j) = cast(keep, s.mask_dtype);
      };
      if (s.aligned8) {
        // offset + base is a multiple of 8: group k's counter is (offset + base) / 8 + k.
        Var c0 = T::let((cast(offset, u64) + cast(base, u64)) >> 3, "c0");
        for (int k = 0; k < v / 8; ++k) {
          std::array<Expr, 4> w =
              words(k == 0 ? Expr(c0) : Expr(c0 + static_cast<std::uint64_t>(k)));
          for (int j = 0; j < 8; ++j)
            put(8 * k + j, T::let(draw(w[static_cast<std::size_t>(j / 2)], j % 2) >= thr, "keep"));
        }
      } else {
        for (int j = 0; j < v; ++j) {
          Var e = T::let(cast(offset, u64) + cast(base + j, u64), "e");
          std::array<Expr, 4> w = words(e >> 3);
          Var lane = T::let(cast((e >> 1) & 3, i32), "lane");
          Var word = T::let(
              select(lane == 0, w[0], select(lane == 1, w[1], select(lane == 2, w[2], w[3]))),
              "word");
          Var u = T::let(select(cast(e & 1, i32) == 0, draw(word, 0), draw(word, 1)), "u");
          put(j, T::let(u >= thr, "keep"));
        }
      }
      T::if_(needs_division(big, tiny), [&] {
        for (int j = 0; j < v; ++j) yr(j) = vals[static_cast<std::size_t>(j)].divided;
      });
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
  // 16 bytes of x per thread, and at least one whole Philox call (8
  // elements: f32 moves 32 bytes per thread).
  if (c.num_per_thread == 0)
    c.num_per_thread = *c.strategy == Strategy::direct ? 1 : std::max(8, 16 / t.bytes());
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
  s.aligned8 = s.strategy == Strategy::register_copy && s.v % 8 == 0 && offset % 8 == 0;
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
  const float r = static_cast<float>(1.0 / static_cast<double>(q));  // RN(1 / q)
  std::vector<Kernel::Arg> args{xf, yf};
  if (with_mask) args.emplace_back(mf);
  for (std::uint32_t k : detail::philox_round_keys(seed)) args.emplace_back(std::int64_t{k});
  args.emplace_back(offset);
  args.emplace_back(static_cast<std::int64_t>(thr));
  args.emplace_back(q);
  args.emplace_back(r);
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
  // At least 1 (a p > 0 drops something), at most 65535 (a p < 1 keeps something).
  double t = std::nearbyint(p * 65536.0);
  return static_cast<std::uint64_t>(std::min(std::max(t, 1.0), 65535.0));
}

bool dropout_keep(std::uint64_t seed, std::uint64_t element, double p) {
  if (p <= 0.0) return true;
  if (p >= 1.0) return false;
  const std::uint64_t c = element >> 3;
  const std::uint32_t ctr[4] = {static_cast<std::uint32_t>(c), static_cast<std::uint32_t>(c >> 32),
                                0, 0};
  const std::uint32_t key[2] = {static_cast<std::uint32_t>(seed),
                                static_cast<std::uint32_t>(seed >> 32)};
  std::uint32_t out[4];
  philox4x32_10(ctr, key, out);
  const std::uint32_t word = out[(element >> 1) & 3];
  const std::uint32_t draw = (element & 1) ? word >> 16 : word & 0xFFFFu;
  return draw >= dropout_threshold(p);
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
