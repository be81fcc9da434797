// tx::ops::matmul: the tensor-core GEMM of samples/gemm.cpp as a library
// kernel (any tiling of matmul_tilings()), a SIMT kernel for the rest, the
// choice between them, and tuning remembered in autotune.txt.
#include "tx/ops/matmul.hpp"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <mutex>
#include <numeric>
#include <unordered_map>

#include "autotune_file.hpp"
#include "hopper_mainloop.hpp"
#include "special_ops.hpp"
#include "tx/builder.hpp"
#include "tx/fragments.hpp"
#include "tx/runtime/cuda_driver.hpp"
#include "tx/runtime/kernel.hpp"

namespace tx::ops {

namespace {

using SourceLoc = std::source_location;

// The tensor-core kernel: C (M x N) = A (M x K) B (K x N), the tiling's CTA
// tiles in groups of 8 tile rows; a ring of `stages` shared tiles filled by
// cp.async STAGES - 1 tiles ahead; ldmatrix fragments one 16-wide k-slice
// ahead of mma.sync. samples/gemm.cpp explains it line by line.
// With splits > 1 (split-K): CTA (tile, s) sums the s-th of `splits` equal
// parts of K and writes its f32 partial tile to C, a (splits * M, N)
// workspace that splitk_reduce_kernel sums.
PrimFunc tensor_core_kernel(std::int64_t M, std::int64_t N, std::int64_t K, DType t,
                            const MatmulTiling& c, std::int64_t splits = 1) {
  const std::int64_t BM = c.bm, BN = c.bn, BK = c.bk, WM = c.wm, WN = c.wn, STAGES = c.stages;
  // k slices of one mma: 16 (f16 / bf16, m16n8k16) or 32 (fp8, m16n8k32).
  const std::int64_t KS = t.is_fp8() ? 32 : 16;
  const std::int64_t warps_n = BN / WN, warps = (BM / WM) * warps_n, KK = BK / KS;
  const std::int64_t KT = K / BK / splits;  // k tiles per CTA
  const DType out_t = t.is_fp8() || splits > 1 ? f32 : t;
  const auto sched = T::tile_scheduler({.tiles_m = M / BM, .tiles_n = N / BN});
  constexpr std::int64_t pad = 8;
  const std::string name = "matmul_" + t.short_name() + (splits > 1 ? "_splitk" : "");
  return T::prim_func(name, [&](Handle a, Handle b, Handle cp) {
    auto A = T::match_buffer(a, {M, K}, t);
    auto B = T::match_buffer(b, {K, N}, t);
    auto C = T::match_buffer(cp, {splits * M, N}, out_t);
    T::device_entry();
    auto cta = T::cta_id({sched.ctas(), splits});
    const auto tile = sched.tile(cta);
    const Var bm = tile.m, bn = tile.n;
    // This CTA's part of K, in k tiles, and its rows of the workspace.
    auto k0 = T::let(cta[1] * KT), c_row0 = T::let(cta[1] * M);
    auto warp = T::warp_id({warps});
    auto wm = T::let(warp / warps_n), wn = T::let(warp % warps_n);
    auto ring = [&](std::int64_t rows, std::int64_t cols) {
      return c.swizzle ? layouts::swizzled_tiles({STAGES, rows, cols}, t)
                       : TileLayout(S({STAGES, rows, cols}, {rows * (cols + pad), cols + pad, 1}));
    };
    auto As = T::alloc_buffer({STAGES, BM, BK}, t, scope::shared, ring(BM, BK));
    auto Bs = T::alloc_buffer({STAGES, BK, BN}, t, scope::shared, ring(BK, BN));
    std::vector<TileBuffer> Af, Bf;
    for (int i = 0; i < 2; ++i) {
      Af.push_back(T::alloc_buffer({WM, KS}, t, scope::local, frag::mma_a(WM, KS, t)));
      Bf.push_back(T::alloc_buffer({KS, WN}, t, scope::local, frag::mma_b(KS, WN, t)));
    }
    auto acc = T::alloc_buffer({WM, WN}, f32, scope::local, frag::mma_c(WM, WN));
    auto load_stage = [&](const auto& kt) {
      auto s = T::let(kt % STAGES);
      Tx::cta::copy_async(As[region(span(s, 1), {0, BM}, {0, BK})],
                          A[region(span(bm * BM, BM), span((k0 + kt) * BK, BK))]);
      Tx::cta::copy_async(Bs[region(span(s, 1), {0, BK}, {0, BN})],
                          B[region(span((k0 + kt) * BK, BK), span(bn * BN, BN))]);
    };
    auto load_fragments = [&](int i, const auto& stage, std::int64_t kk) {
      Tx::warp::copy(Af[i], As[region(span(stage, 1), span(wm * WM, WM), {kk * KS, kk * KS + KS})]);
      Tx::warp::copy(Bf[i], Bs[region(span(stage, 1), {kk * KS, kk * KS + KS}, span(wn * WN, WN))]);
    };
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
      for (std::int64_t kk = 0; kk < KK; ++kk) {
        if (kk == 0) {
          T::if_(kt + (STAGES - 1) < KT, [&] { load_stage(kt + (STAGES - 1)); });
          T::cuda::commit_group();
        }
        if (kk + 1 < KK) {
          load_fragments((kk + 1) % 2, stage, kk + 1);
        } else {
          T::cuda::wait_group(STAGES - 2);
          T::cuda::cta_sync();
          T::if_(kt + 1 < KT, [&] { load_fragments((kk + 1) % 2, next, 0); });
        }
        Tx::warp::gemm(acc, Af[kk % 2], Bf[kk % 2], {.accum = true});
      }
    }
    auto c_tile = C[region(span(c_row0 + bm * BM + wm * WM, WM), span(bn * BN + wn * WN, WN))];
    if (out_t == f32) {  // fp8 in, or a split-K partial: f32 out
      Tx::warp::copy(c_tile, acc);
    } else {
      auto out = T::alloc_buffer({WM, WN}, t, scope::local, frag::mma_c(WM, WN));
      Tx::warp::cast(out, acc);
      Tx::warp::copy(c_tile, out);
    }
  });
}

// The Hopper kernel: a producer warpgroup feeds a ring of `stages` 128-byte
// swizzled shared tiles through TMA copies that complete on mbarriers;
// bm / 64 consumer warpgroups run wgmma from shared memory, each on 64 rows
// of the CTA tile, releasing a stage once the next MMA is in flight; `ctas`
// persistent CTAs walk the tiles in groups of 8 tile rows.
// samples/gemm_hopper.cpp explains it line by line.
// With splits > 1 (split-K) the scheduler's tile rows are (part of K, tile
// row) pairs and each writes its f32 partial tile to C, a (splits * M, N)
// workspace that splitk_reduce_kernel sums.
// b_nk: B arrives as its transpose, an (N, K) row-major tensor (torch's
// b.t()); its tiles land in shared memory K-major and the MMA reads them
// with transpose_b -- the only B wgmma takes for fp8.
// fp8: Hopper's tensor cores add fp8 products into the accumulator with
// about 14 bits kept (DeepSeek-V3 report, 3.3.2; measured here: a relative
// error of 2^-12 of sum |a b| at K = 128), an error that grows with K. Each
// K step (bk = 128: four k32 MMAs) therefore runs into a fresh partial tile
// that is then added to an f32 total in registers ("promotion", what cuBLAS
// does unless asked for fast accumulation): the error stays that of 128
// products. Two accumulators per consumer: tilings with bn <= 128.
// Shapes the tile does not divide (splits = 1 only) take partial tiles: the
// TMA fills what lies past A's and B's ends with zeros (adding nothing to
// the sums) and the epilogue masks its stores to C.
// gather_ranks > 0: the all-gather fusion (tx::ops::AllGatherMatmul). A
// arrives as M / gather_ranks rows per rank: this rank's own rows in
// `a_local`, the others' landing in `a_gathered` (M, K) -- copied there by
// the peers' copy engines, each block announced by ready[r] reaching
// `epoch`. Tile rows are rotated so that the CTAs start on this rank's own
// block (no wait) and reach a peer's block, oldest first, as it arrives;
// the producer waits for a block's flag before its first TMA load of it.
PrimFunc hopper_kernel(std::int64_t M, std::int64_t N, std::int64_t K, DType t,
                       const MatmulTiling& c, std::int64_t sms, std::int64_t splits = 1,
                       bool b_nk = false, std::int64_t gather_ranks = 0) {
  const std::int64_t BM = c.bm, BN = c.bn, BK = c.bk, STAGES = c.stages;
  const bool partial = M % BM != 0 || N % BN != 0 || K % BK != 0;
  if (partial && splits > 1)
    fail("tx.ops.matmul", "", {}, "split-K needs a shape the tile divides (" + c.str() + ")");
  const std::int64_t consumers = BM / 64, KT = (K + BK - 1) / BK / splits, TM = (M + BM - 1) / BM;
  const DType out_t = splits > 1 || t.is_fp8() ? f32 : t;
  const bool promote = t.is_fp8();
  const bool tma_store = c.tma_store && out_t == t;
  const auto sched =
      T::tile_scheduler({.tiles_m = TM * splits, .tiles_n = (N + BN - 1) / BN, .ctas = sms});
  const bool gather = gather_ranks > 0;
  if (gather && (splits > 1 || partial || TM % gather_ranks != 0))
    fail("tx.ops.all_gather_matmul", "", {},
         "the fused kernel needs whole tiles of " + c.str() + " in every rank's rows");
  const std::int64_t TMr = gather ? TM / gather_ranks : TM;  // tile rows per rank
  const std::string name = (gather ? "all_gather_matmul_wgmma_" : "matmul_wgmma_") +
                           t.short_name() + (b_nk ? "_nt" : "") + (splits > 1 ? "_splitk" : "");
  std::vector<std::string> params = {"a", "b", "cp"};
  if (gather) params = {"a_local", "a_gathered", "b", "c", "ready", "rank", "epoch"};
  return T::prim_func_n(name, params, [&](const std::vector<Handle>& h) {
    const std::size_t at = gather ? 1 : 0;  // where a (the gathered A) sits
    auto A = T::match_buffer(h[at], {M, K}, t, std::nullopt, gather ? "A_gathered" : "A");
    auto B = b_nk ? T::match_buffer(h[at + 1], {N, K}, t, std::nullopt, "B")
                  : T::match_buffer(h[at + 1], {K, N}, t, std::nullopt, "B");
    auto C = T::match_buffer(h[at + 2], {splits * M, N}, out_t, std::nullopt, "C");
    TileBuffer A_local, Ready;
    Var rank, epoch;
    if (gather) {
      A_local = T::match_buffer(h[0], {TMr * BM, K}, t, std::nullopt, "A_local");
      Ready = T::match_buffer(h[4], {gather_ranks}, u32, std::nullopt, "Ready");
      rank = T::match_scalar(h[5], i32, "rank", DimFacts{.min = 0, .max = gather_ranks - 1});
      epoch = T::match_scalar(h[6], u32, "epoch");
    }
    T::device_entry();
    // The tile row a scheduled row stands for: rotated by this rank's block
    // under the gather fusion, so that the first rounds need no peer's data.
    auto tile_row = [&](const Expr& row) -> Expr {
      if (gather) return (row % TM + rank * TMr) % TM;
      return row % TM;
    };
    auto cta = T::cta_id({sched.ctas()});
    auto wg = T::warpgroup_id({1 + consumers});
    auto tid = T::thread_id_in_wg({128});
    auto As = T::alloc_buffer({STAGES, BM, BK}, t, scope::shared,
                              layouts::swizzled_tiles({STAGES, BM, BK}, t));
    // B's stage tile as B has it: (BK, BN), or (BN, BK) for b_nk.
    const std::int64_t b_rows = b_nk ? BN : BK, b_cols = b_nk ? BK : BN;
    auto Bs = T::alloc_buffer({STAGES, b_rows, b_cols}, t, scope::shared,
                              layouts::swizzled_tiles({STAGES, b_rows, b_cols}, t));
    auto b_stage = [&](const Expr& s) { return Bs[region(span(s, 1), {0, b_rows}, {0, b_cols})]; };
    TileBuffer Cs;  // the C tile on its way out (the TMA-store epilogue)
    if (tma_store)
      Cs = T::alloc_buffer({BM, BN}, t, scope::shared, layouts::swizzled_tiles({BM, BN}, t));
    auto pipe = T::pipeline(
        {.stages = static_cast<int>(STAGES), .consumer_arrivals = static_cast<int>(consumers)});
    T::if_(wg == 0, [&] {
      T::cuda::decrease_registers(40);
      for (Var r : T::serial(sched.rounds(), "r")) {
        auto [valid, row, bn] = sched.tile(cta, r);
        auto bm = T::let(tile_row(row), "bm"), k0 = T::let(row / TM * KT);
        T::if_(valid, [&] {
          Var owner;  // the rank whose rows these are (gather fusion)
          if (gather) {
            owner = T::let(bm / TMr, "owner");
            T::if_(owner != rank, [&] { T::dist::wait_until(Ready(owner), epoch); });
          }
          for (Var kt : T::serial(KT, "kt")) {
            auto it = T::let(r * KT + kt), s = T::let(pipe.stage(it));
            pipe.producer_acquire(it);
            auto a_stage = As[region(span(s, 1), {0, BM}, {0, BK})];
            if (gather) {
              T::if_(owner == rank, [&] {
                Tx::warpgroup::copy_async(
                    a_stage, A_local[region(span(bm % TMr * BM, BM), span(kt * BK, BK))],
                    {.barrier = pipe.full(it)});
              }).else_([&] {
                Tx::warpgroup::copy_async(a_stage, A[region(span(bm * BM, BM), span(kt * BK, BK))],
                                          {.barrier = pipe.full(it)});
              });
            } else {
              Tx::warpgroup::copy_async(a_stage,
                                        A[region(span(bm * BM, BM), span((k0 + kt) * BK, BK))],
                                        {.barrier = pipe.full(it), .partial = partial});
            }
            Tx::warpgroup::copy_async(b_stage(s),
                                      b_nk ? B[region(span(bn * BN, BN), span((k0 + kt) * BK, BK))]
                                           : B[region(span((k0 + kt) * BK, BK), span(bn * BN, BN))],
                                      {.barrier = pipe.full(it), .partial = partial});
            T::if_(tid == 0, [&] { pipe.producer_commit(it); });
          }
        });
      }
    }).else_([&] {
      T::cuda::increase_registers(232);
      auto acc = T::alloc_buffer({64, BN}, f32, scope::local, frag::wgmma_c(64, BN));
      TileBuffer total;  // fp8: the sum of the K steps' partial tiles
      if (promote)
        total = T::alloc_buffer({64, BN}, f32, scope::local, frag::wgmma_c(64, BN), "total");
      TileBuffer out;  // the rounded tile, for 16-bit outputs
      if (out_t != f32)
        out = T::alloc_buffer({64, BN}, t, scope::local, frag::wgmma_c(64, BN), "out");
      auto row0 = T::let(max(wg - 1, 0) * 64);
      for (Var r : T::serial(sched.rounds(), "r")) {
        auto [valid, row, bn] = sched.tile(cta, r);
        // Output rows: the tile's, in the workspace part of its K part.
        auto c_row = T::let(row / TM * M + tile_row(row) * BM);
        T::if_(valid, [&] {
          detail::hopper_tile_mainloop(
              {.pipe = pipe, .As = As, .b_stage = b_stage, .bk = BK, .k_steps = KT, .b_nk = b_nk},
              r, row0, tid, acc, total);
          if (promote) {  // fp8 in: f32 out
            Tx::warpgroup::copy(C[region(span(c_row + row0, 64), span(bn * BN, BN))], total,
                                {.partial = partial});
          } else if (out_t == f32) {  // a split-K partial: f32 out
            Tx::warpgroup::copy(C[region(span(c_row + row0, 64), span(bn * BN, BN))], acc,
                                {.partial = partial});
          } else if (tma_store) {
            // The last tile's store has read these rows of Cs: write them
            // again; the TMA stores them while the next tile's MMAs run.
            auto mine = Cs[region(span(row0, 64), {0, BN})];
            Tx::warpgroup::cast(out, acc);
            T::cuda::tma_store_wait(0);
            T::cuda::warpgroup_sync();
            Tx::warpgroup::copy(mine, out);
            Tx::warpgroup::copy_async(C[region(span(c_row + row0, 64), span(bn * BN, BN))], mine,
                                      {.partial = partial});
          } else {
            Tx::warpgroup::cast(out, acc);
            Tx::warpgroup::copy(C[region(span(c_row + row0, 64), span(bn * BN, BN))], out,
                                {.partial = partial});
          }
        });
      }
    });
  });
}

// One thread per element of C: an f32 sum over K in increasing k, one
// rounding to C's dtype. Any shape and dtype; 256 threads per CTA.
PrimFunc simt_kernel(std::int64_t M, std::int64_t N, std::int64_t K, DType t, DType out_t) {
  return T::prim_func("matmul_simt_" + t.short_name(), [&](Handle a, Handle b, Handle cp) {
    auto A = T::match_buffer(a, {M, K}, t);
    auto B = T::match_buffer(b, {K, N}, t);
    auto C = T::match_buffer(cp, {M, N}, out_t);
    T::device_entry();
    auto cta = T::cta_id({(M * N + 255) / 256});
    auto tid = T::thread_id({256});
    auto i = T::let((cta * 256 + tid) / N), j = T::let((cta * 256 + tid) % N);
    auto sum = T::alloc_buffer({1}, f32, scope::local);
    T::if_(i < M, [&] {
      sum(0) = 0.0f;
      for (Var k : T::serial(K, "k")) sum(0) = sum(0) + cast(A(i, k), f32) * cast(B(k, j), f32);
      C(i, j) = cast(sum(0), out_t);
    });
  });
}

// The all-gather fusion on any device (the host's ranks; shapes the wgmma
// kernel does not take): simt_kernel with A's rows from `a_local` (this
// rank's block) or `a_gathered` (a peer's, once ready[owner] reached epoch).
PrimFunc gathered_simt_kernel(std::int64_t M, std::int64_t N, std::int64_t K, DType t,
                              std::int64_t ranks) {
  const std::int64_t Mr = M / ranks;
  return T::prim_func("all_gather_matmul_simt_" + t.short_name(),
                      [&](Handle a_local, Handle a_gathered, Handle b, Handle cp, Handle ready,
                          Handle rank_h, Handle epoch_h) {
                        auto A_local = T::match_buffer(a_local, {Mr, K}, t);
                        auto A = T::match_buffer(a_gathered, {M, K}, t);
                        auto B = T::match_buffer(b, {K, N}, t);
                        auto C = T::match_buffer(cp, {M, N}, t);
                        auto Ready = T::match_buffer(ready, {ranks}, u32);
                        Var rank = T::match_scalar(rank_h, i32, "rank",
                                                   DimFacts{.min = 0, .max = ranks - 1});
                        Var epoch = T::match_scalar(epoch_h, u32, "epoch");
                        T::device_entry();
                        auto cta = T::cta_id({(M * N + 255) / 256});
                        auto tid = T::thread_id({256});
                        auto i = T::let((cta * 256 + tid) / N), j = T::let((cta * 256 + tid) % N);
                        auto sum = T::alloc_buffer({1}, f32, scope::local);
                        T::if_(i < M, [&] {
                          auto owner = T::let(i / Mr, "owner");
                          sum(0) = 0.0f;
                          T::if_(owner == rank, [&] {
                            auto li = T::let(i % Mr, "li");  // i - owner * Mr, provably in range
                            for (Var k : T::serial(K, "k"))
                              sum(0) = sum(0) + cast(A_local(li, k), f32) * cast(B(k, j), f32);
                          }).else_([&] {
                            T::dist::wait_until(Ready(owner), epoch);
                            for (Var k : T::serial(K, "k"))
                              sum(0) = sum(0) + cast(A(i, k), f32) * cast(B(k, j), f32);
                          });
                          C(i, j) = cast(sum(0), t);
                        });
                      });
}

// The f32 / f64 GEMM (no tensor cores: tx has no TF32 or FP64 MMA path):
// C = A B summed in the operands' own precision, k in increasing order (as
// PyTorch computes float32 with allow_tf32 off: full f32 products and sums).
// A CTA of 256 threads computes a 64 x 64 tile of C, each thread 4 x 4
// elements (rows ty + 16 i, columns tx + 16 j: a warp reads 16 consecutive
// columns of the B tile and two broadcast rows of the A tile per k), over
// K in steps of 16 staged in shared memory. Loads and stores past the
// matrix are guarded, so any shape runs (zeros fill the tiles' edges).
// Against the one-thread-per-element kernel each element of A and B is
// read from global memory 64 times less often.
PrimFunc simt_tiled_kernel(std::int64_t M, std::int64_t N, std::int64_t K, DType t) {
  constexpr std::int64_t BM = 64, BN = 64, BK = 16, TM = 4, TN = 4;
  const std::int64_t tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
  const std::int64_t KT = (K + BK - 1) / BK;
  return T::prim_func("matmul_simt_tiled_" + t.short_name(), [&](Handle a, Handle b, Handle cp) {
    auto A = T::match_buffer(a, {M, K}, t);
    auto B = T::match_buffer(b, {K, N}, t);
    auto C = T::match_buffer(cp, {M, N}, t);
    T::device_entry();
    auto cta = T::cta_id({tiles_m * tiles_n});
    auto tid = T::thread_id({256});
    auto bm = T::let(cta / tiles_n), bn = T::let(cta % tiles_n);
    auto ty = T::let(tid / 16), tx = T::let(tid % 16);
    auto As = T::alloc_buffer({BM, BK}, t, scope::shared);
    auto Bs = T::alloc_buffer({BK, BN}, t, scope::shared);
    auto acc = T::alloc_buffer({TM * TN}, t, scope::local);
    auto a_r = T::alloc_buffer({TM}, t, scope::local);
    auto b_r = T::alloc_buffer({TN}, t, scope::local);
    for (std::int64_t e = 0; e < TM * TN; ++e) acc(e) = make_float(0.0, t);
    for (Var kt : T::serial(KT, "kt")) {
      // Each thread stages 4 elements of each tile (1024 / 256): rows of 16
      // of A and rows of 64 of B, consecutive threads on consecutive columns.
      for (std::int64_t l = 0; l < BM * BK / 256; ++l) {
        auto r = T::let((tid + 256 * l) / BK), c = T::let((tid + 256 * l) % BK);
        auto gi = T::let(bm * BM + r), gk = T::let(kt * BK + c);
        T::if_(gi < M && gk < K, [&] { As(r, c) = A(gi, gk); }).else_([&] {
          As(r, c) = make_float(0.0, t);
        });
      }
      for (std::int64_t l = 0; l < BK * BN / 256; ++l) {
        auto r = T::let((tid + 256 * l) / BN), c = T::let((tid + 256 * l) % BN);
        auto gk = T::let(kt * BK + r), gj = T::let(bn * BN + c);
        T::if_(gk < K && gj < N, [&] { Bs(r, c) = B(gk, gj); }).else_([&] {
          Bs(r, c) = make_float(0.0, t);
        });
      }
      T::cuda::cta_sync();
      for (Var k : T::unroll(BK, "k")) {
        for (std::int64_t i = 0; i < TM; ++i) a_r(i) = As(ty + 16 * i, k);
        for (std::int64_t j = 0; j < TN; ++j) b_r(j) = Bs(k, tx + 16 * j);
        for (std::int64_t i = 0; i < TM; ++i)
          for (std::int64_t j = 0; j < TN; ++j) acc(i * TN + j) = acc(i * TN + j) + a_r(i) * b_r(j);
      }
      T::cuda::cta_sync();
    }
    for (std::int64_t i = 0; i < TM; ++i)
      for (std::int64_t j = 0; j < TN; ++j) {
        auto gi = T::let(bm * BM + ty + 16 * i), gj = T::let(bn * BN + tx + 16 * j);
        T::if_(gi < M && gj < N, [&] { C(gi, gj) = acc(i * TN + j); });
      }
  });
}

// Split-K's second step: C = the sum of the `splits` f32 partial products
// in W (splits * M * N, part after part), added in part order (the same
// sum on every run) and rounded once to C's dtype. Four elements per
// thread, in 16-byte vectors (M * N is a multiple of 64: N % 64).
PrimFunc splitk_reduce_kernel(std::int64_t M, std::int64_t N, std::int64_t splits, DType out_t) {
  const std::int64_t MN = M * N;
  return T::prim_func("matmul_splitk_reduce_" + out_t.short_name(), [&](Handle w, Handle cp) {
    auto W = T::match_buffer(w, {splits * MN}, f32);
    auto C = T::match_buffer(cp, {MN}, out_t);
    T::device_entry();
    auto cta = T::cta_id({(MN / 4 + 255) / 256});
    auto tid = T::thread_id({256});
    auto base = T::let((cta * 256 + tid) * 4);
    T::if_(base < MN, [&] {
      auto sum = T::alloc_buffer({4}, f32, scope::local);
      auto part = T::alloc_buffer({4}, f32, scope::local);
      Tx::thread::copy(sum, W[region(span(base, 4))]);
      for (Var s : T::unroll(splits - 1, "s")) {
        Tx::thread::copy(part, W[region(span((s + 1) * MN + base, 4))]);
        for (Var j : T::unroll(4, "j")) sum(j) = sum(j) + part(j);
      }
      auto out = T::alloc_buffer({4}, out_t, scope::local);
      for (Var j : T::unroll(4, "j")) out(j) = cast(sum(j), out_t);
      Tx::thread::copy(C[region(span(base, 4))], out);
    });
  });
}

// The tiling divides the shape, and its kernel runs on the current GPU for
// dtype t: the Hopper kernel on sm_90 with tiles of 128-byte K rows (bk 64
// for 16-bit types, 128 for fp8: the widest swizzle, which wgmma reads
// fastest), the warp-MMA kernel with k steps of 32 for fp8 (bk % 64).
bool divides(const MatmulTiling& c, std::int64_t M, std::int64_t N, std::int64_t K, DType t) {
  if (c.wgmma && (runtime::current_device().cc_major != 9 || c.bk * t.bytes() != 128)) return false;
  // Two fragment sets alternate between k slices: an even number of slices
  // per stage keeps the alternation in step across stages (bk / 32 even).
  if (!c.wgmma && t.is_fp8() && c.bk % 64 != 0) return false;
  return M % c.bm == 0 && N % c.bn == 0 && K % c.bk == 0;
}

// For a shape no tiling divides: the Hopper kernel with partial tiles, when
// the TMA can address the operands (rows of A and B a multiple of 16 bytes:
// K * bytes, and N * bytes for a 16-bit (K, N) B) and the masked epilogue
// C (N % 8). 64-row tiles for
// up to 64 rows, else the first tiling of the dtype. nullptr elsewhere.
const MatmulTiling* partial_tiling(std::int64_t M, std::int64_t N, std::int64_t K, DType t) {
  if (runtime::current_device().cc_major != 9) return nullptr;
  // N % 8 is also B's 16-byte rows when B is (K, N) in 16 bits; fp8's B is (N, K).
  if ((K * t.bytes()) % 16 != 0 || N % 8 != 0) return nullptr;
  const MatmulTiling* pick = nullptr;
  for (const MatmulTiling& c : matmul_tilings()) {
    if (!c.wgmma || c.bk * t.bytes() != 128) continue;
    if (!pick) pick = &c;
    if (M <= 64 && c.bm == 64) return &c;
  }
  return pick;
}

bool divided_by_some_tiling(std::int64_t M, std::int64_t N, std::int64_t K, DType t) {
  for (const MatmulTiling& c : matmul_tilings())
    if (divides(c, M, N, K, t)) return true;
  return false;
}

// Why the tensor-core kernel cannot run these operands, or "" when it can.
std::string tensor_core_refusal(DType t, std::int64_t M, std::int64_t N, std::int64_t K,
                                const Device& d) {
  if (!d.is_cuda()) return "the host has no tensor cores";
  if (t == f32 || t == f64)
    return t.name() + ": tx has no TF32 or FP64 tensor-core path; it runs in " + t.name() +
           " (as PyTorch with allow_tf32 off)";
  if (t != f16 && t != bf16 && !t.is_fp8())
    return t.name() + ": the tensor cores take f16, bf16 and fp8";
  const runtime::DeviceInfo& dev = runtime::current_device();
  if (dev.cc_major < 8) return dev.arch() + ": cp.async and mma.sync bf16 need sm_80";
  if (t.is_fp8() && dev.cc_major * 10 + dev.cc_minor < 89)
    return dev.arch() + ": fp8 mma (m16n8k32) needs sm_89";
  if (divided_by_some_tiling(M, N, K, t) || partial_tiling(M, N, K, t)) return "";
  return "(" + std::to_string(M) + ", " + std::to_string(N) + ", " + std::to_string(K) +
         ") is not a multiple of any tiling (the smallest needs M % 16, N % 64, K % 32" +
         (t.is_fp8() ? "; fp8 needs K % 64" : "") + ")" +
         (dev.cc_major == 9 ? "; partial tiles need rows of A and B of whole 16 bytes and N % 8"
                            : "");
}

std::string shape_key(DType t, std::int64_t M, std::int64_t N, std::int64_t K) {
  auto lg = [](std::int64_t v) {
    int l = 0;
    while ((std::int64_t{1} << (l + 1)) <= v) ++l;
    return l;
  };
  // A shape class: log2 buckets of M, N, K and which tilings divide the shape
  // ("matmul3": the tilings' indices since the fp8 wgmma ones became bn <= 128).
  std::string k = "matmul3|" + t.name() + "|m2^" + std::to_string(lg(M)) + "_n2^" +
                  std::to_string(lg(N)) + "_k2^" + std::to_string(lg(K)) + "_d";
  for (const MatmulTiling& c : matmul_tilings()) k += divides(c, M, N, K, t) ? "1" : "0";
  return k + "|" + runtime::current_device().name;
}

// b_nk (wgmma tilings only): the kernel reads B as an (N, K) tensor.
Kernel tensor_core_for(std::int64_t M, std::int64_t N, std::int64_t K, DType t,
                       const MatmulTiling& c, const Device& d, std::int64_t splits = 1,
                       bool b_nk = false) {
  char key[192];
  std::snprintf(key, sizeof key, "matmul|%s|%lldx%lldx%lld|%s|%s|split%lld%s", t.name().c_str(),
                static_cast<long long>(M), static_cast<long long>(N), static_cast<long long>(K),
                c.str().c_str(), d.str().c_str(), static_cast<long long>(splits),
                b_nk ? "|nt" : "");
  if (c.wgmma) {
    const std::int64_t sms = runtime::current_device().sm_count;
    return detail::special_cached(key + std::string("|ctas") + std::to_string(sms), [&] {
      return compile(hopper_kernel(M, N, K, t, c, sms, splits, b_nk), {.device = d});
    });
  }
  return detail::special_cached(
      key, [&] { return compile(tensor_core_kernel(M, N, K, t, c, splits), {.device = d}); });
}

// Split-K for skinny M: when the tiling's tiles leave SMs idle, K is cut
// into `splits` equal parts, each CTA sums one part into an f32 workspace
// and a second kernel adds the parts (reading B, the large operand, at the
// rate of every SM instead of a few). The most parts, of 2, 4 or 8, that
// keep at most one round of the persistent Hopper kernel's CTAs (two CTAs
// per SM for the warp-MMA kernel), at least 4 k tiles per part, and a
// workspace whose round trip (written, then read: 8 s M N bytes) is at most
// an eighth of B's bytes: on an H100 (2026-11-27) 16 x 4096 x 4096 f16 went
// from 21.6 to 24.6 TFLOP/s with 4 parts (1 MB of workspace), while
// 128 x 4096 x 4096 lost 8-14% (8 MB against B's 32). 1 (no split) for
// M >= 256 or when the tiles already fill the SMs.
std::int64_t splits_for(const MatmulTiling& c, std::int64_t M, std::int64_t N, std::int64_t K,
                        DType t) {
  const std::int64_t sms = runtime::current_device().sm_count;
  const std::int64_t ctas = (M / c.bm) * (N / c.bn), KT = K / c.bk;
  if (M >= 256 || ctas >= sms || !divides(c, M, N, K, t)) return 1;
  const std::int64_t most = c.wgmma ? sms : 2 * sms;
  std::int64_t best = 1;
  for (std::int64_t s : {2, 4, 8})
    if (KT % s == 0 && KT / s >= 4 && ctas * s <= most && s * M * N < 2147483647 &&
        64 * s * M <= K * t.bytes())
      best = s;
  return best;
}

Kernel splitk_reduce_for(std::int64_t M, std::int64_t N, std::int64_t splits, DType out_t,
                         const Device& d) {
  char key[160];
  std::snprintf(key, sizeof key, "matmul_splitk_reduce|%s|%lldx%lld|%lld|%s", out_t.name().c_str(),
                static_cast<long long>(M), static_cast<long long>(N),
                static_cast<long long>(splits), d.str().c_str());
  return detail::special_cached(
      key, [&] { return compile(splitk_reduce_kernel(M, N, splits, out_t), {.device = d}); });
}

std::string split_str(std::int64_t splits) {
  return splits > 1 ? ", split-K " + std::to_string(splits) : "";
}

// The tiling for a shape: remembered, tuned now, or the first that divides.
const MatmulTiling& choose(std::int64_t M, std::int64_t N, std::int64_t K, DType t, const Device& d,
                           bool tune) {
  const auto& all = matmul_tilings();
  if (!divided_by_some_tiling(M, N, K, t)) return *partial_tiling(M, N, K, t);
  std::size_t first = 0;
  while (!divides(all[first], M, N, K, t)) ++first;
  // Skinny M (< 256 rows): large tiles leave most SMs idle (128 x 4096 in
  // 128 x 256 tiles is 16 CTAs). Take the first tiling that gives at least
  // 45% as many CTAs as there are SMs (20% for the Hopper kernel, whose
  // CTAs each keep the tensor cores busier: at (128, 4096, 4096) on an H100
  // wgmma 64x256 with 32 CTAs ran 152.9 TFLOP/s, the warp-MMA 64x128 with 64
  // CTAs 94.3), else the one with the most CTAs.
  if (M < 256) {
    const std::int64_t sms = runtime::current_device().sm_count;
    std::size_t most = first;
    auto ctas = [&](std::size_t i) { return (M / all[i].bm) * (N / all[i].bn); };
    std::size_t pick = all.size();
    for (std::size_t i = first; i < all.size(); ++i) {
      if (!divides(all[i], M, N, K, t)) continue;
      if (ctas(i) > ctas(most)) most = i;
      const std::int64_t want = all[i].wgmma ? sms / 5 : sms * 9 / 20;
      if (pick == all.size() && ctas(i) >= want) pick = i;
    }
    first = pick < all.size() ? pick : most;
  }
  static std::mutex mu;
  static auto* known = new std::map<std::string, std::size_t>();
  const std::string key = shape_key(t, M, N, K);
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = known->find(key); it != known->end()) return all[it->second];
  // autotune.txt stores a tiling as "direct <32 * (index + 1)> 1" (its
  // index in matmul_tilings(), in the elementwise ops' line format).
  const runtime::DiskCache& cache = runtime::DiskCache::instance();
  if (auto c = detail::remembered_config(cache, key)) {
    const std::size_t i = static_cast<std::size_t>(c->threads / 32 - 1);
    if (i < all.size() && divides(all[i], M, N, K, t)) {
      (*known)[key] = i;
      return all[i];
    }
  }
  if (!tune) return all[first];
  Tensor A = Tensor::empty({M, K}, t, d), B = Tensor::empty({K, N}, t, d);
  Tensor C = Tensor::empty({M, N}, t.is_fp8() ? f32 : t, d);
  // Small finite values: no overflow while timing (fp8: 0.5 in e4m3, 0.25 in e5m2).
  const std::uint64_t bits = t == bf16 ? 0x3c00 : t == f16 ? 0x2c00 : 0x30;
  A.fill_bits(bits);
  B.fill_bits(bits);
  std::size_t best = first;
  float best_ms = 1e30f;
  for (std::size_t i = 0; i < all.size(); ++i) {
    if (!divides(all[i], M, N, K, t)) continue;
    // fp8 on wgmma reads B as (N, K): the same constant bytes, reshaped.
    const bool nk = all[i].wgmma && t.is_fp8();
    Kernel k = tensor_core_for(M, N, K, t, all[i], d, 1, nk);
    const Tensor Bk = nk ? B.reshape({N, K}) : B;
    for (int w = 0; w < 3; ++w) k(A, Bk, C);
    std::vector<float> times;
    runtime::EventTimer timer;
    for (int r = 0; r < 9; ++r) {
      timer.start();
      k(A, Bk, C);
      timer.stop();
      times.push_back(timer.elapsed_ms());
    }
    std::nth_element(times.begin(), times.begin() + 4, times.end());
    std::fprintf(stderr, "[tx tune] matmul %s %lldx%lldx%lld %s: %.4f ms\n", t.name().c_str(),
                 static_cast<long long>(M), static_cast<long long>(N), static_cast<long long>(K),
                 all[i].str().c_str(), times[4]);
    if (times[4] < best_ms) {
      best_ms = times[4];
      best = i;
    }
  }
  (*known)[key] = best;
  Config c;
  c.strategy = Strategy::direct;
  c.threads = static_cast<int>(32 * (best + 1));
  c.num_per_thread = 1;
  detail::remember_config(cache, key, c);
  return all[best];
}

