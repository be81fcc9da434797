// copy/gmem_smem [10]: a copy between two memory operands (global <-> shared,
// also shared <-> shared and global <-> global) by every thread of the scope.
//
// Accepts: cuda; any scope with all its threads active; neither operand
// local; equal dtypes and extents. The partition is synthesized, not read
// from a layout: the region's N elements split as [outer, threads, vec] with
// vec the widest access (16 bytes down to 1) that keeps both sides
// contiguous and aligned and divides N evenly over the threads. When no
// width divides N over the threads the variant declines and copy/fallback
// takes the call. Why: one thread moves vec elements at a time, neighbouring
// threads move neighbouring vectors (coalesced), and there is no tail.
#include "common.hpp"

namespace tx::lowering::variants {

namespace {

Check memory_pair(const DispatchContext& ctx) {
  for (const BufferRegion* r : region_args(ctx.call))
    if (r->buffer->scope == MemScope::local)
      return operand_reason(*r, "scope local is not global/shared (register copies use copy/reg)");
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
  std::int64_t n = dst.numel();
  auto joint = joint_refine({ld->flat(), ls->flat()}, n, &why);
  if (!joint) return why;
  std::vector<JointIter> iters = coalesce(*joint);
  std::int64_t threads = ctx.scope_threads;
  int esize = dst.buffer->dtype.bytes();
  int vec =
      widest_vector(iters, {0, 1}, {ld->mem_offset, ls->mem_offset}, esize, *ctx.env, [&](int v) {
        return v <= std::min(swizzle_vector_cap(*ld), swizzle_vector_cap(*ls)) &&
               n % (threads * v) == 0;
      });
  if (n % (threads * vec) != 0)
    return std::to_string(n) + " elements do not divide over the " + std::to_string(threads) +
           " threads of the " + exec_scope_name(ctx.scope);

  std::int64_t outer = n / (threads * vec);
  Buffer fd = flat_view(dst.buffer), fs = flat_view(src.buffer);
  Expr rel = scope_thread_index(ctx.scope);
  auto body = [&](Expr f) {
    Expr idx = mul(add(mul(f, c32(threads)), rel), c32(vec));
    Expr od = simplify(address(*ld, joint_offset(iters, 0, idx)), ctx.env);
    Expr os = simplify(address(*ls, joint_offset(iters, 1, idx)), ctx.env);
    return make_copy_bytes(fd, od, fs, os, vec * esize, ctx.call->loc);
  };
  Stmt s;
  if (outer == 1) {
    s = body(c32(0));
  } else {
    Var f("f", i32);
    s = make_for(f, c32(0), c32(outer), ForKind::serial, body(f));
  }
  return make_origin(origin_text(ctx, "copy/gmem_smem"), s, ctx.call->loc);
}

}  // namespace
}  // namespace tx::lowering::variants

namespace tx::lowering {

void register_copy_gmem_smem(Registry& r) {
  using namespace variants;
  Variant v;
  v.family = "copy";
  v.name = "gmem_smem";
  v.priority = 10;
  v.when = common_predicates();
  v.when.push_back({"copy_operands_match", copy_operands_match});
  v.when.push_back({"memory_pair", memory_pair});
  v.plan = plan;
  r.add("copy", v);
}

}  // namespace tx::lowering
