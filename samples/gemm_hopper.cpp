// A bf16 GEMM at Hopper speed, C = A B (A: M x K, B: K x N, both row-major),
// f32 accumulation, bf16 out -- written with tile primitives only.
//
// Warp specialization: warpgroup 0 produces, the others consume. The
// producer gives most of its registers back and walks the CTA's tiles,
// filling a ring of STAGES shared buffers with TMA copies (one thread issues
// a whole tile; the copy swizzles it for the tensor cores) that complete on
// the stage's `full` mbarrier. Each consumer warpgroup takes 64 rows of the
// CTA's BM x BN tile: it waits for a full stage, issues the warpgroup MMA
// straight from shared memory (wgmma, accumulator in registers), and
// releases the previous stage once this one's MMA is in flight. Its
// epilogue rounds the accumulators into shared memory and hands them to a
// TMA store, which drains while the next tile's MMAs run. The grid is
// one CTA per SM (persistent): CTA c takes tiles c, c + ctas, ... in groups
// of tile rows that share A and B panels in L2; the pipeline's (stage,
// phase) cursor is the running count of K steps, so the producer runs ahead
// into the next tile while the consumers store this one.
//
// On the CPU (--device=host) the same kernel runs through the host JIT with
// every thread as a fiber, the copies synchronous and the MMA as FMA loops.
//
// The T::profile regions (producer wait / load, consumer wait, mma,
// epilogue) cost nothing unless profiling is on (TX_PROFILE=1): then each
// warp records when it enters and leaves them, and the launch's timeline is
// Kernel::last_profile() (docs/profiling.md).
#include "sample_main.hpp"

using namespace tx;

struct HopperGemmConfig {
  std::int64_t bm = 128, bn = 256, bk = 64, stages = 3, group = 8;
  std::int64_t ctas = 132;  // persistent CTAs: the GPU's SM count
  // The epilogue through shared memory and a TMA store that drains while the
  // next tile's main loop runs (false: registers straight to global memory,
  // every CTA storing at once with the tensor cores idle -- 13% slower at
  // 4096^3 on an H100, docs/profiling.md).
  bool tma_store = true;
};