struct Operands {
  std::int64_t M, N, K;
  DType t, out_t;
  bool b_nk;  // b is the transpose of a row-major (N, K) tensor
};

// B given as the transpose of a row-major (N, K) tensor (torch's b.t(), the
// layout torch._scaled_mm asks of its second operand): strides (1, K).
bool transposed_rows(const Tensor& b) {
  return !b.is_contiguous() && b.shape().size() == 2 && b.strides()[0] == 1 &&
         b.strides()[1] == b.shape()[0];
}

Operands check(const Tensor& a, const Tensor& b, SourceLoc loc) {
  const std::string op = "tx.ops.matmul";
  for (auto [x, name] : {std::pair{&a, "a"}, std::pair{&b, "b"}}) {
    if (!x->defined()) fail(op, name, loc, "an undefined tensor");
    if (x->shape().size() != 2)
      fail(op, name, loc, "rank " + std::to_string(x->shape().size()) + ": matmul takes matrices");
    if (!x->is_contiguous() && !(x == &b && transposed_rows(b)))
      fail(op, name, loc,
           std::string("a strided view: pass .contiguous() (matmul reads row-major tensors") +
               (x == &b ? ", and b also as the transpose of a row-major (N, K) tensor)" : ")"));
  }
  if (a.shape()[1] != b.shape()[0])
    fail(op, "b", loc,
         "inner extents differ: a is (" + std::to_string(a.shape()[0]) + ", " +
             std::to_string(a.shape()[1]) + ") and b is (" + std::to_string(b.shape()[0]) + ", " +
             std::to_string(b.shape()[1]) + ")");
  if (a.dtype() != b.dtype())
    fail(op, "b", loc, "dtype " + b.dtype().name() + " differs from a's " + a.dtype().name());
  const DType t = a.dtype();
  if (t != f16 && t != bf16 && t != f8e4m3 && t != f8e5m2 && t != f32 && t != f64)
    fail(op, "a", loc,
         "dtype " + t.name() +
             ": matmul takes float32, float64, f16, bf16, float8_e4m3fn or float8_e5m2");
  if (!(a.device() == b.device()))
    fail(op, "b", loc, "on " + b.device().str() + ", a on " + a.device().str());
  return {a.shape()[0],      b.shape()[1], a.shape()[1], t, t.bytes() == 1 ? f32 : t,
          transposed_rows(b)};
}

}  // namespace

