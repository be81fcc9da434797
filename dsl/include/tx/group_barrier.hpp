// T::dist::barrier: the ranks of a group meet inside a kernel (several GPUs,
// or host ranks). Built from the flags alone (T::peer, T::dist::signal /
// wait_until), so its ordering is theirs: the memory model of
// docs/dist_kernels.md, and the checked mode across ranks sees through it.
//
//   auto Flags = T::match_symmetric(flags_ptr, {ranks}, u32);   // Group::symmetric_flags
//   ...                                                            // write this rank's copies
//   T::dist::barrier(Flags, {.rank = rank, .ranks = ranks, .value = epoch, .thread = tid});
//   ...                                                            // read the peers' copies
//
// Every thread of the CTA calls it (it holds two cta_syncs). Thread 0 stores
// `value` into flag `rank` of every rank's copy (its own included), then
// waits until each of its own flags reaches `value`: after the second
// cta_sync the CTA sees everything every rank's CTA did before its call.
// `value` must grow with each use (an epoch: 1, 2, ...): a flag already at
// `value` orders nothing. Several CTAs that meet their peers separately use
// separate slots (flags [slot * ranks, (slot + 1) * ranks)); CTA b of every
// rank must reach the barrier for any to pass it, so the CTAs must be
// resident at once (a grid no larger than the GPU holds).
#pragma once

#include "tx/builder.hpp"

namespace tx::T::dist {

struct GroupBarrier {
  Value rank;      // this rank
  int ranks = 0;   // the group's size
  Value value;     // this use's value: grows with each use, never reused
  Value thread;    // the calling thread's index in the CTA (thread 0 signals)
  Value slot = 0;  // which group of `ranks` flags
};

inline void barrier(const TileBuffer& flags, const GroupBarrier& b, Loc loc = Loc::current()) {
  const Expr slot = b.slot, rank = b.rank, value = b.value, thread = b.thread;
  T::cuda::cta_sync(loc);  // the CTA's writes reach thread 0, which publishes them
  T::if_(
      thread == 0,
      [&] {
        for (Var j : T::serial(b.ranks, "barrier_rank", loc)) {
          TileBuffer theirs = T::peer(flags, j, "barrier_flags", loc);
          T::dist::signal(theirs(slot * b.ranks + rank), value, loc);
        }
        for (Var j : T::serial(b.ranks, "barrier_rank", loc))
          T::dist::wait_until(flags(slot * b.ranks + j), value, loc);
      },
      loc);
  T::cuda::cta_sync(loc);  // what thread 0 acquired, the whole CTA sees
}

}  // namespace tx::T::dist
