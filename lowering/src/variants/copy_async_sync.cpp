// copy_async/sync [0]: an asynchronous copy performed synchronously, by the
// copy variant dispatch picks for the same operands.
//
// Accepts: whatever Tx::<scope>::copy accepts. It is the correct path for
// every copy_async that cp.async cannot take: the host (which runs no PTX;
// its waits are no-ops, exact because a synchronous copy has completed
// before any later wait), GPUs before sm_80, memory pairs other than global
// -> shared, runs narrower than 4 bytes. A finished copy satisfies every
// later wait_group, so the program's synchronization stays correct. A store
// of a shared tile to global memory first synchronizes the scope, as
// copy_async/tma_store does: the tile stored is the one its threads wrote.
// On a GPU
// that has cp.async it warns once per call site: the copy no longer
// overlaps with computation.
#include <mutex>
#include <set>

#include "common.hpp"
#include "tx/printer.hpp"

namespace tx::lowering::variants {

namespace {

Plan plan(const DispatchContext& ctx) {
  TileAttrs attrs = ctx.call->attrs;
  attrs.variant.clear();
  // Complete when issued: an mbarrier it would signal has nothing to count
  // (the kernel's arrive completes the phase).
  attrs.barrier = Expr();
  Stmt call = make_tile_call("copy", ctx.scope, ctx.call->args, attrs, ctx.call->loc);
  DispatchContext c = ctx;
  c.call = call.as<TileCallNode>();
  DispatchResult r;
  try {
    r = dispatch(c);
  } catch (const Error& e) {
    return std::string("as a synchronous copy: ") + e.what();
  }
  if (ctx.target.has_sm(80)) {
    static std::mutex mu;
    static std::set<std::string> warned;
    std::string site = ctx.call->loc.str() + ":" + std::to_string(ctx.call->loc.column);
    bool first;
    {
      std::lock_guard<std::mutex> lock(mu);
      first = warned.insert(site).second;
    }
    if (first)
      warn(tile_call_str(ctx.call) + " at " + ctx.call->loc.str() +
           ": cp.async does not apply; using copy_async/sync (" + r.variant->qualified() +
           ", synchronous)");
  }
  Stmt body = r.lowered;
  if (ctx.call->attrs.barrier.defined() && ctx.scope != ExecScope::thread) {
    // Every thread of the scope copied a part: all parts are written before
    // the arrive that follows the call (one thread's) publishes the stage,
    // and on sm_90 visible to the asynchronous proxy (wgmma, TMA stores).
    std::vector<Stmt> seq = {body};
    if (ctx.target.models_sm90())
      seq.push_back(
          make_evaluate(make_call(Intrinsic::fence_proxy_async, {}, ctx.call->loc), ctx.call->loc));
    seq.push_back(make_barrier(ctx.scope, ctx.call->loc));
    body = make_seq(seq);
  }
  const BufferRegion& dst = *region_arg(ctx.call, 0);
  const BufferRegion& src = *region_arg(ctx.call, 1);
  if (src.buffer->scope == MemScope::shared && dst.buffer->scope == MemScope::global &&
      ctx.scope != ExecScope::thread) {
    // A store of a shared tile stores the tile the scope's threads wrote
    // (copy_async/tma_store synchronizes them the same way before its TMA
    // reads the tile): each thread's part may have been written by another.
    body = make_seq({make_barrier(ctx.scope, ctx.call->loc), body});
  }
  return make_origin(origin_text(ctx, "copy_async/sync -> " + r.variant->qualified()), body,
                     ctx.call->loc);
}

}  // namespace
}  // namespace tx::lowering::variants

namespace tx::lowering {

void register_copy_async_sync(Registry& r) {
  using namespace variants;
  Variant v;
  v.family = "copy_async";
  v.name = "sync";
  v.priority = 0;
  v.when = common_predicates_masking();
  v.when.push_back({"copy_operands_match", copy_operands_match});
  v.plan = plan;
  r.add("copy_async", v);
}

}  // namespace tx::lowering