namespace detail {
PrimFunc matmul_kernel(std::int64_t M, std::int64_t N, std::int64_t K, DType t,
                       const MatmulTiling& tiling, std::int64_t splits, std::int64_t ctas,
                       bool b_nk) {
  if (b_nk && !tiling.wgmma)
    fail("tx.ops.detail.matmul_kernel", "b", {},
         "b as (N, K) is read by the wgmma kernel only (" + tiling.str() + ")");
  return tiling.wgmma ? hopper_kernel(M, N, K, t, tiling, ctas, splits, b_nk)
                      : tensor_core_kernel(M, N, K, t, tiling, splits);
}
PrimFunc all_gather_matmul_kernel(std::int64_t M, std::int64_t N, std::int64_t K, DType t,
                                  const MatmulTiling& tiling, std::int64_t ctas, bool b_nk,
                                  std::int64_t ranks) {
  return hopper_kernel(M, N, K, t, tiling, ctas, 1, b_nk, ranks);
}
PrimFunc all_gather_matmul_simt(std::int64_t M, std::int64_t N, std::int64_t K, DType t,
                                std::int64_t ranks) {
  return gathered_simt_kernel(M, N, K, t, ranks);
}
const MatmulTiling* all_gather_matmul_tiling(std::int64_t rows_per_rank, std::int64_t N,
                                             std::int64_t K, DType t, const Device& d) {
  if (!d.is_cuda() || !(t == f16 || t == bf16)) return nullptr;
  for (const MatmulTiling& c : matmul_tilings())
    if (c.wgmma && divides(c, rows_per_rank, N, K, t)) return &c;
  return nullptr;
}
PrimFunc matmul_splitk_reduce(std::int64_t M, std::int64_t N, std::int64_t splits, DType out_t) {
  return splitk_reduce_kernel(M, N, splits, out_t);
}
PrimFunc matmul_simt_tiled(std::int64_t M, std::int64_t N, std::int64_t K, DType t) {
  return simt_tiled_kernel(M, N, K, t);
}
}  // namespace detail

