// The host lowering: lowered (GPU-form) IR -> host-form IR, in which one CTA
// is a plain sequential program. It runs after lowering::lower and before any
// LLVM IR exists, so each step is an ordinary tx pass that prints with the
// tx printer (TX_DEBUG_IR=1 shows the IR after each of them).
//
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
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>

#include "tx/ir.hpp"
#include "tx/ir_functor.hpp"
#include "tx/lowering/analysis.hpp"
#include "tx/lowering/lower.hpp"

namespace tx::runtime::host {

struct HostContext {
  lowering::LaunchConfig launch;
  // Barriers made by the passes, by node, with the op they stand for
  // ("T.cuda.shfl_xor"), so that a misplaced one is reported as that op.
  std::unordered_map<const StmtNode*, std::string> barrier_ops;
  // The var that indexes the threads of a CTA in the host form.
  Var thread{"thread", i32};
};

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
  lowering::Uniformity level(const ThreadDep& d) const;
  lowering::Uniformity level(const Expr& e) const { return level(of(e)); }

 private:
  int block_;
  std::unordered_map<const VarNode*, ThreadDep> vars_;
};

bool contains_barrier(const Stmt& s);
// The first barrier in s (pre-order), or null.
const BarrierNode* first_barrier(const Stmt& s);
// What a barrier is reported as: "T.cuda.cta_sync", or the op it stands for.
std::string barrier_op(const BarrierNode* b, const HostContext& cx);

}  // namespace tx::runtime::host
