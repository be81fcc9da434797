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
// Kernels that run as fibers (mbarrier pipelines, warp specialization, TMA
// and wgmma: fibers.hpp) are ordered by vector clocks instead of epochs. An
// actor is a thread of the CTA or an asynchronous agent: the TMA unit that
// completes copies on one mbarrier, a warpgroup's wgmma unit. Each actor
// has a clock; a barrier joins its threads' clocks, an mbarrier phase
// carries the clocks of its arrivals and of the TMA copies it counted to
// its waiters, a wgmma_wait gives its thread the wgmma unit's clock up to
// the groups it retires. An access is ordered after an earlier one when the
// accessing actor's clock has caught up with the earlier access's. Accesses
// of the asynchronous proxy (TMA writes, wgmma reads) after a thread's
// write also need that thread's fence.proxy.async between the write and
// the release that orders them. The model's own findings (an accumulator
// read before its wgmma retired, an mbarrier left mid-phase, setmaxnreg
// misuse) join the report.
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

#include "../dist_check.hpp"
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
  // After a launch that failed with `stop` (a deadlock, a misused
  // barrier): `stop` alone when nothing else was found, else the report
  // with `stop` among its findings (what went wrong before it often is the cause).
  [[noreturn]] void report(const std::string& kernel, SourceLoc launch_loc, const Error& stop);

  // ---- the fiber schedule's ordering (vector clocks)
  // An actor's vector clock over this CTA's actors, and what it knows of
  // other ranks' (dist_check.hpp): both travel through barriers and phases.
  struct Clock {
    std::vector<std::uint32_t> v;
    Knowledge remote;
    Clock() = default;
    Clock(std::size_t n, std::uint32_t x) : v(n, x) {}
    std::size_t size() const { return v.size(); }
    void resize(std::size_t n, std::uint32_t x) { v.resize(n, x); }
    std::uint32_t& operator[](std::size_t i) { return v[i]; }
    std::uint32_t operator[](std::size_t i) const { return v[i]; }
    void clear() {
      v.clear();
      remote = {};
    }
  };
  struct FiberSite {
    std::string op, operand;
    SourceLoc loc;
  };
  // Turns the vector clocks on: `sites` are the scheduler's (the TMA copies'
  // and wgmma's sites, numbered as the fiber calls pass them).
  void use_clocks(std::vector<FiberSite> sites);
  void begin_cta(std::int64_t cta);  // every clock starts over
  // A new asynchronous agent of this CTA: its actor id (after the threads).
  int agent(const std::string& what);
  void release(int actor, Clock& into);  // into = max(into, actor's clock); the actor ticks
  void acquire(int actor, const Clock& from);
  void join(int actor, int from);  // actor's clock = max(its clock, from's)
  void know(int actor, int of, std::uint32_t clock);
  void tick(int actor);
  std::uint32_t clock_of(int actor) const;
  std::uint32_t seen(int actor, int of) const;  // how far `actor` knows `of`'s clock
  // An element access of an actor at a fiber site: `async`, through the
  // asynchronous proxy; `tag` a detail for the report (a TMA copy's phase).
  // False when out of bounds (then reported, and the access skipped).
  bool access(int actor, std::int32_t slot, std::int64_t index, bool write, std::int32_t fiber_site,
              bool async, std::uint32_t tag = 0, int issuer = -1);
  void fence_proxy(int thread);
  // wgmma: D's registers [lo, hi) of `thread` are written by the instruction
  // (unit `agent`, its clock) until a wait retires the group it joins.
  void wgmma_issue(int thread, int agent, std::uint32_t clock, std::int32_t d_slot, std::int64_t lo,
                   std::int64_t hi, std::int32_t fiber_site);
  void wgmma_commit(int thread);
  void wgmma_wait(int thread, int pending);
  // ---- across ranks (host ranks of Group::run_local; dist_check.hpp)
  // An access of `thread` to [addr, addr + count elements) of symmetric
  // memory at plan site `site`.
  void dist_access(int thread, const void* addr, std::int64_t count, int elem_bytes, bool write,
                   std::int32_t site);
  // T::dist::signal by `thread` (performs the store or add), and the acquire
  // of a T::dist::wait_until that saw `value`.
  void dist_signal(int thread, std::uint32_t* flag, std::uint32_t value, bool add);
  void dist_acquire(int thread, const std::uint32_t* flag, std::uint32_t value);

  // A misuse the model found; reported with the races after the launch.
  void problem(const std::string& operand, const std::string& text, std::int32_t fiber_site);
  bool clocks() const;
  // "pipe_full[1]": a shared buffer's element, for reports.
  std::string element_name(std::int32_t slot, std::int64_t index) const;
  std::string site_text(std::int32_t fiber_site) const;

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
void tx_host_check_dist(void* checker, void* addr, std::int64_t count, std::int32_t elem_bytes,
                        std::int32_t flags, std::int32_t site, std::int32_t thread,
                        std::int32_t ok);
void tx_host_check_signal(void* checker, void* flag, std::uint32_t value, std::int32_t add,
                          std::int32_t thread);
void tx_host_check_index(void* checker, std::int64_t index, std::int64_t extent, std::int32_t dim,
                         std::int32_t site, std::int32_t thread);
}
