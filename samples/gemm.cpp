// A bf16 GEMM on tensor cores, C = A B (A: M x K, B: K x N, both row-major),
// f32 accumulation, bf16 out -- written with tile primitives only.
//
// Each CTA computes a bm x bn tile of C with warps of wm x wn. K is walked bk at
// a time through a ring of STAGES shared buffers: cp.async copies run STAGES - 1
// tiles ahead of the tensor cores (Tx::cta::copy_async, commit / wait groups).
// Each warp moves 16-wide slices into register fragments with ldmatrix one slice
// ahead of the mma.sync that consumes them (Tx::warp::copy, Tx::warp::gemm).
// Shared rows are padded by 16 bytes (or swizzled) against bank conflicts; CTAs
// walk C in groups of tile rows that share A and B panels in L2. On the host the
// same program runs through the portable variants.
#include <numeric>

#include "sample_main.hpp"

using namespace tx;

// The tiling: a CTA tile of bm x bn, walked bk at a time through `stages`
// shared buffers, by warps of wm x wn each ((bm / wm) x (bn / wn) warps).
struct GemmConfig {
  std::int64_t bm = 128, bn = 128, bk = 32, wm = 64, wn = 64, stages = 3, group = 8;
  bool swizzle = false;  // XOR-swizzled shared tiles instead of padded rows
};
constexpr std::int64_t PAD = 8;  // row padding of the shared tiles, in elements

