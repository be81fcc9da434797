// The scalar element loop of copy/fallback and atomic/fallback
// (scalar_transfer.cpp): element i of the region goes to thread
// i % threads, guarded by i < N; with a thread-private local side every
// thread walks all N elements -- as the destination each thread loads its
// own copy, as the source only the scope's first thread writes (the copies
// are equal). partial= skips (or zero-fills) what lies past a tensor's end.
#pragma once

#include "common.hpp"

namespace tx::lowering::variants {

struct ScalarTransfer {
  const char* origin = "copy/fallback";  // the variant named in the generated code
  bool atomic_add = false;               // dst += src by an atomic per element, not a copy
  bool warn_once = false;  // warn once per call site that no vectorized variant applied
};

// No local operand distributed over threads (copy/reg's and atomic/reg's).
Check no_distributed_registers(const DispatchContext& ctx);

Plan plan_scalar_transfer(const DispatchContext& ctx, const ScalarTransfer& how);

}  // namespace tx::lowering::variants
