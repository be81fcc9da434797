// tx::ops::scaled_matmul: fp8 GEMM with scales (torch._scaled_mm's
// operands), and tx::ops::quantize_fp8, the row kernel that makes the
// activations' block scales.
//
// C = (A x sa) (B x sb) for fp8 A (M, K), B (K, N), with
//   sa: one f32 for all of A, one per row (M, 1), or one per 1 x 128 block
//       of a row (M, ceil(K / 128)) -- DeepSeek-V3's activations;
//   sb: one f32 for all of B, or one per 128 x 128 block
//       (ceil(K / 128), ceil(N / 128)) -- DeepSeek-V3's weights.
// Block scales change along K, so they cannot wait for the end: the Hopper
// kernel (matmul.cpp's, 128 x 128 x 128 tiles: one K step is one scale
// block, one column tile one block of B's) runs each K step into a fresh
// partial tile, as matmul's fp8 promotion does, and folds it into the f32
// total multiplied by the step's factor -- sa of each row (a wgmma_row
// vector loaded before the MMA is issued, so the MMA hides its latency)
// times sb of the tile (a scalar). Tensor-wise and row-wise scales are
// applied once, to the total. The output is rounded once to out_dtype.
#include <cmath>
#include <cstdio>
#include <functional>

#include "hopper_mainloop.hpp"
#include "special_ops.hpp"
#include "tx/builder.hpp"
#include "tx/fragments.hpp"
#include "tx/ops/matmul.hpp"
#include "tx/runtime/cuda_driver.hpp"
#include "tx/runtime/kernel.hpp"

