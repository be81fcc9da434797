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
#include "tx/printer.hpp"

namespace tx::lowering::variants {

namespace {

Check operands(const DispatchContext& ctx) {
  const BufferRegion& dst = *region_arg(ctx.call, 0);
  const BufferRegion& src = *region_arg(ctx.call, 1);
  if (src.buffer->scope != MemScope::shared || dst.buffer->scope != MemScope::global)
    return operand_reason(dst, std::string("a TMA store copies shared -> global (here ") +
                                   mem_scope_name(src.buffer->scope) + " -> " +
                                   mem_scope_name(dst.buffer->scope) + ")");
  if (ctx.call->attrs.barrier.defined())
    return operand_reason(dst,
                          "a TMA store completes in a bulk group, not on an mbarrier: drop "
                          "barrier= and wait with T::cuda::tma_store_wait");
  if (ctx.target.below_sm(90))
    return "the TMA needs sm_90; the target is sm_" + std::to_string(ctx.target.sm);
  return ok();
}

Plan plan(const DispatchContext& ctx) {
  const BufferRegion& dst = *region_arg(ctx.call, 0);
  const BufferRegion& src = *region_arg(ctx.call, 1);
  auto planned = plan_tma_boxes(ctx, dst, src);
  if (auto* e = std::get_if<std::string>(&planned)) return *e;
  const TmaBoxes& t = std::get<TmaBoxes>(planned);
  const SourceLoc loc = ctx.call->loc;
  std::vector<Stmt> issue;
  for (std::int64_t j = 0; j < t.boxes(); ++j)
    issue.push_back(
        make_tma_store(t.map, t.smem, t.smem_offset(j, ctx.env), t.coords(dst, j, ctx.env), loc));
  issue.push_back(make_evaluate(make_call(Intrinsic::tma_store_commit, {}, loc), loc));
  Stmt s = make_seq(issue);
  if (ctx.scope != ExecScope::thread)
    s = make_if(eq(scope_thread_index(ctx.scope), c32(0)), s, Stmt(), loc);
  s = make_seq({make_evaluate(make_call(Intrinsic::fence_proxy_async, {}, loc), loc),
                make_barrier(ctx.scope, loc), s},
               loc);
  return make_origin(origin_text(ctx, "copy_async/tma_store (" + t.describe() + ")"), s, loc);
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