// t: bf16 or f16. M % bm, N % bn, K % bk == 0.
PrimFunc gemm(std::int64_t M, std::int64_t N, std::int64_t K, DType t = bf16, GemmConfig c = {}) {
  const std::int64_t BM = c.bm, BN = c.bn, BK = c.bk, WM = c.wm, WN = c.wn, STAGES = c.stages;
  const std::int64_t warps_n = BN / WN, warps = (BM / WM) * warps_n, KK = BK / 16;
  const auto sched = T::tile_scheduler({.tiles_m = M / BM, .tiles_n = N / BN, .group = c.group});
  if (KK % 2 != 0)  // the two fragment sets alternate in step across stages
    fail("gemm", "bk", {}, "bk = " + std::to_string(BK) + ": a multiple of 32 (two k slices)");
  return T::prim_func("gemm_" + t.short_name(), [&](Handle A_ptr, Handle B_ptr, Handle C_ptr) {
    auto A = T::match_buffer(A_ptr, {M, K}, t);
    auto B = T::match_buffer(B_ptr, {K, N}, t);
    auto C = T::match_buffer(C_ptr, {M, N}, t);
    T::device_entry();
    // This CTA's tile of C: groups of tile rows, walked column by column (L2 reuse).
    const auto tile = sched.tile(T::cta_id({sched.ctas()}));
    const Var bm = tile.m, bn = tile.n;
    auto warp = T::warp_id({warps});
    auto wm = T::let(warp / warps_n), wn = T::let(warp % warps_n);

    // The ring of shared tiles: rows padded by 16 bytes, or XOR-swizzled.
    auto ring = [&](std::int64_t rows, std::int64_t cols) {
      return c.swizzle ? layouts::swizzled_tiles({STAGES, rows, cols}, t)
                       : TileLayout(S({STAGES, rows, cols}, {rows * (cols + PAD), cols + PAD, 1}));
    };
    auto As = T::alloc_buffer({STAGES, BM, BK}, t, scope::shared, ring(BM, BK));
    auto Bs = T::alloc_buffer({STAGES, BK, BN}, t, scope::shared, ring(BK, BN));
    // A warp's fragments, two sets (slice kk computes while kk + 1 loads).
    std::vector<TileBuffer> Af, Bf;
    for (int i = 0; i < 2; ++i) {
      Af.push_back(T::alloc_buffer({WM, 16}, t, scope::local, frag::mma_a(WM, 16, t)));
      Bf.push_back(T::alloc_buffer({16, WN}, t, scope::local, frag::mma_b(16, WN, t)));
    }
    auto acc = T::alloc_buffer({WM, WN}, f32, scope::local, frag::mma_c(WM, WN));
    auto out = T::alloc_buffer({WM, WN}, t, scope::local, frag::mma_c(WM, WN));

    const std::int64_t KT = K / BK;
    auto load_stage = [&](const auto& kt) {
      auto s = T::let(kt % STAGES);
      Tx::cta::copy_async(As[region(span(s, 1), {0, BM}, {0, BK})],
                          A[region(span(bm * BM, BM), span(kt * BK, BK))]);
      Tx::cta::copy_async(Bs[region(span(s, 1), {0, BK}, {0, BN})],
                          B[region(span(kt * BK, BK), span(bn * BN, BN))]);
    };
    auto load_fragments = [&](int i, const auto& stage, std::int64_t kk) {
      Tx::warp::copy(Af[i], As[region(span(stage, 1), span(wm * WM, WM), {kk * 16, kk * 16 + 16})]);
      Tx::warp::copy(Bf[i], Bs[region(span(stage, 1), {kk * 16, kk * 16 + 16}, span(wn * WN, WN))]);
    };

    // Prologue: STAGES - 1 tiles in flight, one commit group each (empty past K).
    for (Var s : T::unroll(STAGES - 1, "s")) {
      T::if_(s < KT, [&] { load_stage(s); });
      T::cuda::commit_group();
    }
    T::cuda::wait_group(STAGES - 2);
    T::cuda::cta_sync();
    load_fragments(0, 0, 0);
    Tx::warp::fill(acc, 0.0f);
    for (Var kt : T::serial(KT, "kt")) {
      auto stage = T::let(kt % STAGES), next = T::let((kt + 1) % STAGES);
      for (std::int64_t kk = 0; kk < KK; ++kk) {  // unrolled as the kernel is built
        if (kk == 0) {  // every thread is past reading stage kt - 1: refill it
          T::if_(kt + (STAGES - 1) < KT, [&] { load_stage(kt + (STAGES - 1)); });
          T::cuda::commit_group();  // always: one group per iteration
        }
        if (kk + 1 < KK) {
          load_fragments((kk + 1) % 2, stage, kk + 1);
        } else {                            // the next slice is in tile kt + 1:
          T::cuda::wait_group(STAGES - 2);  // it has landed (for this thread)
          T::cuda::cta_sync();              // ... for every thread
          T::if_(kt + 1 < KT, [&] { load_fragments((kk + 1) % 2, next, 0); });
        }
        Tx::warp::gemm(acc, Af[kk % 2], Bf[kk % 2], {.accum = true});
      }
    }
    // Epilogue: round to t in registers, store the warp's WM x WN tile.
    Tx::warp::cast(out, acc);
    Tx::warp::copy(C[region(span(bm * BM + wm * WM, WM), span(bn * BN + wn * WN, WN))], out);
  });
}

#ifndef TX_SAMPLE_NO_MAIN
int main(int argc, char** argv) {
  const std::int64_t M = 256, N = 384, K = 192;
  return sample::run(argc, argv, gemm(M, N, K), [&](const Kernel& k) {
    std::vector<double> a = sample::random(M * K, bf16, -1.0, 1.0);
    std::vector<double> b = sample::random(K * N, bf16, -1.0, 1.0);
    Tensor At = Tensor::from_doubles(a, {M, K}, bf16, k.device());
    Tensor Bt = Tensor::from_doubles(b, {K, N}, bf16, k.device());
    Tensor Ct = Tensor::empty({M, N}, bf16, k.device());
    Ct.fill_bits(0x7fc0);  // NaN until written
    k(At, Bt, Ct);
    // float64 reference; the bound: f32 accumulation (K terms) and one bf16 rounding.
    std::vector<double> want(M * N, 0.0);
    for (std::int64_t i = 0; i < M; ++i)
      for (std::int64_t p = 0; p < K; ++p)
        for (std::int64_t j = 0; j < N; ++j) want[i * N + j] += a[i * K + p] * b[p * N + j];
    return sample::max_error(Ct.to_doubles(), want, 1e-2, 1.0 / 128);
  });
}
#endif