namespace tx::ops {

namespace {

using SourceLoc = std::source_location;
constexpr const char* kOp = "tx.ops.scaled_matmul";
constexpr std::int64_t kBlock = 128;

enum class ScaleKind { tensor, rows, blocks };

const char* kind_name(ScaleKind k) {
  return k == ScaleKind::tensor ? "tensor" : k == ScaleKind::rows ? "rows" : "blocks";
}

struct ScaledShape {
  std::int64_t M, N, K;
  DType t, out_t;
  ScaleKind a_kind, b_kind;
  std::int64_t kb() const { return (K + kBlock - 1) / kBlock; }
  std::int64_t nb() const { return (N + kBlock - 1) / kBlock; }
  // The scales as the kernels take them: sa (1,), (M, 1) or (M, kb);
  // sb (1,), (1, N) (rows: one per row of B's (N, K) storage, that is per
  // output column) or (nb, kb) -- a row of B's blocks per 128 columns,
  // K-major as B is (N, K).
  std::vector<std::int64_t> sa_shape() const {
    if (a_kind == ScaleKind::tensor) return {1};
    return {M, a_kind == ScaleKind::rows ? 1 : kb()};
  }
  std::vector<std::int64_t> sb_shape() const {
    if (b_kind == ScaleKind::tensor) return {1};
    if (b_kind == ScaleKind::rows) return {1, N};
    return {nb(), kb()};
  }
  std::string key() const {
    char k[160];
    std::snprintf(k, sizeof k, "%s|%lldx%lldx%lld|%s|a_%s|b_%s", t.name().c_str(),
                  static_cast<long long>(M), static_cast<long long>(N), static_cast<long long>(K),
                  out_t.name().c_str(), kind_name(a_kind), kind_name(b_kind));
    return k;
  }
};

// The Hopper kernel: parameters (a (M, K), b (N, K), c (M, N), sa, sb).
PrimFunc hopper_scaled_kernel(const ScaledShape& p, const MatmulTiling& c, std::int64_t sms) {
  const std::int64_t M = p.M, N = p.N, K = p.K;
  const std::int64_t BM = c.bm, BN = c.bn, BK = c.bk, STAGES = c.stages;
  if (BK != kBlock || BN != kBlock)
    fail("tx.ops.detail.scaled_matmul_kernel", "tiling", {},
         c.str() + ": the kernel takes bn = bk = 128 (one scale block per K step and column tile)");
  const std::int64_t consumers = BM / 64, KT = p.kb();
  const DType t = p.t;
  const auto sched =
      T::tile_scheduler({.tiles_m = (M + BM - 1) / BM, .tiles_n = (N + BN - 1) / BN, .ctas = sms});
  const std::string name =
      "scaled_matmul_" + t.short_name() + "_a" + kind_name(p.a_kind) + "_b" + kind_name(p.b_kind);
  return T::prim_func_n(
      name, {"a", "b", "c", "scale_a", "scale_b"}, [&](const std::vector<Handle>& h) {
        auto A = T::match_buffer(h[0], {M, K}, t, std::nullopt, "A");
        auto B = T::match_buffer(h[1], {N, K}, t, std::nullopt, "B");
        auto C = T::match_buffer(h[2], {M, N}, p.out_t, std::nullopt, "C");
        auto SA = T::match_buffer(h[3], p.sa_shape(), f32, std::nullopt, "SA");
        auto SB = T::match_buffer(h[4], p.sb_shape(), f32, std::nullopt, "SB");
        T::device_entry();
        auto cta = T::cta_id({sched.ctas()});
        auto wg = T::warpgroup_id({1 + consumers});
        auto tid = T::thread_id_in_wg({128});
        auto As = T::alloc_buffer({STAGES, BM, BK}, t, scope::shared,
                                  layouts::swizzled_tiles({STAGES, BM, BK}, t));
        auto Bs = T::alloc_buffer({STAGES, BN, BK}, t, scope::shared,
                                  layouts::swizzled_tiles({STAGES, BN, BK}, t));
        auto b_stage = [&](const Expr& s) { return Bs[region(span(s, 1), {0, BN}, {0, BK})]; };
        auto pipe = T::pipeline(
            {.stages = static_cast<int>(STAGES), .consumer_arrivals = static_cast<int>(consumers)});
        T::if_(wg == 0, [&] {
          T::cuda::decrease_registers(40);
          for (Var r : T::serial(sched.rounds(), "r")) {
            auto [valid, bm, bn] = sched.tile(cta, r);
            T::if_(valid, [&] {
              detail::hopper_tile_producer(
                  pipe, r, KT, tid, [&](const Var& kt, const Expr& s, const BufferElem& full) {
                    Tx::warpgroup::copy_async(As[region(span(s, 1), {0, BM}, {0, BK})],
                                              A[region(span(bm * BM, BM), span(kt * BK, BK))],
                                              {.barrier = full, .partial = true});
                    Tx::warpgroup::copy_async(b_stage(s),
                                              B[region(span(bn * BN, BN), span(kt * BK, BK))],
                                              {.barrier = full, .partial = true});
                  });
            });
          }
        }).else_([&] {
          T::cuda::increase_registers(232);
          auto acc = T::alloc_buffer({64, BN}, f32, scope::local, frag::wgmma_c(64, BN));
          auto total = T::alloc_buffer({64, BN}, f32, scope::local, frag::wgmma_c(64, BN), "total");
          auto out = T::alloc_buffer({64, BN}, p.out_t, scope::local, frag::wgmma_c(64, BN), "out");
          auto factor = T::alloc_buffer({64, 1}, f32, scope::local, frag::wgmma_row(64), "factor");
          TileBuffer col_scale;  // b's per-column scales of this tile's columns
          if (p.b_kind == ScaleKind::rows)
            col_scale =
                T::alloc_buffer({1, BN}, f32, scope::local, frag::wgmma_col(BN), "col_scale");
          // The next K step's row scales of a, and b's block scale of this
          // step (0) and the next (1).
          auto next = T::alloc_buffer({64, 1}, f32, scope::local, frag::wgmma_row(64), "next");
          auto sb = T::alloc_buffer({2}, f32, scope::local, std::nullopt, "sb");
          auto row0 = T::let(max(wg - 1, 0) * 64);
          for (Var r : T::serial(sched.rounds(), "r")) {
            auto [valid, bm, bn] = sched.tile(cta, r);
            T::if_(valid, [&] {
              auto first = T::let(bm * BM + row0, "first");
              auto rows = [&](const TileBuffer& X, const Expr& col) {
                return X[region(span(first, 64), span(col, 1))];
              };
              detail::HopperTileLoop loop{.pipe = pipe,
                                          .As = As,
                                          .b_stage = b_stage,
                                          .bk = BK,
                                          .k_steps = KT,
                                          .b_nk = true};
              // Block scales are loaded one K step ahead: step kt's factors
              // were requested during step kt - 1, so their latency (hundreds
              // of cycles from L2) hides under a whole step rather than
              // under one MMA of a warpgroup.
              const bool a_blocks = p.a_kind == ScaleKind::blocks;
              const bool b_blocks = p.b_kind == ScaleKind::blocks;
              auto load_ahead = [&](const Expr& kb) {
                if (a_blocks) Tx::warpgroup::copy(next, rows(SA, kb), {.partial = true});
                if (b_blocks) sb(1) = SB(bn, kb);
              };
              if (a_blocks || b_blocks) {
                load_ahead(0);
                loop.before_mma = [&](const Var& kt) {
                  if (a_blocks && b_blocks)
                    Tx::warpgroup::mul(factor, next, sb(1));
                  else if (a_blocks)
                    Tx::warpgroup::mul(factor, next, 1.0f);
                  else
                    sb(0) = sb(1);
                  load_ahead(min(kt + 1, KT - 1));
                };
                loop.fold = [&](const Var&) {
                  if (a_blocks)
                    Tx::warpgroup::fma(total, acc, factor, total);
                  else
                    Tx::warpgroup::fma(total, acc, sb(0), total);
                };
              }
              detail::hopper_tile_mainloop(loop, r, row0, tid, acc, total);
              // Scales that do not change along K: once, on the total.
              if (p.a_kind == ScaleKind::rows) {
                Tx::warpgroup::copy(factor, rows(SA, 0), {.partial = true});
                Tx::warpgroup::mul(total, total, factor);
              } else if (p.a_kind == ScaleKind::tensor) {
                Tx::warpgroup::mul(total, total, SA(0));
              }
              if (p.b_kind == ScaleKind::tensor) Tx::warpgroup::mul(total, total, SB(0));
              if (p.b_kind == ScaleKind::rows) {  // broadcast down the rows
                Tx::warpgroup::copy(col_scale, SB[region({0, 1}, span(bn * BN, BN))],
                                    {.partial = true});
                Tx::warpgroup::mul(total, total, col_scale);
              }
              auto c_tile = C[region(span(first, 64), span(bn * BN, BN))];
              if (p.out_t == f32) {
                Tx::warpgroup::copy(c_tile, total, {.partial = true});
              } else {
                Tx::warpgroup::cast(out, total);
                Tx::warpgroup::copy(c_tile, out, {.partial = true});
              }
            });
          }
        });
      });
}

// One thread per element of C: per 128-deep K block an f32 partial sum,
// folded into the total with the block's factors, as the Hopper kernel.
PrimFunc simt_scaled_kernel(const ScaledShape& p) {
  const std::int64_t M = p.M, N = p.N, K = p.K, KB = p.kb();
  return T::prim_func_n("scaled_matmul_simt_" + p.t.short_name(),
                        {"a", "b", "c", "scale_a", "scale_b"}, [&](const std::vector<Handle>& h) {
                          auto A = T::match_buffer(h[0], {M, K}, p.t, std::nullopt, "A");
                          auto B = T::match_buffer(h[1], {N, K}, p.t, std::nullopt, "B");
                          auto C = T::match_buffer(h[2], {M, N}, p.out_t, std::nullopt, "C");
                          auto SA = T::match_buffer(h[3], p.sa_shape(), f32, std::nullopt, "SA");
                          auto SB = T::match_buffer(h[4], p.sb_shape(), f32, std::nullopt, "SB");
                          T::device_entry();
                          auto cta = T::cta_id({(M * N + 255) / 256});
                          auto tid = T::thread_id({256});
                          auto i = T::let((cta * 256 + tid) / N), j = T::let((cta * 256 + tid) % N);
                          auto sum = T::alloc_buffer({2}, f32, scope::local);
                          T::if_(i < M, [&] {
                            sum(0) = 0.0f;
                            for (Var kb : T::serial(KB, "kb")) {
                              sum(1) = 0.0f;
                              for (Var k : T::serial(min(K - kb * kBlock, kBlock), "k")) {
                                auto kk = T::let(kb * kBlock + k);
                                sum(1) = sum(1) + cast(A(i, kk), f32) * cast(B(j, kk), f32);
                              }
                              Expr f = Expr(1.0f);
                              if (p.a_kind == ScaleKind::blocks) f = f * SA(i, kb);
                              if (p.b_kind == ScaleKind::blocks) f = f * SB(j / kBlock, kb);
                              sum(0) = sum(0) + sum(1) * f;
                            }
                            Expr total = sum(0);
                            if (p.a_kind == ScaleKind::rows) total = total * SA(i, 0);
                            if (p.a_kind == ScaleKind::tensor) total = total * SA(0);
                            if (p.b_kind == ScaleKind::tensor) total = total * SB(0);
                            if (p.b_kind == ScaleKind::rows) total = total * SB(0, j);
                            C(i, j) = cast(total, p.out_t);
                          });
                        });
}

std::string shape_str(const std::vector<std::int64_t>& s) {
  std::string r = "(";
  for (std::size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + (s.size() == 1 ? ",)" : ")");
}

// b given as the transpose of a row-major (N, K) tensor: strides (1, K).
bool transposed_rows(const Tensor& b) {
  return !b.is_contiguous() && b.shape().size() == 2 && b.strides()[0] == 1 &&
         b.strides()[1] == b.shape()[0];
}

ScaledShape check(const Tensor& a, const Tensor& b, const Tensor& sa, const Tensor& sb,
                  const ScaledMatmulOptions& opt, SourceLoc loc) {
  for (auto [x, name] : {std::pair{&a, "a"}, std::pair{&b, "b"}, std::pair{&sa, "scale_a"},
                         std::pair{&sb, "scale_b"}})
    if (!x->defined()) fail(kOp, name, loc, "an undefined tensor");
  for (auto [x, name] : {std::pair{&a, "a"}, std::pair{&b, "b"}}) {
    if (x->shape().size() != 2)
      fail(kOp, name, loc,
           "rank " + std::to_string(x->shape().size()) + ": scaled_matmul takes matrices");
    if (!x->dtype().is_fp8())
      fail(kOp, name, loc,
           "dtype " + x->dtype().name() + ": scaled_matmul takes float8_e4m3fn / float8_e5m2");
  }
  if (!a.is_contiguous()) fail(kOp, "a", loc, "a strided view: pass .contiguous()");
  if (!b.is_contiguous() && !transposed_rows(b))
    fail(kOp, "b", loc,
         "a strided view: pass .contiguous() (b is read row-major (K, N), or as the transpose "
         "of a row-major (N, K) tensor)");
  if (a.shape()[1] != b.shape()[0])
    fail(
        kOp, "b", loc,
        "inner extents differ: a is " + shape_str(a.shape()) + " and b is " + shape_str(b.shape()));
  if (a.dtype() != b.dtype())
    fail(kOp, "b", loc, "dtype " + b.dtype().name() + " differs from a's " + a.dtype().name());
  if (opt.out_dtype != bf16 && opt.out_dtype != f16 && opt.out_dtype != f32)
    fail(kOp, "out_dtype", loc,
         opt.out_dtype.name() + ": the output is bfloat16, float16 or float32");
  ScaledShape p{a.shape()[0],  b.shape()[1],      a.shape()[1],     a.dtype(),
                opt.out_dtype, ScaleKind::tensor, ScaleKind::tensor};
  for (auto [x, name] : {std::pair{&sa, "scale_a"}, std::pair{&sb, "scale_b"}}) {
    if (x->dtype() != f32)
      fail(kOp, name, loc, "dtype " + x->dtype().name() + ": scales are float32");
    if (!(x->device() == a.device()))
      fail(kOp, name, loc, "on " + x->device().str() + ", a on " + a.device().str());
  }
  if (!(b.device() == a.device()))
    fail(kOp, "b", loc, "on " + b.device().str() + ", a on " + a.device().str());
  const std::int64_t KB = p.kb();
  const auto& s1 = sa.shape();
  if (sa.numel() == 1)
    p.a_kind = ScaleKind::tensor;
  else if (s1.size() == 2 && s1[0] == p.M && s1[1] == 1)
    p.a_kind = ScaleKind::rows;
  else if (s1.size() == 2 && s1[0] == p.M && s1[1] == KB)
    p.a_kind = ScaleKind::blocks;
  else
    fail(kOp, "scale_a", loc,
         "shape " + shape_str(s1) + ": one scale (1,), one per row (" + std::to_string(p.M) +
             ", 1), or one per 1 x 128 block (" + std::to_string(p.M) + ", " + std::to_string(KB) +
             ")");
  const auto& s2 = sb.shape();
  if (sb.numel() == 1)
    p.b_kind = ScaleKind::tensor;
  else if (s2.size() == 2 && s2[0] == 1 && s2[1] == p.N)
    p.b_kind = ScaleKind::rows;  // one per column of b (per row of its (N, K) storage)
  else if (s2.size() == 2 && s2[0] == KB && s2[1] == p.nb())
    p.b_kind = ScaleKind::blocks;
  else
    fail(kOp, "scale_b", loc,
         "shape " + shape_str(s2) + ": one scale (1,), one per column (1, " + std::to_string(p.N) +
             "), or one per 128 x 128 block (" + std::to_string(KB) + ", " +
             std::to_string(p.nb()) + ")");
  if (p.b_kind == ScaleKind::rows && !sb.is_contiguous())
    fail(kOp, "scale_b", loc, "a strided view: pass .contiguous()");
  if (p.a_kind == ScaleKind::rows && !sa.is_contiguous())
    fail(kOp, "scale_a", loc, "a strided view: pass .contiguous()");
  if (p.a_kind == ScaleKind::blocks && !sa.is_contiguous())
    fail(kOp, "scale_a", loc,
         "a strided view: pass .contiguous() (the kernel reads (M, K / 128) row-major)");
  return p;
}

std::string hopper_refusal(const ScaledShape& p, const Device& d) {
  if (!d.is_cuda()) return "the host has no tensor cores";
  const runtime::DeviceInfo& dev = runtime::current_device();
  if (dev.cc_major != 9) return dev.arch() + ": the scaled kernel is Hopper's (sm_90)";
  if (p.K % 16 != 0) return "K = " + std::to_string(p.K) + ": the TMA needs rows of whole 16 bytes";
  return "";
}

}  // namespace

namespace detail {
const MatmulTiling& scaled_matmul_tiling(std::int64_t M) {
  static const MatmulTiling large{128, 128, 128, 0, 0, 6, true, true};
  static const MatmulTiling small{64, 128, 128, 0, 0, 8, true, true};
  return M <= 64 ? small : large;
}
PrimFunc scaled_matmul_kernel(std::int64_t M, std::int64_t N, std::int64_t K, DType t, DType out_t,
                              ScaleForm a_scales, ScaleForm b_scales, bool simt,
                              std::int64_t ctas) {
  auto kind = [](ScaleForm f) {
    return f == ScaleForm::tensor ? ScaleKind::tensor
           : f == ScaleForm::rows ? ScaleKind::rows
                                  : ScaleKind::blocks;
  };
  const ScaledShape p{M, N, K, t, out_t, kind(a_scales), kind(b_scales)};
  if (simt) return simt_scaled_kernel(p);
  return hopper_scaled_kernel(p, scaled_matmul_tiling(M), ctas);
}
}  // namespace detail

std::string scaled_matmul_plan(const Tensor& a, const Tensor& b, const Tensor& scale_a,
                               const Tensor& scale_b, ScaledMatmulOptions opt) {
  const ScaledShape p = check(a, b, scale_a, scale_b, opt, SourceLoc::current());
  const std::string scales =
      std::string(", scales: a ") + kind_name(p.a_kind) + ", b " + kind_name(p.b_kind);
  const std::string no = hopper_refusal(p, a.device());
  if (!no.empty()) return "SIMT (" + no + ")" + scales;
  return "tensor cores " + detail::scaled_matmul_tiling(p.M).str() + scales +
         (transposed_rows(b) ? "" : ", B transposed to (N, K) first");
}

void scaled_matmul_out(const Tensor& a, const Tensor& b, const Tensor& scale_a,
                       const Tensor& scale_b, const Tensor& c, ScaledMatmulOptions opt,
                       SourceLoc loc) {
  const ScaledShape p = check(a, b, scale_a, scale_b, opt, loc);
  const Device d = a.device();
  if (!c.defined() || c.dtype() != p.out_t || c.shape() != std::vector<std::int64_t>{p.M, p.N} ||
      !c.is_contiguous() || !(c.device() == d))
    fail(kOp, "out", loc,
         "must be a contiguous " + p.out_t.name() + " tensor of shape (" + std::to_string(p.M) +
             ", " + std::to_string(p.N) + ") on " + d.str() + " (opt.out_dtype)");
  if (p.M == 0 || p.N == 0) return;
  if (p.K == 0) {
    Tensor(c).fill_bits(0);  // (a handle: the caller's memory)
    return;
  }
  const std::string no = hopper_refusal(p, d);
  if (!no.empty() && d.is_cuda())
    warn(std::string(kOp) + " at " + loc.file_name() + ":" + std::to_string(loc.line()) +
         ": no tensor-core kernel (" + no + "); using the SIMT kernel");
  const std::int64_t sms = no.empty() ? runtime::current_device().sm_count : 0;
  Kernel k = detail::special_cached(
      "scaled_matmul|" + p.key() + "|" + d.str() + "|" + (no.empty() ? "wgmma" : "simt") +
          std::to_string(sms),
      [&] {
        if (!no.empty()) return compile(simt_scaled_kernel(p), {.device = d});
        return compile(hopper_scaled_kernel(p, detail::scaled_matmul_tiling(p.M), sms),
                       {.device = d});
      });
  // The kernels read B as (N, K) and sb as (nb, kb): B^T's storage as
  // given, or a transposed copy; sb given (kb, nb) is transposed (small).
  const Tensor bk = transposed_rows(b) ? b.transpose(0, 1) : b.transpose(0, 1).contiguous();
  const Tensor sbk = p.b_kind == ScaleKind::blocks ? scale_b.transpose(0, 1).contiguous()
                     : p.b_kind == ScaleKind::rows ? scale_b
                                                   : scale_b.reshape({1});
  const Tensor sak = p.a_kind == ScaleKind::tensor ? scale_a.reshape({1}) : scale_a;
  k.launch({a, bk, c, sak, sbk}, loc);
}

Tensor scaled_matmul(const Tensor& a, const Tensor& b, const Tensor& scale_a, const Tensor& scale_b,
                     ScaledMatmulOptions opt, SourceLoc loc) {
  const ScaledShape p = check(a, b, scale_a, scale_b, opt, loc);
  Tensor c = Tensor::empty({p.M, p.N}, p.out_t, a.device());
  scaled_matmul_out(a, b, scale_a, scale_b, c, opt, loc);
  return c;
}

// ------------------------------------------------------------ quantize_fp8

namespace {

// The largest finite value of an fp8 type: a block's amax maps to it.
double fp8_largest(DType t) { return t == f8e4m3 ? 448.0 : 57344.0; }

// One thread per (row, block of `block` columns) -- any block and K; the
// row kernel below takes blocks of 128 whole columns: the block's largest
// |x|, its scale amax / the fp8 maximum (448 for e4m3, 57344 for e5m2), and
// the block divided by it, rounded to fp8 (|x| / scale <= the maximum: no
// saturation needed). An all-zero block gets the scale of amax = 1e-12.
PrimFunc quantize_kernel(std::int64_t M, std::int64_t K, DType in_t, DType out_t,
                         std::int64_t block) {
  const std::int64_t KB = (K + block - 1) / block;
  const double fp8_max = fp8_largest(out_t);
  return T::prim_func("quantize_fp8_" + in_t.short_name(), [&](Handle x, Handle q, Handle s) {
    auto X = T::match_buffer(x, {M, K}, in_t);
    auto Q = T::match_buffer(q, {M, K}, out_t);
    auto S = T::match_buffer(s, {M, KB}, f32);
    T::device_entry();
    auto cta = T::cta_id({(M * KB + 255) / 256});
    auto tid = T::thread_id({256});
    auto flat = T::let(cta * 256 + tid);
    auto i = T::let(flat / KB), kb = T::let(flat % KB);
    auto amax = T::alloc_buffer({1}, f32, scope::local);
    T::if_(i < M, [&] {
      auto k0 = T::let(kb * block), n = T::let(min(K - kb * block, block));
      amax(0) = 1e-12f;
      for (Var k : T::serial(n, "k")) amax(0) = max(amax(0), abs(cast(X(i, k0 + k), f32)));
      auto scale = T::let(amax(0) / static_cast<float>(fp8_max), "scale");
      auto inv = T::let(1.0f / scale, "inv");
      for (Var k : T::serial(n, "k")) Q(i, k0 + k) = cast(cast(X(i, k0 + k), f32) * inv, out_t);
      S(i, kb) = scale;
    });
  });
}

}  // namespace

namespace {
void check_quantize(const Tensor& x, const QuantizeFp8Options& opt, SourceLoc loc) {
  const char* op = "tx.ops.quantize_fp8";
  if (!x.defined()) fail(op, "x", loc, "an undefined tensor");
  if (x.shape().size() != 2)
    fail(op, "x", loc, "rank " + std::to_string(x.shape().size()) + ": rows of a (M, K) matrix");
  if (!x.is_contiguous()) fail(op, "x", loc, "a strided view: pass .contiguous()");
  const DType t = x.dtype();
  if (t != f32 && t != f16 && t != bf16)
    fail(op, "x", loc, "dtype " + t.name() + ": quantize_fp8 takes float32, float16, bfloat16");
  if (opt.dtype != f8e4m3 && opt.dtype != f8e5m2)
    fail(op, "dtype", loc, opt.dtype.name() + ": the result is float8_e4m3fn or float8_e5m2");
  if (opt.block < 1) fail(op, "block", loc, std::to_string(opt.block) + ": a block has columns");
  if (opt.block_rows < 1)
    fail(op, "block_rows", loc, std::to_string(opt.block_rows) + ": a block has rows");
}
// The row kernel for blocks of 128 columns when K % 128 == 0: a warp per
// block, lane i holding its elements [4 i, 4 i + 4) (one 8-byte load of
// bf16 / f16), the block's max and min folded across the lanes by shuffles
// into every lane, then the same arithmetic as quantize_kernel -- the same
// bits -- and 4-byte stores of the fp8 data. Buffers as (blocks, 32, 4).
PrimFunc quantize_rows_kernel(std::int64_t blocks, DType in_t, DType out_t) {
  const double fp8_max = fp8_largest(out_t);
  const auto lane_rows = TileLayout(S({32, 4}, {1 * laneid, 1}));  // lane i: row i
  const auto every_lane = TileLayout(S({1}), R({32}, {1 * laneid}));
  return T::prim_func("quantize_fp8_rows_" + in_t.short_name(), [&](Handle x, Handle q, Handle s) {
    auto X = T::match_buffer(x, {blocks, 32, 4}, in_t);
    auto Q = T::match_buffer(q, {blocks, 32, 4}, out_t);
    auto Sc = T::match_buffer(s, {blocks}, f32);
    T::device_entry();
    auto cta = T::cta_id({(blocks + 3) / 4});
    auto warp = T::warp_id({4});
    auto lane = T::lane_id({32});
    T::thread_id({128});
    auto xin = T::alloc_buffer({32, 4}, in_t, scope::local, lane_rows);
    auto xf = T::alloc_buffer({32, 4}, f32, scope::local, lane_rows);
    auto qt = T::alloc_buffer({32, 4}, out_t, scope::local, lane_rows);
    auto hi = T::alloc_buffer({1}, f32, scope::local, every_lane);
    auto lo = T::alloc_buffer({1}, f32, scope::local, every_lane);
    auto blk = T::let(cta * 4 + warp, "blk");
    T::if_(blk < blocks, [&] {
      auto whole = region(span(blk, 1), {0, 32}, {0, 4});
      Tx::warp::copy(xin, X[whole]);
      Tx::warp::cast(xf, xin);
      Tx::warp::max(hi, xf, {.axes = {0, 1}});
      Tx::warp::min(lo, xf, {.axes = {0, 1}});
      auto amax = T::let(max(max(hi(0), -lo(0)), 1e-12f), "amax");
      auto scale = T::let(amax / static_cast<float>(fp8_max), "scale");
      auto inv = T::let(1.0f / scale, "inv");
      Tx::warp::mul(xf, xf, inv);
      Tx::warp::cast(qt, xf);
      Tx::warp::copy(Q[whole], qt);
      T::if_(lane == 0, [&] { Sc(blk) = scale; });
    });
  });
}

// Blocks of several rows (a weight's 128 x 128): a CTA of 256 threads per
// block. Each thread takes the block's elements t, t + 256, ... (row-major
// within the block: consecutive threads on consecutive columns), folds
// their |x| into its own maximum, and leaves it in shared memory; thread 0
// takes the largest of the 256 and publishes the scale; then every thread
// divides its elements by it. The scale is computed as quantize_kernel's
// (the same bits for a block of one row).
PrimFunc quantize_tiles_kernel(std::int64_t M, std::int64_t K, DType in_t, DType out_t,
                               std::int64_t br, std::int64_t bc) {
  const std::int64_t MB = (M + br - 1) / br, KB = (K + bc - 1) / bc, per = (br * bc + 255) / 256;
  const double fp8_max = fp8_largest(out_t);
  return T::prim_func("quantize_fp8_tiles_" + in_t.short_name(), [&](Handle x, Handle q, Handle s) {
    auto X = T::match_buffer(x, {M, K}, in_t);
    auto Q = T::match_buffer(q, {M, K}, out_t);
    auto Sc = T::match_buffer(s, {MB, KB}, f32);
    T::device_entry();
    auto cta = T::cta_id({MB * KB});
    auto tid = T::thread_id({256});
    auto ib = T::let(cta / KB, "ib"), kb = T::let(cta % KB, "kb");
    auto mine = T::alloc_buffer({1}, f32, scope::local);
    auto maxima = T::alloc_buffer({256}, f32, scope::shared);
    auto published = T::alloc_buffer({1}, f32, scope::shared);
    // Element e of this thread: (row, col) of the block, and whether it is in x.
    auto each = [&](const std::function<void(const Expr& i, const Expr& k)>& body) {
      for (Var e : T::serial(per, "e")) {
        auto flat = T::let(tid + e * 256, "flat");
        auto i = T::let(ib * br + flat / bc, "i"), k = T::let(kb * bc + flat % bc, "k");
        T::if_(flat < br * bc && i < M && k < K, [&] { body(i, k); });
      }
    };
    mine(0) = 1e-12f;
    each([&](const Expr& i, const Expr& k) { mine(0) = max(mine(0), abs(cast(X(i, k), f32))); });
    maxima(tid) = mine(0);
    T::cuda::cta_sync();
    T::if_(tid == 0, [&] {
      for (Var j : T::serial(255, "j")) mine(0) = max(mine(0), maxima(j + 1));
      auto scale = T::let(mine(0) / static_cast<float>(fp8_max), "scale");
      published(0) = scale;
      Sc(ib, kb) = scale;
    });
    T::cuda::cta_sync();
    auto inv = T::let(1.0f / published(0), "inv");
    each([&](const Expr& i, const Expr& k) { Q(i, k) = cast(cast(X(i, k), f32) * inv, out_t); });
  });
}

}  // namespace

namespace detail {
PrimFunc quantize_fp8_kernel(std::int64_t M, std::int64_t K, DType in_t, DType out_t,
                             std::int64_t block) {
  if (block == 128 && K % 128 == 0) return quantize_rows_kernel(M * K / 128, in_t, out_t);
  return quantize_kernel(M, K, in_t, out_t, block);
}
PrimFunc quantize_fp8_tiles_kernel(std::int64_t M, std::int64_t K, DType in_t, DType out_t,
                                   std::int64_t block_rows, std::int64_t block) {
  return quantize_tiles_kernel(M, K, in_t, out_t, block_rows, block);
}
}  // namespace detail

void quantize_fp8_out(const Tensor& x, const Tensor& data, const Tensor& scale,
                      QuantizeFp8Options opt, SourceLoc loc) {
  const char* op = "tx.ops.quantize_fp8";
  check_quantize(x, opt, loc);
  const std::int64_t M = x.shape()[0], K = x.shape()[1], KB = (K + opt.block - 1) / opt.block;
  const std::int64_t MB = (M + opt.block_rows - 1) / opt.block_rows;
  for (auto [y, name, dt, shape] :
       {std::tuple{&data, "data", opt.dtype, std::vector<std::int64_t>{M, K}},
        std::tuple{&scale, "scale", f32, std::vector<std::int64_t>{MB, KB}}}) {
    if (!y->defined() || y->dtype() != dt || y->shape() != shape || !y->is_contiguous() ||
        !(y->device() == x.device()))
      fail(op, name, loc,
           "must be a contiguous " + dt.name() + " tensor of shape (" + std::to_string(shape[0]) +
               ", " + std::to_string(shape[1]) + ") on " + x.device().str());
  }
  if (M == 0 || K == 0) return;
  char key[160];
  std::snprintf(key, sizeof key, "quantize_fp8|%s|%s|%lldx%lld|b%lldx%lld|%s",
                x.dtype().name().c_str(), opt.dtype.name().c_str(), static_cast<long long>(M),
                static_cast<long long>(K), static_cast<long long>(opt.block_rows),
                static_cast<long long>(opt.block), x.device().str().c_str());
  if (opt.block_rows > 1) {  // a CTA per block
    detail::special_cached(key, [&] {
      return compile(
          detail::quantize_fp8_tiles_kernel(M, K, x.dtype(), opt.dtype, opt.block_rows, opt.block),
          {.device = x.device()});
    }).launch({x, data, scale}, loc);
    return;
  }
  // Blocks of 128 whole columns: the warp-per-block row kernel.
  const bool rows = opt.block == 128 && K % 128 == 0;
  Kernel k = detail::special_cached(std::string(key) + (rows ? "|rows" : ""), [&] {
    return compile(detail::quantize_fp8_kernel(M, K, x.dtype(), opt.dtype, opt.block),
                   {.device = x.device()});
  });
  if (rows)
    k.launch({x.reshape({M * KB, 32, 4}), data.reshape({M * KB, 32, 4}), scale.reshape({M * KB})},
             loc);
  else
    k.launch({x, data, scale}, loc);
}

Fp8Quantized quantize_fp8(const Tensor& x, QuantizeFp8Options opt, SourceLoc loc) {
  check_quantize(x, opt, loc);
  const std::int64_t M = x.shape()[0], K = x.shape()[1], KB = (K + opt.block - 1) / opt.block;
  const std::int64_t MB = (M + opt.block_rows - 1) / opt.block_rows;
  Fp8Quantized r{Tensor::empty({M, K}, opt.dtype, x.device()),
                 Tensor::empty({MB, KB}, f32, x.device())};
  quantize_fp8_out(x, r.data, r.scale, opt, loc);
  return r;
}

}  // namespace tx::ops