std::string MatmulTiling::str() const {
  if (wgmma)
    return "wgmma " + std::to_string(bm) + "x" + std::to_string(bn) + "x" + std::to_string(bk) +
           " s" + std::to_string(stages) + (tma_store ? " tma" : "");
  return std::to_string(bm) + "x" + std::to_string(bn) + "x" + std::to_string(bk) + " w" +
         std::to_string(wm) + "x" + std::to_string(wn) + " s" + std::to_string(stages) +
         (swizzle ? " sw" : "");
}

const std::vector<MatmulTiling>& matmul_tilings() {
  // Ordered by bf16 4096^3 time on an H100 (bench/gemm, 2026-11-24):
  // 128x256x64 s3 0.345 ms, 128x256x32 s4 0.352, 128x128x32 sw 0.368, ...;
  // then smaller tiles for shapes the large ones do not divide.
  // On sm_90 the Hopper kernel comes first (bench/gemm, H100, 2026-11-25:
  // wgmma 128x256x64 s4 0.205 ms, 64x256x64 s4 0.232, 128x128x64 s6 0.259).
  // fp8 wgmma tilings (bk 128: 128-byte rows; bn <= 128: two accumulators,
  // see hopper_kernel) come first; divides() keeps each dtype to its own.
  // The TMA-store epilogue first for 16-bit types (H100, 2026-11-28, the
  // sample's kernel: 128x256x64 s3 tma 0.180 ms, s4 without 0.203 ms).
  static const std::vector<MatmulTiling> t = {
      {128, 128, 128, 0, 0, 6, true, true}, {64, 128, 128, 0, 0, 8, true, true},
      {128, 64, 128, 0, 0, 8, true, true},  {128, 256, 64, 0, 0, 3, true, true, true},
      {128, 256, 64, 0, 0, 4, true, true},  {64, 256, 64, 0, 0, 4, true, true},
      {128, 128, 64, 0, 0, 6, true, true},  {128, 256, 64, 64, 64, 3, false},
      {128, 256, 32, 64, 64, 4, false},     {256, 128, 32, 64, 64, 4, false},
      {128, 128, 32, 64, 64, 3, true},      {64, 128, 64, 32, 64, 4, false},
      {64, 64, 32, 32, 32, 4, true},        {16, 64, 32, 16, 16, 4, false},
  };
  return t;
}

