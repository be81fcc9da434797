// copy_async/ldgsts [20]: an asynchronous global -> shared tile copy through
// cp.async (LDGSTS), 16, 8 or 4 bytes per thread and instruction.
//
// Accepts: cuda on sm_80+; any scope with all its threads active; a global
// source and a shared destination of equal dtypes and extents whose layouts
// nest, with contiguous, aligned runs of at least 4 bytes that divide evenly
// over the scope's threads. The partition is copy/gmem_smem's: the region's
// N elements split as [outer, threads, vec], vec the widest access (16 bytes
// down to 4) that keeps both sides contiguous and aligned; neighbouring
// threads move neighbouring vectors (coalesced reads).
//
// The primitive emits no synchronization (as TIRx's ldgsts): the kernel
// author groups copies with T::cuda::commit_group() and waits with
// T::cuda::wait_group(n), then a barrier before other threads read the tile.
// Why: the copy proceeds while the thread computes on an earlier stage, which
// is what a multi-stage pipeline overlaps.
#include "common.hpp"

namespace tx::lowering::variants {

namespace {

Check global_to_shared(const DispatchContext& ctx) {
  const BufferRegion& dst = *region_arg(ctx.call, 0);
  const BufferRegion& src = *region_arg(ctx.call, 1);
  if (src.buffer->scope != MemScope::global || dst.buffer->scope != MemScope::shared)
    return operand_reason(dst, std::string("cp.async copies global -> shared (here ") +
                                   mem_scope_name(src.buffer->scope) + " -> " +
                                   mem_scope_name(dst.buffer->scope) + ")");
  if (ctx.call->attrs.barrier.defined())
    return "barrier= asks for completion on an mbarrier, which cp.async groups do not signal "
           "(copy_async/tma does)";
  if (ctx.target.below_sm(80))
    return "cp.async needs sm_80; the target is sm_" + std::to_string(ctx.target.sm);
  if (src.buffer->symbolic())
    return operand_reason(src,
                          "extent known at launch: a partial tile would need zero-filled "
                          "chunks (not implemented; copy_async/sync copies it)");
  return ok();
}

Plan plan(const DispatchContext& ctx) {
  const BufferRegion& dst = *region_arg(ctx.call, 0);
  const BufferRegion& src = *region_arg(ctx.call, 1);
  std::string why;
  auto ld = region_layout(dst, *ctx.env, &why, {.allow_swizzle = true});
  if (!ld) return operand_reason(dst, why);
  auto ls = region_layout(src, *ctx.env, &why, {.allow_swizzle = true});
  if (!ls) return operand_reason(src, why);
  const std::int64_t n = dst.numel();
  auto joint = joint_refine({ld->flat(), ls->flat()}, n, &why);
  if (!joint) return why;
  std::vector<JointIter> iters = coalesce(*joint);
  const std::int64_t threads = ctx.scope_threads;
  const int esize = dst.buffer->dtype.bytes();
  int vec =
      widest_vector(iters, {0, 1}, {ld->mem_offset, ls->mem_offset}, esize, *ctx.env, [&](int v) {
        return v <= std::min(swizzle_vector_cap(*ld), swizzle_vector_cap(*ls)) &&
               n % (threads * v) == 0;
      });
  if (vec * esize < 4 || n % (threads * vec) != 0)
    return "contiguous, aligned runs of " + std::to_string(vec * esize) +
           " bytes that divide over the " + std::to_string(threads) + " threads of the " +
           exec_scope_name(ctx.scope) + "; cp.async moves 4, 8 or 16 bytes";
  const std::int64_t outer = n / (threads * vec);
  Buffer fd = flat_view(dst.buffer), fs = flat_view(src.buffer);
  Expr rel = scope_thread_index(ctx.scope);
  auto body = [&](Expr f) {
    Expr idx = mul(add(mul(f, c32(threads)), rel), c32(vec));
    Expr od = simplify(address(*ld, joint_offset(iters, 0, idx)), ctx.env);
    Expr os = simplify(address(*ls, joint_offset(iters, 1, idx)), ctx.env);
    return make_cp_async(fd, od, fs, os, vec * esize, Expr(), ctx.call->loc);
  };
  Stmt s;
  if (outer == 1) {
    s = body(c32(0));
  } else {
    Var f("f", i32);
    s = make_for(f, c32(0), c32(outer), ForKind::unrolled, body(f));
  }
  return make_origin(origin_text(ctx, "copy_async/ldgsts (" + std::to_string(vec * esize) +
                                          " B x " + std::to_string(outer) + " per thread)"),
                     s, ctx.call->loc);
}

}  // namespace
}  // namespace tx::lowering::variants

namespace tx::lowering {

void register_copy_async_ldgsts(Registry& r) {
  using namespace variants;
  Variant v;
  v.targets = {TargetKind::cuda};
  v.off_target = "the host runs no PTX (copy_async/sync copies synchronously)";
  v.family = "copy_async";
  v.name = "ldgsts";
  v.priority = 20;
  v.when = common_predicates();
  v.when.push_back({"copy_operands_match", copy_operands_match});
  v.when.push_back({"global_to_shared", global_to_shared});
  v.plan = plan;
  r.add("copy_async", v);
}

}  // namespace tx::lowering
