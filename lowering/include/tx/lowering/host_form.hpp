// The host form: lowered (GPU-form) IR -> IR in which one CTA is a plain
// sequential program. lower() builds it for Target::host() after the other
// passes (TX_DEBUG_IR=1 prints the IR after each of these too); the host
// JIT's code generator (codegen/llvm) takes it from there. The passes need
// no LLVM: they are ordinary tx passes, one per file in lowering/src/passes/.
//
//   instrument_checks       (checked mode) the checks, as check_* intrinsics,
//                           next to the accesses, barriers and divisions
//                           they guard
//   isolate_shuffles        each shfl_xor becomes a lane-array store, a warp
//                           barrier, and a load from the partner's slot
//   sink_local_allocations  register buffers move down to the statements
//                           that use them, so few of them cross a barrier
//   split_regions           barriers split the CTA into regions, each a loop
//                           over the CTA's threads (POCL's work-item loops);
//                           values live across a barrier go to per-thread
//                           arrays
//
// The host form has no thread_idx, shfl_xor or Barrier left: the CTA's
// threads are the iterations of explicit `For` loops over one thread var.
// Buffers of scope shared in it are per-CTA scratch storage (the kernel's
// shared memory, lane arrays, per-thread arrays); local buffers stay private
// to one iteration of a thread loop.
//
// Kernels that synchronize through mbarriers (pipelines, warp
// specialization) have no region split (a producer and its consumers wait on
// each other inside their own loops): their host form is the lowered body
// itself, which the host runs one fiber per thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "tx/ir.hpp"
#include "tx/ir_functor.hpp"
#include "tx/lowering/analysis.hpp"
#include "tx/lowering/lower.hpp"

namespace tx::lowering {

// ------------------------------------------------------- the checked mode's plan

// A buffer the checks know by its slot number.
struct CheckBuffer {
  const void* data = nullptr;  // the buffer's data var (its identity in the IR)
  int param = -1;              // the kernel argument it is, for global buffers
  std::string name;
  MemScope scope = MemScope::global;
  std::int64_t elems = 0;           // valid indices: [0, elems)
  int elem_bytes = 1;               // bytes per element (the checker maps elements to addresses)
  std::vector<std::int64_t> shape;  // the user's shape, when row-major (coordinates)
  std::int64_t stages = 0;          // else a shared buffer's leading extent (its stages)
  bool races = false;               // shared and global buffers are tracked
  bool dist = false;      // symmetric memory (or a peer's view of it): checked across ranks
  std::string symmetric;  // then: the symmetric parameter (a view's `of`)
};

// Where a check sits: the op the user wrote and its line.
struct CheckSite {
  std::string op;    // "T.store", "Tx.warp.copy", "T.floordiv"
  std::string what;  // the buffer, or the expression of a division
  SourceLoc loc;
};

// What the check_* intrinsics of a checked host form refer to (their slot and
// site numbers); the runtime's checker reports findings from it.
struct CheckPlan {
  std::vector<CheckBuffer> buffers;
  std::vector<CheckSite> sites;
};

// ------------------------------------------------------------ the host form

struct HostForm {
  // The kernel waits on mbarriers: `body` is the lowered body, run as one
  // fiber per thread (no region split).
  bool fibers = false;
  Stmt body;
  Var thread{"thread", i32};                // the var of the thread loops (region schedule)
  bool checked = false;                     // built with instrument_checks
  std::shared_ptr<const CheckPlan> checks;  // set when checked
  // The host form as a function (the kernel's parameters and dims, `body`):
  // what the host JIT's cache key hashes.
  PrimFunc func;
};

// The passes above, in order, on a lowered kernel. `step` (may be empty)
// is called after each pass with its name and result, for TX_DEBUG_IR.
// Errors: a barrier or shuffle the host cannot schedule (under a condition
// or in a loop that varies between threads that must meet at it), and a
// checked kernel with mbarrier pipelines.
HostForm lower_host_form(const LoweredKernel& k, bool checked,
                         const std::function<void(const char*, const Stmt&)>& step = {});

// ------------------------------------------------------------------- passes

// State the host passes share: the launch, the barriers they made (by node,
// with the op they stand for, "T.cuda.shfl_xor", so that a misplaced one is
// reported as that op), and the thread var of the host form.
struct HostContext {
  LaunchConfig launch;
  std::unordered_map<const StmtNode*, std::string> barrier_ops;
  Var thread{"thread", i32};
};

// Inserts the checked mode's checks into a lowered kernel body; fills `plan`.
Stmt instrument_checks(const LoweredKernel& k, CheckPlan* plan);
Stmt isolate_shuffles(const Stmt& s, HostContext& cx);
Stmt sink_local_allocations(const Stmt& s);
Stmt split_regions(const Stmt& s, HostContext& cx);

// ------------------------------------------------------------ analysis

// How a value depends on the thread index: it is the same for all threads of
// every aligned group of `group` threads (kUniform: it does not depend on the
// thread at all); `quotient` > 0 says it equals threadIdx.x / quotient exactly,
// which is what makes warp_id = threadIdx.x / 32 warp-uniform.
struct ThreadDep {
  static constexpr std::int64_t kUniform = std::int64_t{1} << 62;
  std::int64_t group = kUniform;
  std::int64_t quotient = 0;
};

class ThreadDependence {
 public:
  explicit ThreadDependence(int block) : block_(block) {}
  void bind(const Var& v, ThreadDep d) { vars_[v.get()] = d; }
  // Vars never bound are taken to vary per thread.
  ThreadDep of(const Expr& e) const;
  Uniformity level(const ThreadDep& d) const;
  Uniformity level(const Expr& e) const { return level(of(e)); }

 private:
  int block_;
  std::unordered_map<const VarNode*, ThreadDep> vars_;
};

bool contains_barrier(const Stmt& s);
// The first barrier in s (pre-order), or null.
const BarrierNode* first_barrier(const Stmt& s);
// What a barrier is reported as: "T.cuda.cta_sync", or the op it stands for.
std::string barrier_op(const BarrierNode* b, const HostContext& cx);
// The first mbarrier intrinsic of a lowered body, or null: such a kernel
// runs as fibers on the host.
const CallNode* first_mbarrier_call(const Stmt& body);

}  // namespace tx::lowering
