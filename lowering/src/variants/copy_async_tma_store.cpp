// copy_async/tma_store [30]: a shared -> global tile copy through the Tensor
// Memory Accelerator (cp.async.bulk.tensor ... global.shared::cta.bulk_group),
// completing in the background while the threads go on.
//
// Accepts: cuda on sm_90+; any scope (the scope's thread 0 issues the
// copy); no `barrier=` (a store completes in the issuing thread's bulk
// group, not on an mbarrier); a destination region of a row-major global
// buffer parameter of at most 5 dimensions and a shared source of the same
// dtype and extents whose layout is what the TMA reads: the same box model
// as copy_async/tma (tma_boxes.hpp) -- dense 128-byte aligned boxes, no
// swizzle or one of the TMA's modes, every element's address checked.
//
// Emits: fence.proxy.async in every thread of the scope (their writes to the
// tile, made through the generic proxy, become visible to the TMA), the
// scope's barrier, then in thread 0 one TMA store per box and one
// commit_group. The TMA clips boxes at the tensor's bounds, so partial tiles
// at the edges are stored exactly. Before the tile is written again the
// kernel calls T::cuda::tma_store_wait(n) (and the scope's barrier); the
// kernel's end waits for every store (codegen).
// Why: the epilogue of a persistent kernel (a GEMM's C tile, attention's O)
// leaves the registers through shared memory and the TMA, so the threads
// start the next tile's main loop while the store drains -- instead of every
// CTA storing at once, with the tensor cores idle.
#include "tma_boxes.hpp"

namespace tx::lowering::variants {

namespace {

Check operands(const DispatchContext& ctx) {
  return tma_from_shared_operands(ctx, "a TMA store copies");
}

Plan plan(const DispatchContext& ctx) {
  return plan_tma_from_shared(ctx, /*reduce_add=*/false, "copy_async/tma_store");
}

}  // namespace
}  // namespace tx::lowering::variants

namespace tx::lowering {

void register_copy_async_tma_store(Registry& r) {
  using namespace variants;
  Variant v;
  v.targets = {TargetKind::cuda};
  v.off_target = "the host runs no PTX (copy_async/sync copies synchronously)";
  v.family = "copy_async";
  v.name = "tma_store";
  v.priority = 30;
  v.when = common_predicates_masking();
  v.when.push_back({"copy_operands_match", copy_operands_match});
  v.when.push_back({"tma_store_operands", operands});
  v.plan = plan;
  r.add("copy_async", v);
}

}  // namespace tx::lowering