std::string matmul_plan(const Tensor& a, const Tensor& b, MatmulOptions opt) {
  Operands o = check(a, b, SourceLoc::current());
  std::string no = tensor_core_refusal(o.t, o.M, o.N, o.K, a.device());
  if ((o.t == f32 || o.t == f64) && a.device().is_cuda())
    no = "no TF32 or FP64 tensor-core path: " + o.t.name() +
         " products and sums, as PyTorch with "
         "allow_tf32 off";
  if (!no.empty())
    return std::string(o.t == f32 || o.t == f64 ? "SIMT tiled 64x64x16 (" : "SIMT (") + no + ")" +
           (o.b_nk ? ", B copied to row-major first" : "");
  const MatmulTiling& c = choose(o.M, o.N, o.K, o.t, a.device(), opt.tune);
  const bool b_nk = c.wgmma && (o.b_nk || o.t.is_fp8());
  const char* b_copy = b_nk && !o.b_nk   ? ", B transposed to (N, K) first"
                       : !b_nk && o.b_nk ? ", B copied to row-major first"
                                         : "";
  const char* partial = divides(c, o.M, o.N, o.K, o.t) ? "" : ", partial tiles";
  return "tensor cores " + c.str() + split_str(splits_for(c, o.M, o.N, o.K, o.t)) + partial +
         b_copy;
}

