// The scalar element loop of copy/fallback and atomic/fallback
// (scalar_transfer.hpp).
#include "scalar_transfer.hpp"

#include <mutex>
#include <set>

#include "tx/printer.hpp"

namespace tx::lowering::variants {

Check no_distributed_registers(const DispatchContext& ctx) {
  for (const BufferRegion* r : region_args(ctx.call))
    if (r->buffer->scope == MemScope::local && r->buffer->layout.has_thread_axes())
      return operand_reason(*r,
                            "register tile distributed over threads (handled by copy/reg only)");
  return ok();
}

Plan plan_scalar_transfer(const DispatchContext& ctx, const ScalarTransfer& how) {
  const BufferRegion& dst = *region_arg(ctx.call, 0);
  const BufferRegion& src = *region_arg(ctx.call, 1);
  std::string why;
  auto ld = region_layout(partial_view(ctx, dst), *ctx.env, &why, {.allow_swizzle = true});
  if (!ld) return operand_reason(dst, why);
  auto ls = region_layout(partial_view(ctx, src), *ctx.env, &why, {.allow_swizzle = true});
  if (!ls) return operand_reason(src, why);
  std::int64_t n = dst.numel();

  // Linear index -> per-dimension coordinates -> offset, per operand (no
  // nesting between the two layouts is needed).
  auto offset = [&](const RegionLayout& l, const Expr& idx) {
    std::vector<Expr> coords;
    std::int64_t inner = 1;
    std::vector<Expr> rev;
    for (std::size_t d = l.extents.size(); d-- > 0;) {
      rev.push_back(mod(div(idx, c32(inner)), c32(l.extents[d])));
      inner *= l.extents[d];
    }
    coords.assign(rev.rbegin(), rev.rend());
    return address(l, offset_of_coords(l.dims, coords));
  };

  Buffer fd = flat_view(dst.buffer), fs = flat_view(src.buffer);
  bool local_src = src.buffer->scope == MemScope::local;
  bool local_dst = dst.buffer->scope == MemScope::local;
  Expr rel = scope_thread_index(ctx.scope);
  std::int64_t threads = (local_src || local_dst) ? 1 : ctx.scope_threads;
  Var i("i", i32);
  Expr idx = threads == 1 ? Expr(i) : add(mul(i, c32(threads)), rel);
  const Expr src_value = make_load(fs, {simplify(offset(*ls, idx), ctx.env)});
  const Expr dst_offset = simplify(offset(*ld, idx), ctx.env);
  Stmt body =
      how.atomic_add
          ? make_evaluate(make_call(Intrinsic::atomic_add, {make_load(fd, {dst_offset}), src_value},
                                    ctx.call->loc),
                          ctx.call->loc)
          : make_store(fd, src_value, {dst_offset});
  std::int64_t rounds = (n + threads - 1) / threads;
  Expr guard;
  if (rounds * threads != n) guard = lt(idx, c32(n));
  // A partial tile on an extent known at launch: only the elements inside it
  // (the region is one-dimensional there: symbolic_regions_flat).
  if (ctx.mask_symbolic)
    for (const BufferRegion* r : {&dst, &src})
      if (r->buffer->symbolic()) {
        Expr inside = lt(add(r->ranges[0].start, idx), r->buffer->dims[0]);
        guard = guard.defined() ? land(guard, inside) : inside;
      }
  // partial=: a source element past its tensor's end reads as zero (adds
  // nothing: skipped), a destination element past it is not written.
  if (Expr in = partial_inside(ctx, src, idx); in.defined() && how.atomic_add) {
    body = make_if(in, body);
  } else if (in.defined()) {
    DType t = dst.buffer->dtype;
    Expr zero = t.is_float() ? make_float(0.0, t) : make_int(0, t);
    body = make_if(in, body, make_store(fd, zero, {simplify(offset(*ld, idx), ctx.env)}));
  }
  if (Expr in = partial_inside(ctx, dst, idx); in.defined())
    guard = guard.defined() ? land(guard, in) : in;
  if (guard.defined()) body = make_if(guard, body);
  // A loop over a thread's registers is unrolled (a few dozen rounds at
  // most): indexed by a loop variable, the register array would live in
  // local memory, and the kernel's fast path, which shares the array, would
  // pay for it too (the partial tile of a shape-generic kernel).
  ForKind kind = (local_src || local_dst) && rounds <= 64 ? ForKind::unrolled : ForKind::serial;
  Stmt s = make_for(i, c32(0), c32(rounds), kind, body);
  if (local_src && ctx.scope_threads > 1) s = make_if(eq(rel, c32(0)), s);

  // Once per call site: a kernel rebuilt in a loop should not flood the log.
  static std::mutex mu;
  static std::set<std::string> warned;
  std::string site = ctx.call->loc.str() + ":" + std::to_string(ctx.call->loc.column);
  bool first;
  {
    std::lock_guard<std::mutex> lock(mu);
    first = warned.insert(site).second;
  }
  if (how.warn_once && first && !ctx.mask_symbolic &&
      !ctx.call->attrs.partial)  // a partial tile is this variant's job, not a miss
    warn(tile_call_str(ctx.call) + " at " + ctx.call->loc.str() +
         ": no vectorized copy variant applies; using copy/fallback (a scalar loop)");
  return make_origin(origin_text(ctx, how.origin), s, ctx.call->loc);
}

}  // namespace tx::lowering::variants
