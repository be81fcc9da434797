// The checked host mode (TX_CHECK=1, or CompileOptions::checked): a kernel
// run by the host fallback with every memory access bounds-checked, integer
// division by zero reported, and a race detector.
//
// The host fallback already runs a CTA's threads one after the other between
// barriers; that schedule is what makes the race detector cheap. Each
// element of a kernel's global and shared buffers has a shadow: the last
// write and the last two reads (thread, CTA, the barrier epochs the thread
// had passed, the access site, the buffer). Global memory is shadowed by
// address, not by buffer: two arguments bound to one tensor, to overlapping
// views of one storage or to overlapping from_blob memory share their
// shadow, so a thread writing through one and another reading through the
// other is found like any race (the report names both arguments). Shared
// and register buffers are the CTA's own and keep a shadow each. Two
// accesses by different threads of one CTA, at least one a write, conflict
// when no barrier that both threads take part in lies between them: the
// CTA-wide epoch is the same, and so is the warpgroup's (warp's) epoch when
// both threads are in one warpgroup (warp). Across CTAs there is no barrier
// at all, so an element that one CTA writes and another reads or writes is
// a race too. CTAs run one after the other in this mode.
//
// The checks are inserted into the lowered IR by lowering's instrument_checks
// pass (as the check_* intrinsics), so they survive the host passes where the
// accesses they guard go; the LLVM code generator (lowering/src/codegen/llvm.cpp)
// turns them into calls of the tx_host_check_* functions below, with the
// thread of the enclosing thread loop.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tx/ir.hpp"
#include "tx/lowering/host_form.hpp"

namespace tx::runtime::host {

// The plan (which buffer each check's slot is, which op each site) comes
// with the host form (lowering/host_form.hpp).
using lowering::CheckBuffer;
using lowering::CheckPlan;
using lowering::CheckSite;

// The state of one checked launch (what tx_host_check_* update).
class Checker {
 public:
  // `param_elems`: the element count of each kernel argument (buffers of
  // extents known at launch are bounded by their tensor's); `args`: the
  // arguments' data pointers, which place the global buffers in memory
  // (either may be null: each buffer then has a shadow of its own).
  Checker(const CheckPlan& plan, const lowering::LaunchConfig& launch,
          const std::int64_t* param_elems, void* const* args = nullptr);
  ~Checker();
  Checker(const Checker&) = delete;
  Checker& operator=(const Checker&) = delete;

  // After the launch: a tx error listing what was found, if anything.
  void report(const std::string& kernel, SourceLoc launch_loc) const;

  struct State;
  State& state() { return *state_; }

 private:
  std::unique_ptr<State> state_;
};

}  // namespace tx::runtime::host

// Called by JIT-compiled checked kernels (resolved from the process).
extern "C" {
bool tx_host_check_access(void* checker, std::int32_t slot, std::int64_t index, std::int32_t count,
                          std::int32_t flags, std::int32_t site, std::int32_t thread);
void tx_host_check_barrier(void* checker, std::int32_t scope, std::int32_t thread);
void tx_host_check_cta(void* checker, std::int64_t cta);
void tx_host_check_divzero(void* checker, std::int32_t site, std::int32_t thread);
void tx_host_check_index(void* checker, std::int64_t index, std::int64_t extent, std::int32_t dim,
                         std::int32_t site, std::int32_t thread);
}
