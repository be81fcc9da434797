// The consumer warpgroup's K loop of the Hopper GEMM kernels (matmul.cpp's
// hopper_kernel, grouped_matmul.cpp's): for one output tile, wait for each
// stage, multiply this warpgroup's 64 rows of A's stage tile by B's, and
// hand the stage back. Private to ops/src.
#pragma once

#include <functional>

#include "tx/builder.hpp"

namespace tx::ops::detail {

struct HopperTileLoop {
  const T::Pipeline& pipe;
  const TileBuffer& As;                              // (stages, bm, bk)
  std::function<BufferRegion(const Expr&)> b_stage;  // B's tile of a stage
  std::int64_t bk, k_steps;
  bool b_nk;  // B's tiles are (bn, bk): read with transpose_b
  // fp8 only (promotion): runs before step kt's MMA is issued (loads whose
  // latency the MMA hides), and how step kt's partial tile `acc` joins the
  // total (default: total += acc; block scales: total += acc * factor).
  std::function<void(const Var& kt)> before_mma = {};
  std::function<void(const Var& kt)> fold = {};
};

// The producer's loads of tile round `r`: for each K step, wait until the
// stage is free, `load` its tiles (TMA copies completing on `full`), and
// arrive on the stage's full barrier (one thread).
inline void hopper_tile_producer(
    const T::Pipeline& pipe, const Var& r, std::int64_t k_steps, const Var& tid,
    const std::function<void(const Var& kt, const Expr& stage, const BufferElem& full)>& load) {
  for (Var kt : T::serial(k_steps, "kt")) {
    auto it = T::let(r * k_steps + kt), s = T::let(pipe.stage(it));
    pipe.producer_acquire(it);
    load(kt, s, pipe.full(it));
    T::if_(tid == 0, [&] { pipe.producer_commit(it); });
  }
}

// Runs tile round `r` (positions r * k_steps + kt) into `acc`, starting from
// zero. 16-bit: the MMAs chain with one in flight, each releasing the stage
// before it; the last is waited for. fp8 (`total` defined): each K step runs
// into a fresh `acc` (pending 0: complete on return, its stage released at
// once) that is added to the f32 `total` -- promotion, matmul.cpp says why.
inline void hopper_tile_mainloop(const HopperTileLoop& l, const Var& r, const Expr& row0,
                                 const Var& tid, const TileBuffer& acc, const TileBuffer& total) {
  const bool promote = total.defined();
  const std::int64_t KT = l.k_steps;
  Tx::warpgroup::fill(promote ? total : acc, 0.0f);
  for (Var kt : T::serial(KT, "kt")) {
    auto it = T::let(r * KT + kt), s = T::let(l.pipe.stage(it));
    l.pipe.consumer_wait(it);
    auto a_tile = l.As[region(span(s, 1), span(row0, 64), {0, l.bk})];
    if (promote) {
      if (l.before_mma) l.before_mma(kt);
      Tx::warpgroup::gemm(acc, a_tile, l.b_stage(s),
                          {.accum = false, .pending = 0, .transpose_b = l.b_nk});
      T::if_(tid == 0, [&] { l.pipe.consumer_release(it); });
      if (l.fold)
        l.fold(kt);
      else
        Tx::warpgroup::add(total, total, acc);
    } else {
      Tx::warpgroup::gemm(acc, a_tile, l.b_stage(s),
                          {.accum = true, .pending = 1, .transpose_b = l.b_nk});
      T::if_(tid == 0, [&] { T::if_(kt > 0, [&] { l.pipe.consumer_release(it - 1); }); });
    }
  }
  if (!promote) {
    T::cuda::wgmma_wait(0, acc);
    T::if_(tid == 0, [&] { l.pipe.consumer_release(r * KT + KT - 1); });
  }
}

}  // namespace tx::ops::detail