namespace {

// What a call resolves to, remembered per (shape, dtype, device, tune): the
// kernel, split-K's parts and sum, or the SIMT kernel. A repeated call then
// costs a lookup, the output's allocation and the launches -- no tiling
// choice, no cache keys built: at 16 x 4096 x 4096 (21 us on an H100) the
// library's own host time is a visible part of a call.
struct MatmulCall {
  Kernel kernel;  // tensor-core or SIMT
  Kernel reduce;  // split-K's sum (splits > 1)
  std::int64_t splits = 1;
  bool b_nk = false;  // the kernel reads B as a row-major (N, K) tensor
};
struct MatmulCallKey {
  std::int64_t m, n, k;
  std::uint64_t dtype_bits;
  int device;  // index, -1 for the host
  bool tune;
  bool b_nk;  // B given as the transpose of an (N, K) tensor
  bool operator==(const MatmulCallKey& o) const {
    return m == o.m && n == o.n && k == o.k && dtype_bits == o.dtype_bits && device == o.device &&
           tune == o.tune && b_nk == o.b_nk;
  }
};
struct MatmulCallHash {
  std::size_t operator()(const MatmulCallKey& c) const noexcept {
    std::uint64_t h = 0xcbf29ce484222325ull;
    for (std::uint64_t v :
         {static_cast<std::uint64_t>(c.m), static_cast<std::uint64_t>(c.n),
          static_cast<std::uint64_t>(c.k), c.dtype_bits, static_cast<std::uint64_t>(c.device + 1),
          static_cast<std::uint64_t>(c.tune) | static_cast<std::uint64_t>(c.b_nk) << 1})
      h = (h ^ v) * 0x100000001b3ull;
    return static_cast<std::size_t>(h);
  }
};

std::shared_ptr<const MatmulCall> resolve_call(const Operands& o, const Device& d, bool tune,
                                               SourceLoc loc) {
  static std::mutex mu;
  static auto* calls =
      new std::unordered_map<MatmulCallKey, std::shared_ptr<const MatmulCall>, MatmulCallHash>();
  const MatmulCallKey key{.m = o.M,
                          .n = o.N,
                          .k = o.K,
                          .dtype_bits = static_cast<std::uint64_t>(o.t.code) << 8 | o.t.bits,
                          .device = d.is_cuda() ? d.index : -1,
                          .tune = tune,
                          .b_nk = o.b_nk};
  {
    std::lock_guard<std::mutex> lock(mu);
    if (auto it = calls->find(key); it != calls->end()) return it->second;
  }
  auto call = std::make_shared<MatmulCall>();
  std::string no = tensor_core_refusal(o.t, o.M, o.N, o.K, d);
  if (no.empty()) {
    const MatmulTiling& tiling = choose(o.M, o.N, o.K, o.t, d, tune);
    call->splits = splits_for(tiling, o.M, o.N, o.K, o.t);
    // The wgmma kernel reads B as given (either layout) -- fp8 always as
    // (N, K); the warp-MMA kernel as (K, N).
    call->b_nk = tiling.wgmma && (o.b_nk || o.t.is_fp8());
    call->kernel = tensor_core_for(o.M, o.N, o.K, o.t, tiling, d, call->splits, call->b_nk);
    if (call->splits > 1) call->reduce = splitk_reduce_for(o.M, o.N, call->splits, o.out_t, d);
  } else if (o.t == f32 || o.t == f64) {
    // Not a fallback: the kernel of these dtypes (no warning).
    char k[160];
    std::snprintf(k, sizeof k, "matmul_simt_tiled|%s|%lldx%lldx%lld|%s", o.t.name().c_str(),
                  static_cast<long long>(o.M), static_cast<long long>(o.N),
                  static_cast<long long>(o.K), d.str().c_str());
    call->kernel = detail::special_cached(
        k, [&] { return compile(simt_tiled_kernel(o.M, o.N, o.K, o.t), {.device = d}); });
  } else {
    if (d.is_cuda())
      warn("tx.ops.matmul at " + std::string(loc.file_name()) + ":" + std::to_string(loc.line()) +
           ": no tensor-core kernel (" + no + "); using the SIMT kernel");
    char k[160];
    std::snprintf(k, sizeof k, "matmul_simt|%s|%lldx%lldx%lld|%s", o.t.name().c_str(),
                  static_cast<long long>(o.M), static_cast<long long>(o.N),
                  static_cast<long long>(o.K), d.str().c_str());
    call->kernel = detail::special_cached(
        k, [&] { return compile(simt_kernel(o.M, o.N, o.K, o.t, o.out_t), {.device = d}); });
  }
  std::lock_guard<std::mutex> lock(mu);
  if (calls->size() >= 4096) calls->clear();  // forgotten at once, rebuilt on use
  return calls->emplace(key, std::move(call)).first->second;
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b, MatmulOptions opt, SourceLoc loc) {
  Operands o = check(a, b, loc);
  const Device d = a.device();
  Tensor c = Tensor::empty({o.M, o.N}, o.out_t, d);
  if (o.M == 0 || o.N == 0) return c;
  if (o.K == 0) {  // an empty sum
    c.fill_bits(0);
    return c;
  }
  std::shared_ptr<const MatmulCall> call = resolve_call(o, d, opt.tune, loc);
  // B as the kernel reads it: (N, K) -- B^T's storage as given, or a
  // transposed copy (fp8 from a row-major B) -- or (K, N), copied to row-major
  // from a transposed B for the kernels that read rows of N.
  const Tensor bk = call->b_nk ? (o.b_nk ? b.transpose(0, 1) : b.transpose(0, 1).contiguous())
                               : (o.b_nk ? b.contiguous() : b);
  if (call->splits > 1) {
    Tensor w = Tensor::empty({call->splits * o.M, o.N}, f32, d);
    call->kernel(a, bk, w);
    call->reduce(w.reshape({call->splits * o.M * o.N}), c.reshape({o.M * o.N}));
    return c;
  }
  call->kernel(a, bk, c);
  return c;
}

}  // namespace tx::ops
