// The call counters of the collectives written in tx (dist.cpp,
// dist_collectives.cpp), kept on the device so that a CUDA graph replay of a
// captured call advances them as a direct launch does.
//
// A collective's flags count steps (a call's step k signals base + k + 1,
// base being the steps of every earlier call) and its staging copies are
// double-buffered by the parity of the calls made (the epoch). Passed from
// the host as launch arguments, both would be frozen into a captured graph:
// every replay would signal values the flags already hold and read copies
// the peers are still writing. Here each rank keeps them in a small buffer
// of its own, slot o < max_ctas holding (epoch, base) for CTA o. CTA b reads
// slot b when it starts and, when it is done, writes the advanced pair into
// slots b, b + ctas, b + 2 ctas, ... -- its own and those of the CTAs a grid
// of `ctas` (fewer than max_ctas for small messages) does not have -- so
// every slot moves once per call whatever the grid, and no slot is read and
// written by two CTAs of one call. Calls follow each other in stream order,
// so slot b always holds the count of every earlier call, on every rank.
#pragma once

#include "tx/builder.hpp"

namespace tx::ops::dist_detail {

struct CallCounters {
  TileBuffer buffer;  // (2 max_ctas) u32: epochs, then bases
  int max_ctas = 0;
  Var epoch, base;  // this CTA's: calls made, steps made
};

// Binds the counters parameter and reads CTA b's pair (after device_entry).
inline CallCounters read_call_counters(const TileBuffer& buffer, int max_ctas, const Var& b) {
  return {.buffer = buffer,
          .max_ctas = max_ctas,
          .epoch = T::let(buffer(b), "epoch"),
          .base = T::let(buffer(max_ctas + b), "base")};
}

// The end of a call of `steps` steps by CTA b of a grid of `ctas`: after a
// CTA barrier (every thread has read the pair), thread 0 advances the slots
// CTA b owns in this grid.
inline void advance_call_counters(const CallCounters& c, const Var& b, const Var& tid, int ctas,
                                  const Expr& steps) {
  T::cuda::cta_sync();
  T::if_(tid == 0, [&] {
    for (Var j : T::serial(c.max_ctas / ctas, "slot")) {
      auto o = T::let(b + j * ctas, "o");
      c.buffer(o) = c.epoch + 1u;
      c.buffer(c.max_ctas + o) = c.base + cast(steps, u32);
    }
  });
}

}  // namespace tx::ops::dist_detail