// t: bf16 or f16. Any M; N and K multiples of 8 (the TMA's 16-byte row
// pitch). The last tiles may reach past C, A and B: partial tiles, which the
// TMA fills with zeros when it loads them and the store masks.
PrimFunc gemm_hopper(std::int64_t M, std::int64_t N, std::int64_t K, DType t = bf16,
                     HopperGemmConfig c = {}) {
  const std::int64_t BM = c.bm, BN = c.bn, BK = c.bk, STAGES = c.stages;
  const std::int64_t consumers = BM / 64, KT = (K + BK - 1) / BK;
  // Persistent CTAs over the output tiles, in groups of tile rows (L2 reuse).
  const auto sched = T::tile_scheduler({.tiles_m = (M + BM - 1) / BM,
                                        .tiles_n = (N + BN - 1) / BN,
                                        .group = c.group,
                                        .ctas = c.ctas});
  return T::prim_func("gemm_hopper_" + t.short_name(), [&](Handle A_ptr, Handle B_ptr,
                                                           Handle C_ptr) {
    auto A = T::match_buffer(A_ptr, {M, K}, t);
    auto B = T::match_buffer(B_ptr, {K, N}, t);
    auto C = T::match_buffer(C_ptr, {M, N}, t);
    T::device_entry();
    auto cta = T::cta_id({sched.ctas()});
    auto wg = T::warpgroup_id({1 + consumers});
    auto tid = T::thread_id_in_wg({128});
    // Stages of A (BM x BK) and B (BK x BN) tiles, 128-byte swizzled rows.
    auto As = T::alloc_buffer({STAGES, BM, BK}, t, scope::shared,
                              layouts::swizzled_tiles({STAGES, BM, BK}, t));
    auto Bs = T::alloc_buffer({STAGES, BK, BN}, t, scope::shared,
                              layouts::swizzled_tiles({STAGES, BK, BN}, t));
    // The C tile on its way out (TMA-store epilogue only).
    TileBuffer Cs;
    if (c.tma_store)
      Cs = T::alloc_buffer({BM, BN}, t, scope::shared, layouts::swizzled_tiles({BM, BN}, t));
    auto pipe = T::pipeline(
        {.stages = static_cast<int>(STAGES), .consumer_arrivals = static_cast<int>(consumers)});
    T::if_(wg == 0,
           [&] {  // the producer
             T::cuda::decrease_registers(40);
             for (Var r : T::serial(sched.rounds(), "r")) {
               auto [valid, bm, bn] = sched.tile(cta, r);
               T::if_(valid, [&] {
                 for (Var kt : T::serial(KT, "kt")) {
                   auto it = T::let(r * KT + kt), s = T::let(pipe.stage(it));
                   T::profile("producer wait", [&] { pipe.producer_acquire(it); });
                   T::profile("producer load", [&] {
                     Tx::warpgroup::copy_async(As[region(span(s, 1), {0, BM}, {0, BK})],
                                               A[region(span(bm * BM, BM), span(kt * BK, BK))],
                                               {.barrier = pipe.full(it), .partial = true});
                     Tx::warpgroup::copy_async(Bs[region(span(s, 1), {0, BK}, {0, BN})],
                                               B[region(span(kt * BK, BK), span(bn * BN, BN))],
                                               {.barrier = pipe.full(it), .partial = true});
                     T::if_(tid == 0, [&] { pipe.producer_commit(it); });
                   });
                 }
               });
             }
           })
        .else_([&] {  // the consumers: 64 rows each
          T::cuda::increase_registers(232);
          auto acc = T::alloc_buffer({64, BN}, f32, scope::local, frag::wgmma_c(64, BN));
          auto out = T::alloc_buffer({64, BN}, t, scope::local, frag::wgmma_c(64, BN));
          // wg >= 1 here; the max states it where the range analysis does not look.
          auto row0 = T::let(max(wg - 1, 0) * 64);
          for (Var r : T::serial(sched.rounds(), "r")) {
            auto [valid, bm, bn] = sched.tile(cta, r);
            T::if_(valid, [&] {
              Tx::warpgroup::fill(acc, 0.0f);
              for (Var kt : T::serial(KT, "kt")) {
                auto it = T::let(r * KT + kt), s = T::let(pipe.stage(it));
                T::profile("consumer wait", [&] { pipe.consumer_wait(it); });
                T::profile("mma", [&] {
                  Tx::warpgroup::gemm(acc, As[region(span(s, 1), span(row0, 64), {0, BK})],
                                      Bs[region(span(s, 1), {0, BK}, {0, BN})],
                                      {.accum = true, .pending = 1});
                });
                // This stage's MMA is in flight, the previous one's is done.
                T::if_(tid == 0, [&] { T::if_(kt > 0, [&] { pipe.consumer_release(it - 1); }); });
              }
              T::cuda::wgmma_wait(0, acc);
              T::if_(tid == 0, [&] { pipe.consumer_release(r * KT + KT - 1); });
              // Epilogue: round to t and store this warpgroup's 64 x BN rows.
              T::profile("epilogue", [&] {
                Tx::warpgroup::cast(out, acc);
                auto c_tile = C[region(span(bm * BM + row0, 64), span(bn * BN, BN))];
                if (!c.tma_store) {
                  Tx::warpgroup::copy(c_tile, out, {.partial = true});
                  return;
                }
                // The last tile's store has read our rows of Cs: write them
                // again, and let the TMA store them while the next tile runs.
                auto mine = Cs[region(span(row0, 64), {0, BN})];
                T::cuda::tma_store_wait(0);
                T::cuda::warpgroup_sync();
                Tx::warpgroup::copy(mine, out);
                Tx::warpgroup::copy_async(c_tile, mine, {.partial = true});
              });
            });
          }
        });
  });
}

#ifndef TX_SAMPLE_NO_MAIN
int main(int argc, char** argv) {
  const std::int64_t M = 512, N = 768, K = 384;
  return sample::run(argc, argv, gemm_hopper(M, N, K), [&](const Kernel& k) {
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
