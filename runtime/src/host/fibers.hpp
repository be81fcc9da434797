// The host fallback's second schedule: a CTA's threads as fibers.
//
// The region schedule (split_regions) runs a CTA's threads one after another
// between CTA barriers. Kernels that synchronize through mbarriers -- a
// producer warpgroup filling a ring of stages while consumer warpgroups
// drain it, each side waiting on the other inside its own loop -- have no
// such split: a consumer's wait at position 5 needs the producer to have
// run to position 5, which needs the consumers to have released position 1.
// Those kernels run here: every thread of the CTA is a fiber (its own stack,
// its registers in its own frame), and the fibers are scheduled
// cooperatively on one OS thread. A fiber runs until it must wait (a barrier
// not every thread of its group has reached, an mbarrier phase that has not
// completed, a shuffle partner that has not written its lane); then the next
// fiber runs. A round over every waiting fiber in which nothing changed is a
// deadlock: on the GPU the kernel would hang; here it is a tx error naming
// the waits.
//
// Synchronization runs through the tx_fiber_* functions the JIT-compiled
// thread function calls (codegen/llvm.cpp, fiber mode):
//   tx_fiber_sync            bar.sync of a group (the CTA, a warpgroup, a
//                            warp); threads that returned count as arrived,
//                            as exited threads do on the GPU
//   tx_fiber_mbarrier_*      an mbarrier in the CTA's shared scratch: init,
//                            arrive, expect_tx, wait on a phase parity
//   tx_fiber_named_barrier   bar.sync / bar.arrive on a named barrier: a
//                            phase completes when its thread count arrived
//   tx_fiber_shfl_xor        a warp shuffle: write the lane, sync the warp,
//                            read the partner, sync again
// CTAs still run in parallel over worker threads, each with its own fibers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "checked_mode.hpp"
#include "llvm.hpp"  // lowering/src/codegen: WaitSite, FiberEntry
#include "tx/ir.hpp"

namespace tx::runtime::host {

using lowering::FiberEntry;
using lowering::WaitSite;

struct FiberPlan {
  std::string kernel;
  int block = 1;                   // threads per CTA
  std::int64_t stack_bytes = 0;    // per fiber
  std::int64_t scratch_bytes = 0;  // per CTA (its shared memory): zeroed before each CTA
  std::vector<WaitSite> sites;
};

// Runs CTAs [first, end) one after another, each as plan.block fibers.
// A deadlock or a misused mbarrier is a tx error (fail()). With `checker`
// (the checked mode), every synchronization also orders the checker's
// vector clocks, and the model's findings go to it.
void run_fiber_ctas(FiberEntry fn, const FiberPlan& plan, void* const* args, std::int64_t first,
                    std::int64_t end, void* scratch, const std::int64_t* grid, SourceLoc launch,
                    Checker* checker = nullptr);

}  // namespace tx::runtime::host

// Called by JIT-compiled fiber kernels (bound by address in host_jit.cpp).
extern "C" {
void* tx_fiber_checker(void* fibers);
void tx_fiber_sync(void* fibers, std::int32_t thread, std::int32_t group, std::int32_t site);
void tx_fiber_async(void* fibers, std::int32_t thread, std::int32_t kind, std::int32_t a,
                    std::int32_t b, std::int32_t site);
void tx_fiber_tma_load(void* fibers, std::int32_t thread, void* smem, std::int32_t smem_slot,
                       std::int64_t smem_offset, void* bar, std::int32_t bar_slot,
                       std::int64_t bar_index, const void* global, std::int32_t global_slot,
                       std::int32_t rank, const std::int64_t* dims, const std::int64_t* box,
                       const std::int64_t* coords, std::int32_t elem_bytes, std::int32_t swizzle,
                       std::int32_t site);
void tx_fiber_wgmma(void* fibers, std::int32_t thread, const std::int64_t* info, void* d,
                    std::int32_t d_slot, void* a, std::int32_t a_slot, std::int64_t a_offset,
                    void* b, std::int32_t b_slot, std::int64_t b_offset, std::int32_t scale_d,
                    std::int32_t site);
void tx_fiber_mbarrier_init(void* fibers, void* bar, std::int32_t count, std::int32_t slot,
                            std::int64_t index, std::int32_t site);
void tx_fiber_mbarrier_arrive(void* fibers, void* bar, std::int32_t site);
void tx_fiber_mbarrier_expect_tx(void* fibers, void* bar, std::int32_t bytes, std::int32_t site);
void tx_fiber_mbarrier_wait(void* fibers, void* bar, std::int32_t parity, std::int32_t site);
void tx_fiber_wait_flag(void* fibers, void* flag, std::int32_t value, std::int32_t site);
void tx_fiber_named_barrier(void* fibers, std::int32_t id, std::int32_t threads, std::int32_t wait,
                            std::int32_t site);
std::int64_t tx_fiber_shfl_xor(void* fibers, std::int32_t thread, std::int64_t bits,
                               std::int32_t mask, std::int32_t site);
}
