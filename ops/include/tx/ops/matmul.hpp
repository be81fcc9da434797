// Matrix multiply: C = A B with A (M, K) a contiguous row-major tensor and
// B (K, N) either row-major or the transpose of a row-major (N, K) tensor
// (bt.transpose(0, 1): torch's b.t(), the layout torch._scaled_mm asks for),
// on one device, f32 accumulation.
//
//   Tensor c = tx::ops::matmul(a, b);                          // f16 / bf16 -> same dtype
//   Tensor c = tx::ops::matmul(a, bt.transpose(0, 1));         // B stored as (N, K)
//   Tensor c = tx::ops::matmul(a, b, {.tune = true});          // time the tilings, remember
//
// Kernels (ops/src/matmul.cpp), by what the shape allows:
//   wgmma         on sm_90 (H100 / H200), f16 / bf16 (M % 64, N % 128, K % 64)
//                 and fp8 (K % 128, below):
//                 the warp-specialized TMA + wgmma kernel of
//                 samples/gemm_hopper.cpp (671.8 TFLOP/s at 4096^3 bf16 on an
//                 H100, cuBLAS 675-698 in the same runs), first in
//                 matmul_tilings(); below 256 rows the skinny-M rule below
//                 applies to it with 20% of the SMs as its threshold (wgmma
//                 64x256 at 128 rows: 152.9 TFLOP/s on an H100, against 94.3
//                 for the warp-MMA tiling the 45% rule picks).
//   tensor cores  cp.async ring + ldmatrix + mma.sync (the kernel of
//                 samples/gemm.cpp) on the GPU for f16 / bf16 when a tiling
//                 divides (M, N, K): the smallest asks M % 16, N % 64, K % 32.
//                 The tiling for a shape is the first of matmul_tilings() that
//                 divides it (ordered by what measured fastest on an H100 at
//                 4096^3); below 256 rows, the first of those that gives at
//                 least 0.45 x SMs CTAs (else the one with the most CTAs): on an
//                 H100, (128, 4096, 4096) takes 64x128x64 at 103 TFLOP/s where
//                 128x256x64 gives 48. With .tune, the fastest that divides,
//                 remembered per (dtype, shape class, GPU) in the cache folder's
//                 autotune.txt like the elementwise ops.
//                 fp8 (e4m3 / e5m2) on sm_90 runs the wgmma kernel too, with
//                 bk = 128 (M % 64, N % 128, K % 128): wgmma reads 8-bit
//                 operands K-major only, so the kernel reads B as (N, K) --
//                 as given when B is the transpose of an (N, K) tensor,
//                 else from a transposed copy made first (one pass over B).
//                 Each fp8 K step's partial tile is added to an f32 total
//                 (the tensor cores keep ~14 bits adding fp8 products;
//                 cuBLAS's default promotes the same way): bn <= 128.
//                 The wgmma kernel also reads a 16-bit B given as (N, K)
//                 without a copy, and on sm_90 takes shapes no tiling
//                 divides with partial tiles (TMA zero fill, masked
//                 stores) when K * element bytes % 16 == 0 and N % 8 == 0.
//                 Elsewhere (sm_89) fp8 runs this kernel with mma.sync
//                 m16n8k32 on the tilings with bk % 64 == 0 (B's fragments
//                 through copy/reg: ldmatrix .trans moves 16-bit units only;
//                 204.9 TFLOP/s at 4096^3 e4m3 on an H100, the path fp8 took
//                 there before the wgmma kernel read fp8).
//   SIMT          one thread per output element, a K loop of f32 FMAs: every
//                 other shape (on sm_90: those partial tiles cannot take) and the host (through the
//                 host JIT). A tx warning names why the tensor cores were not used.
// A B given as (N, K) to a kernel that reads (K, N) (the warp-MMA and SIMT
// kernels) is copied to row-major first; matmul_plan says so.
// Output: A's dtype for f16 / bf16 (one rounding of the f32 sum), f32 for fp8.
// Errors (tx.ops.matmul, at the caller's line): ranks other than 2, inner
// extents that differ, mixed dtypes, dtypes outside f16 / bf16 / fp8,
// strided tensors other than a transposed B (pass .contiguous()), tensors on
// different devices.
#pragma once

#include <cstdint>
#include <source_location>
#include <string>
#include <vector>

#include "tx/ir.hpp"
#include "tx/runtime/tensor.hpp"

