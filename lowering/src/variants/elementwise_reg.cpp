// elementwise/reg [10]: an elementwise op (zero, fill, cast, sqrt, exp,
// exp2, reciprocal, silu, add, sub, mul, fdiv, maximum, minimum, fma) whose
// operands are all register (local) tiles, plus scalars.
//
// Accepts: cuda; any scope with all its threads active, or with whole warps
// left out by a guard (their registers keep their values); every tile operand
// local; dtype rules of the op (tile_ops.cpp); inputs that broadcast to the
// destination (NumPy rules); a destination (anchor) layout whose thread
// iters map the scope's threads one-to-one; inputs that give each thread the
// elements it needs -- an input iter distributed over threads must be
// distributed exactly as the destination's (otherwise the data lives in
// another thread's registers).
//
// Algorithm (seed 000): the partition is induced by the anchor's thread
// axes; dropping them leaves each thread its private bundle, and the op is
// applied register by register in an unrolled loop. f16/bf16/fp8 compute in
// f32 and round on store. With where=, each element's coordinates in the
// destination region are its thread's part (from the thread index) plus its
// register's part (a constant of the unrolled loop), and the store keeps the
// old value where the condition fails (a select: no branch in the loop).
#include "common.hpp"

namespace tx::lowering::variants {

namespace {

Plan plan(const DispatchContext& ctx) {
  auto parsed = parse_elementwise(ctx);
  if (auto* e = std::get_if<std::string>(&parsed)) return *e;
  ElementwisePlan& ep = std::get<ElementwisePlan>(parsed);
  const BufferRegion& dst = ep.dst;
  std::string why;
  auto ld = region_layout(dst, *ctx.env, &why);
  if (!ld) return operand_reason(dst, why);
  for (int a = 1; a < kNumAxes; ++a)
    if (ld->thread_offset[a] != 0)
      return operand_reason(dst, "region selects a subset of the threads");
  Extents target = dst.extents();

  std::vector<const BufferRegion*> srcs;
  std::vector<RegionLayout> layouts{*ld};
  for (const TileArg& in : ep.inputs)
    if (auto* r = std::get_if<BufferRegion>(&in)) {
      auto l = region_layout(*r, *ctx.env, &why);
      if (!l) return operand_reason(*r, why);
      auto b = broadcast_to(*l, target, &why);
      if (!b) return operand_reason(*r, why + " (destination " + dst.buffer->name + ")");
      for (int a = 1; a < kNumAxes; ++a)
        if (b->thread_offset[a] != 0)
          return operand_reason(*r, "region selects a subset of the threads");
      srcs.push_back(r);
      layouts.push_back(*b);
    }
  std::vector<std::vector<Iter>> flats;
  for (auto& l : layouts) flats.push_back(l.flat());
  // where=: the destination's coordinates ride along as one more operand.
  const bool where = static_cast<bool>(ctx.call->attrs.where);
  const std::size_t coord_part = flats.size();
  if (where) flats.push_back(coordinate_iters(dst));
  auto joint = joint_refine(flats, dst.numel(), &why);
  if (!joint) return why;

  // Anchor: the destination's thread iters must cover the scope exactly.
  std::vector<ThreadIter> cover;
  for (const JointIter& j : *joint) {
    const Iter& p = j.parts[0];
    if (p.axis == Axis::m) continue;
    auto mult = thread_axis_multiplier(p.axis, ctx.scope);
    if (!mult)
      return operand_reason(dst, std::string("register layout uses axis ") + axis_name(p.axis) +
                                     ", which is not a thread axis of a " +
                                     exec_scope_name(ctx.scope) + " scope");
    cover.push_back({j.extent, p.stride * *mult, false});
  }
  for (const Iter& it : ld->replica) {
    auto mult = thread_axis_multiplier(it.axis, ctx.scope);
    if (!mult)
      return operand_reason(dst, std::string("replica on axis ") + axis_name(it.axis) +
                                     " is not a thread axis of this scope");
    cover.push_back({it.extent, it.stride * *mult, true});
  }
  // A tile with no thread axes is held whole by every thread of the scope.
  if (cover.empty() && ctx.scope_threads > 1) {
    cover.push_back({ctx.scope_threads, 1, true});
  }
  if (auto e = check_thread_cover(cover, ctx.scope_threads, dst.buffer->layout.str()))
    return operand_reason(dst, *e);

  Expr rel = scope_thread_index(ctx.scope);
  std::vector<Expr> bases;
  for (auto& l : layouts) bases.push_back(l.mem_offset);
  std::vector<JointIter> bundle;
  RegionCoordinates thread_coords(dst);  // where=: the thread's part of each coordinate
  for (const JointIter& j : *joint) {
    const Iter& dp = j.parts[0];
    if (where && dp.axis != Axis::m)
      thread_coords.add(
          j.parts[coord_part].stride,
          thread_coord(rel, dp.stride * *thread_axis_multiplier(dp.axis, ctx.scope), j.extent));
    for (std::size_t i = 1; i < layouts.size(); ++i) {
      const Iter& sp = j.parts[i];
      const BufferRegion& s = *srcs[i - 1];
      if (sp.axis != Axis::m) {
        auto ms = thread_axis_multiplier(sp.axis, ctx.scope);
        auto md = thread_axis_multiplier(dp.axis, ctx.scope);
        if (dp.axis == Axis::m || !ms || !md || sp.stride * *ms != dp.stride * *md)
          return operand_reason(s,
                                "distributes elements over threads differently from the "
                                "destination " +
                                    dst.buffer->name +
                                    " (the values live in other threads' registers)");
      } else if (dp.axis != Axis::m && sp.stride != 0) {
        // A thread-private input read at the destination thread's coordinate.
        auto md = thread_axis_multiplier(dp.axis, ctx.scope);
        bases[i] = add(bases[i], mul(thread_coord(rel, dp.stride * *md, j.extent), c32(sp.stride)));
      }
    }
    if (dp.axis == Axis::m) bundle.push_back(j);
  }
  std::vector<JointIter> atoms = coalesce(bundle);

  std::vector<std::int64_t> ext;
  std::vector<std::vector<std::int64_t>> strides(layouts.size());
  for (const JointIter& a : atoms) {
    ext.push_back(a.extent);
    for (std::size_t i = 0; i < layouts.size(); ++i) strides[i].push_back(a.parts[i].stride);
  }
  std::int64_t total = 1;
  for (auto e : ext) total *= e;

  Buffer fd = flat_view(dst.buffer);
  std::vector<Buffer> fs;
  for (const BufferRegion* s : srcs) fs.push_back(flat_view(s->buffer));
  auto body = [&](Expr f) {
    std::vector<Expr> loaded;
    std::size_t si = 0;
    for (const TileArg& in : ep.inputs) {
      if (auto* e = std::get_if<Expr>(&in)) {
        loaded.push_back(*e);
        continue;
      }
      ++si;
      loaded.push_back(
          make_load(fs[si - 1],
                    {simplify(add(bases[si], mixed_radix_offset(f, ext, strides[si])), ctx.env)}));
    }
    Expr value = elementwise_value(ep, loaded);
    Expr d_off = simplify(add(bases[0], mixed_radix_offset(f, ext, strides[0])), ctx.env);
    if (where) {
      // The register part of each coordinate: f's digits over the bundle
      // (the atoms are the bundle's adjacent iters fused, in order).
      RegionCoordinates at = thread_coords;
      std::int64_t inner = 1;
      for (std::size_t k = bundle.size(); k-- > 0;) {
        at.add(bundle[k].parts[coord_part].stride, mod(div(f, c32(inner)), c32(bundle[k].extent)));
        inner *= bundle[k].extent;
      }
      Expr cond = simplify(where_condition(ctx.call, at.coords()), ctx.env);
      value = make_select(cond, value, make_load(fd, {d_off}));
    }
    return make_store(fd, value, {d_off});
  };
  Stmt s;
  if (total == 1) {
    s = body(c32(0));
  } else {
    Var f("f", i32);
    s = make_for(f, c32(0), c32(total), ForKind::unrolled, body(f));
  }
  return make_origin(origin_text(ctx, "elementwise/reg"), s, ctx.call->loc);
}

Check all_local(const DispatchContext& ctx) { return operands_in(ctx, MemScope::local); }

}  // namespace
}  // namespace tx::lowering::variants

namespace tx::lowering {

void register_elementwise_reg(Registry& r) {
  using namespace variants;
  // One registration for every op of the elementwise family (tile_op_table.hpp).
  Variant v;
  v.family = "elementwise";
  v.name = "reg";
  v.priority = 10;
  // Registers are private to a thread: a guard may leave whole warps out
  // (a kernel skipping the warps whose rows hold no data).
  v.when = per_warp_predicates(common_predicates_where());
  v.when.push_back({"all_local", all_local});
  v.plan = plan;
  r.add(v);
}

}  // namespace tx::lowering
