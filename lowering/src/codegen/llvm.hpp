// The host code generator: host form -> LLVM IR, the sibling of the CUDA one
// (codegen/cuda.cpp, which is its reference for every node's semantics).
// Compiled apart from the rest of lowering (the tx_codegen_llvm object
// library, only where LLVM is found) because it is the one piece of the
// lowering layer that needs LLVM's headers; it sees lowering's headers and
// LLVM's, nothing of the runtime. The runtime's host JIT (runtime/src/host/)
// optimizes, JIT-compiles and runs what it emits.
//
// One function per kernel:
//
//   void <name>(void* const* args, int64 first_block, int64 end_block, void* scratch,
//               void* checker, const int64* grid)
//
// runs the CTAs first_block .. end_block-1 (linear ids, x fastest) one after
// the other. `scratch` is per-CTA storage of scratch_bytes (the kernel's
// shared memory at its lowering offsets, then the host form's lane and
// per-thread arrays); a caller running CTAs in parallel gives each worker its
// own; `grid` is this launch's grid (x, y, z). `thread` is the host form's thread var (its loops
// get vectorization hints). With `checked`, the check_* intrinsics of instrument_checks become
// calls of the tx_host_check_* functions on `checker` (the runtime's checked mode);
// without, `checker` is unused.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tx/lowering/lower.hpp"

namespace llvm {
class LLVMContext;
class Module;
}  // namespace llvm

namespace tx::lowering {

struct EmittedModule {
  std::unique_ptr<llvm::Module> module;
  std::int64_t scratch_bytes = 0;
};

using HostEntry = void (*)(void* const* args, std::int64_t first_block, std::int64_t end_block,
                           void* scratch, void* checker, const std::int64_t* grid);

EmittedModule emit_llvm(llvm::LLVMContext& ctx, const LoweredKernel& k, const Stmt& host_body,
                        const Var& thread, const std::string& function_name, bool checked = false);

// A place where a fiber can wait (a barrier, an mbarrier, a shuffle), for the
// fiber scheduler's deadlock report: the calls of tx_fiber_* pass its index.
struct WaitSite {
  std::string op;       // "T.ptx.mbarrier_wait", "T.cuda.cta_sync", ...
  std::string operand;  // the barrier as written ("pipe_full[T.floormod(it, 2)]"), or empty
  SourceLoc loc;
};

// The JIT-compiled thread function: thread `thread` of CTA `cta` (linear id).
using FiberEntry = void (*)(void* const* args, std::int64_t cta, void* scratch, void* fibers,
                            const std::int64_t* grid, std::int32_t thread);

// Fiber mode (runtime/src/host/fibers.hpp): the function runs one thread of one CTA,
//
//   void <name>(void* const* args, int64 cta, void* scratch, void* fibers,
//               const int64* grid, int32 thread)
//
// from the lowered body itself (no region split); barriers, mbarriers and
// shuffles call tx_fiber_*, each call site appended to *sites. TMA copies
// and warpgroup MMA (the checked mode's model of sm_90) call
// tx_fiber_tma_load and tx_fiber_wgmma, which run them. With `checks` (the
// checked mode's plan), the check_* intrinsics call tx_host_check_* on the
// scheduler's checker, and the proxy fences, wgmma ordering and setmaxnreg
// call tx_fiber_async, which the checker follows.
struct CheckPlan;
EmittedModule emit_llvm_fibers(llvm::LLVMContext& ctx, const LoweredKernel& k, const Stmt& body,
                               const std::string& function_name, std::vector<WaitSite>* sites,
                               const CheckPlan* checks = nullptr);

// tx_fiber_async's kinds.
enum class FiberAsync : std::int32_t {
  fence_proxy_async = 0,
  wgmma_fence = 1,
  wgmma_commit = 2,
  wgmma_wait = 3,  // a: the groups left pending
  setmaxnreg = 4,  // a: the count, b: 1 to increase
};

// tx_fiber_wgmma's description of one instruction, an array of int64:
// [0] N, [1] K, [2] A's type, [3] B's type (FiberType), [4] A in registers,
// [5..8] A's descriptor (LBO, SBO, swizzle bytes, MN-major), [9..12] B's,
// [13] the D registers' count R, [14 .. 14+R) their element offsets in D,
// then A's four word offsets (A in registers).
enum class FiberType : std::int64_t { f16 = 0, bf16 = 1, e4m3 = 2, e5m2 = 3 };

}  // namespace tx::lowering