namespace tx::ops {

struct MatmulOptions {
  bool tune = false;  // time every tiling that divides the shape; remember the fastest
};

// A tensor-core tiling: a CTA tile of bm x bn walked bk at a time through
// `stages` shared buffers by warps of wm x wn; `swizzle` picks XOR-swizzled
// shared tiles over padded rows.
// wgmma: the Hopper kernel instead (samples/gemm_hopper.cpp: TMA, an
// mbarrier pipeline, warpgroup MMA, a producer warpgroup and bm / 64
// consumer warpgroups, one persistent CTA per SM; wm, wn unused), sm_90 only.
struct MatmulTiling {
  std::int64_t bm, bn, bk, wm, wn, stages;
  bool swizzle;
  bool wgmma = false;
  // wgmma tilings with a 16-bit C: the epilogue through shared memory and a
  // TMA store (copy_async/tma_store) that drains under the next tile's MMAs.
  bool tma_store = false;
  std::string str() const;  // "128x256x64 w64x64 s3" (+ " sw"), "wgmma 128x256x64 s4" (+ " tma")
};

// The tilings in the order the default choice tries them.
const std::vector<MatmulTiling>& matmul_tilings();

Tensor matmul(const Tensor& a, const Tensor& b, MatmulOptions opt = {},
              std::source_location loc = std::source_location::current());

// Which kernel matmul(a, b) runs for these operands, in words ("tensor cores
// 128x256x64 w64x64 s3", "tensor cores 16x64x32 w16x16 s4, split-K 4", or
// "SIMT (<reason>)"), without running it.
std::string matmul_plan(const Tensor& a, const Tensor& b, MatmulOptions opt = {});

// Grouped matrix multiply (a mixture-of-experts layer's two GEMMs): the
// tokens of `a` (T, K), sorted by expert, times their expert's matrix of
// `b` (E, K, N); expert e owns rows [offsets[e - 1], offsets[e]) (expert 0
// from row 0) -- torch._grouped_mm's convention: `offsets` is an int32 (E,)
// tensor of cumulative row ends, on a's device, read by the kernel (no copy
// to the host, no synchronization).
//
//   Tensor y = tx::ops::grouped_matmul(x_sorted, w_experts, offsets);        // (T, N)
//   Tensor y = tx::ops::grouped_matmul(x, w_nk.transpose(1, 2), offsets);    // b stored (E, N, K)
//
// b may also be the transpose of a row-major (E, N, K) tensor (strides
// (N K, 1, K): torch's w.transpose(1, 2)). Rows past offsets[E - 1] are not
// written (as torch._grouped_mm). Offsets that decrease or pass T are
// clamped in the kernel (an expert's rows end no earlier than the previous
// expert's and at T): memory is never read or written out of range; on the
// host, where the offsets are at hand, they are checked and such offsets are
// a tx error. Experts with no rows cost nothing.
// Kernels (ops/src/grouped_matmul.cpp): on sm_90 for f16 / bf16 / fp8 with K
// rows of whole 16 bytes and N % 8 == 0, one persistent launch of the
// Hopper kernel (TMA, mbarrier pipeline, wgmma, warp specialization) whose
// CTAs walk the (expert, row tile, column tile) triples; 64-row tiles when
// the experts average 64 rows or fewer, else 128. Elsewhere (the host, other
// GPUs, other shapes) a SIMT kernel (a warning on a GPU says why).
// Output: a's dtype for f16 / bf16 (f32 accumulation), f32 for fp8, f32 /
// f64 summed in their own precision.
// Errors (tx.ops.grouped_matmul, at the caller's line): a not (T, K), b not
// (E, K, N), offsets not int32 (E,), mixed dtypes or devices, strided views
// other than b's transpose.
Tensor grouped_matmul(const Tensor& a, const Tensor& b, const Tensor& offsets,
                      std::source_location loc = std::source_location::current());
// The same into the caller's `out`: contiguous (T, N) of the output dtype on
// a's device (rows past offsets[E - 1] are left as they are). For callers
// with their own allocator (torch.ops.tx.grouped_matmul uses PyTorch's
// caching allocator: tx's pool gives memory above TX_POOL_KEEP_BYTES back at
// synchronization, so a multi-GiB result would be mapped again every call).
void grouped_matmul_out(const Tensor& a, const Tensor& b, const Tensor& offsets, const Tensor& out,
                        std::source_location loc = std::source_location::current());
// fp8 GEMM with scales (torch._scaled_mm's operands; DeepSeek-V3's block
// scaling): C = (A x scale_a) (B x scale_b) for fp8 A (M, K) and B (K, N) --
// B row-major or, without a copy, the transpose of a row-major (N, K)
// tensor -- rounded once to out_dtype (bf16 by default; f16, f32).
//   scale_a: f32, one for A (any shape of one element), one per row (M, 1),
//            or one per 1 x 128 block of a row (M, ceil(K / 128));
//   scale_b: f32, one for B, one per column (1, N) (with scale_a (M, 1):
//            torch._scaled_mm's row-wise recipe), or one per 128 x 128 block
//            (ceil(K / 128), ceil(N / 128)) (any strides: a transposed view
//            of the weights' (N / 128, K / 128) scales is fine).
// Block scales change along K, so each 128-deep K step's partial product is
// multiplied by its factors before it joins the f32 total (in the Hopper
// kernel: a fresh accumulator per step, as matmul's fp8 promotion); one-per-
// tensor, per-row and per-column scales multiply the total once. On sm_90 the Hopper
// kernel (tiles 128 x 128 x 128, 64-row tiles for M <= 64); elsewhere a SIMT
// kernel with the same order of sums (a warning on a GPU).
//
//   auto [xq, xs] = tx::ops::quantize_fp8(x);                 // (M, K) -> fp8, (M, K / 128)
//   Tensor y = tx::ops::scaled_matmul(xq, wq.transpose(0, 1), xs, ws.transpose(0, 1));
struct ScaledMatmulOptions {
  DType out_dtype = bf16;
};
Tensor scaled_matmul(const Tensor& a, const Tensor& b, const Tensor& scale_a, const Tensor& scale_b,
                     ScaledMatmulOptions opt = {},
                     std::source_location loc = std::source_location::current());
// The same into the caller's `out`: contiguous (M, N) of opt.out_dtype on a's device.
void scaled_matmul_out(const Tensor& a, const Tensor& b, const Tensor& scale_a,
                       const Tensor& scale_b, const Tensor& out, ScaledMatmulOptions opt = {},
                       std::source_location loc = std::source_location::current());
std::string scaled_matmul_plan(const Tensor& a, const Tensor& b, const Tensor& scale_a,
                               const Tensor& scale_b, ScaledMatmulOptions opt = {});

// x (M, K) (f32 / f16 / bf16) quantized to fp8 in blocks of `block_rows` x
// `block` elements: scale[i, j] = max |x| over block (i, j) / the fp8
// maximum (448 for e4m3, 57344 for e5m2; at least 1e-12 / that), data = x /
// its block's scale rounded to fp8. Blocks of 1 x 128 (the default) are the
// activations' scales of scaled_matmul; 128 x 128 blocks of a weight W
// (N, K) are B = W^T's: scaled_matmul(xq, wq.transpose(0, 1), xs,
// ws.transpose(0, 1)).
struct QuantizeFp8Options {
  std::int64_t block = 128;     // columns per block
  std::int64_t block_rows = 1;  // rows per block
  DType dtype = f8e4m3;
};
struct Fp8Quantized {
  Tensor data;   // (M, K) fp8
  Tensor scale;  // (ceil(M / block_rows), ceil(K / block)) f32
};
Fp8Quantized quantize_fp8(const Tensor& x, QuantizeFp8Options opt = {},
                          std::source_location loc = std::source_location::current());
// The same into the caller's tensors: data (M, K) of opt.dtype, scale
// (ceil(M / block_rows), ceil(K / block)) f32, contiguous, on x's device.
void quantize_fp8_out(const Tensor& x, const Tensor& data, const Tensor& scale,
                      QuantizeFp8Options opt = {},
                      std::source_location loc = std::source_location::current());

// Which kernel grouped_matmul runs for these operands, in words, without running it.
std::string grouped_matmul_plan(const Tensor& a, const Tensor& b, const Tensor& offsets);

namespace detail {
// matmul's kernels, for tests that run them where matmul would not pick
// them (the host): the tensor-core kernel of `tiling` (`ctas` persistent
// CTAs for a wgmma tiling) whose output, with splits > 1, is the f32
// (splits * M, N) workspace of split-K's parts; and the kernel that adds
// the parts into C (flat views: (splits * M * N,) and (M * N,)).
// b_nk (wgmma tilings): the kernel takes B as its transpose, (N, K) row-major.
PrimFunc matmul_kernel(std::int64_t M, std::int64_t N, std::int64_t K, DType t,
                       const MatmulTiling& tiling, std::int64_t splits = 1, std::int64_t ctas = 132,
                       bool b_nk = false);
PrimFunc matmul_splitk_reduce(std::int64_t M, std::int64_t N, std::int64_t splits, DType out_t);
// The all-gather fusion (tx::ops::AllGatherMatmul): C (M, N) = A B with A's
// M rows arriving as M / ranks rows per rank; parameters (a_local (M /
// ranks, K), a_gathered (M, K), b, c, ready (ranks u32), rank, epoch): rows
// of rank r are read from a_gathered once ready[r] >= epoch, this rank's
// from a_local. The Hopper kernel (tiles rotated to start on this rank's
// rows) and a SIMT kernel for any shape and the host.
PrimFunc all_gather_matmul_kernel(std::int64_t M, std::int64_t N, std::int64_t K, DType t,
                                  const MatmulTiling& tiling, std::int64_t ctas, bool b_nk,
                                  std::int64_t ranks);
PrimFunc all_gather_matmul_simt(std::int64_t M, std::int64_t N, std::int64_t K, DType t,
                                std::int64_t ranks);
// The wgmma tiling the fused kernel takes for these per-rank rows (whole
// tiles only), or nullptr (not sm_90, not f16 / bf16, no tiling divides).
const MatmulTiling* all_gather_matmul_tiling(std::int64_t rows_per_rank, std::int64_t N,
                                             std::int64_t K, DType t, const Device& d);

// grouped_matmul's kernels, shape-generic in the token count T: parameters
// (a (T, K), b (E, K, N) -- (E, N, K) with b_nk --, c (T, N), offsets (E,)
// int32). The Hopper kernel with `tiling` (a wgmma tiling) on `ctas`
// persistent CTAs, and the SIMT kernel (any device, any dtype).
PrimFunc grouped_matmul_kernel(std::int64_t E, std::int64_t N, std::int64_t K, DType t,
                               const MatmulTiling& tiling, std::int64_t ctas, bool b_nk);
PrimFunc grouped_matmul_simt(std::int64_t E, std::int64_t N, std::int64_t K, DType t);
// The wgmma tiling grouped_matmul picks: 128 rows, or 64 for small experts;
// 128 columns for N <= 128.
const MatmulTiling& grouped_matmul_tiling(DType t, bool small_experts, std::int64_t N = 256);

// scaled_matmul's kernels: parameters (a (M, K), b (N, K), c (M, N),
// scale_a, scale_b as the kernel reads them: (1,), (M, 1) or (M, kb); (1,),
// (1, N) (b_scales rows: one per column of the product) or (nb, kb)). The
// Hopper kernel on `ctas` persistent CTAs, or the SIMT one.
enum class ScaleForm { tensor, rows, blocks };
PrimFunc scaled_matmul_kernel(std::int64_t M, std::int64_t N, std::int64_t K, DType t, DType out_t,
                              ScaleForm a_scales, ScaleForm b_scales, bool simt,
                              std::int64_t ctas = 132);
const MatmulTiling& scaled_matmul_tiling(std::int64_t M);
// quantize_fp8's kernel for these operands: the warp-per-block row kernel
// (block 128, K % 128 == 0; buffers (M K / 128, 32, 4) and (M K / 128,)) or
// the thread-per-block one (x (M, K), data (M, K), scale (M, ceil(K / block))).
PrimFunc quantize_fp8_kernel(std::int64_t M, std::int64_t K, DType in_t, DType out_t,
                             std::int64_t block = 128);
// quantize_fp8's kernel for blocks of several rows: a CTA per block (x (M,
// K), data (M, K), scale (ceil(M / block_rows), ceil(K / block))).
PrimFunc quantize_fp8_tiles_kernel(std::int64_t M, std::int64_t K, DType in_t, DType out_t,
                                   std::int64_t block_rows, std::int64_t block);

// The float32 / float64 kernel (64 x 64 tiles of C, K in steps of 16 through
// shared memory; any shape).
PrimFunc matmul_simt_tiled(std::int64_t M, std::int64_t N, std::int64_t K, DType t);
}  // namespace detail

}  // namespace tx::ops
