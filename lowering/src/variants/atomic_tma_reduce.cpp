// atomic/tma_reduce [30]: dst += src for a shared float32 tile added into a
// global float32 region by the Tensor Memory Accelerator
// (cp.reduce.async.bulk.tensor ... .add.tile.bulk_group): one instruction
// per box from one thread, the additions done next to memory, completing in
// the background while the threads go on.
//
// Accepts: cuda on sm_90+; any scope (the scope's thread 0 issues the
// boxes); no `barrier=` (the reduction completes in the issuing thread's
// bulk group); a float32 destination region of a row-major global buffer
// parameter of at most 5 dimensions and a float32 shared source of the same
// extents whose layout the TMA reads -- copy_async/tma_store's box model
// (tma_boxes.hpp): dense 128-byte aligned boxes, no swizzle or one of the
// TMA's modes. Boxes are clipped at the tensor's bounds (partial tiles).
//
// Emits: fence.proxy.async in every thread of the scope (their writes to the
// tile become visible to the TMA), the scope's barrier, then in thread 0 one
// reduction per box and one commit_group. Before the tile is written again
// the kernel calls T::cuda::tma_store_wait(n) (and the scope's barrier); the
// kernel's end waits for every bulk group (codegen).
// Why: a sum many CTAs add into (the attention backward's dQ: every key
// block adds to every query row's gradient) costs one bulk operation per
// tile instead of one atomic per element per thread (FlashAttention-3's dQ
// accumulation).
#include "tma_boxes.hpp"

namespace tx::lowering::variants {

namespace {

Check operands(const DispatchContext& ctx) {
  return tma_from_shared_operands(ctx, "a TMA reduction adds");
}

Plan plan(const DispatchContext& ctx) {
  return plan_tma_from_shared(ctx, /*reduce_add=*/true, "atomic/tma_reduce");
}

}  // namespace
}  // namespace tx::lowering::variants

namespace tx::lowering {

void register_atomic_tma_reduce(Registry& r) {
  using namespace variants;
  Variant v;
  v.targets = {TargetKind::cuda};
  v.off_target = "the host runs no PTX (atomic/fallback adds element by element)";
  v.family = "atomic";
  v.name = "tma_reduce";
  v.priority = 30;
  v.when = common_predicates_masking();
  v.when.push_back({"copy_operands_match", copy_operands_match});
  v.when.push_back({"atomic_destination", atomic_destination});
  v.when.push_back({"tma_reduce_operands", operands});
  v.plan = plan;
  r.add("atomic", v);
}

}  // namespace tx::lowering
