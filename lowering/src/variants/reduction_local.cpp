// reduction/local [10]: sum / max / min with register (local) source and
// destination.
//
// Accepts: cuda; thread, warp or warpgroup scope with all threads active, or
// at warpgroup scope with whole warps left out by a guard (their registers
// keep their values);
// (not cta: threads of different warps cannot meet in registers -- use
// shared operands and reduction/shared); a destination layout that maps the
// scope's threads one-to-one; spatial (kept) source iters distributed over
// threads exactly like the destination's; reduced source iters either in
// registers or across lanes of one warp -- and then the destination must
// carry a replica over exactly those lanes.
//
// Algorithm (seed 003): thread-wise, each thread loops over its destination
// elements, starts from the identity (or the old value with accum) and folds
// its own source registers in. When reduced iters cross lanes, each lane
// reduces its registers first, then a __shfl_xor butterfly over the reduced
// lane bits folds across lanes, leaving the result in every lane of the
// group: the destination's laneid replica.
#include "reduce_common.hpp"

namespace tx::lowering::variants {

namespace {

Check not_cta(const DispatchContext& ctx) {
  if (ctx.scope == ExecScope::cta)
    return std::string(
        "reduction/local does not support cta scope (registers of different "
        "warps cannot be combined; use shared operands)");
  return ok();
}

Check all_local(const DispatchContext& ctx) { return operands_in(ctx, MemScope::local); }

bool pow2(std::int64_t x) { return x > 0 && (x & (x - 1)) == 0; }

Plan plan(const DispatchContext& ctx) {
  auto parsed = parse_reduction(ctx);
  if (auto* e = std::get_if<std::string>(&parsed)) return *e;
  ReducePlan& rp = std::get<ReducePlan>(parsed);
  std::string why;
  auto ld = region_layout(rp.dst, *ctx.env, &why);
  if (!ld) return operand_reason(rp.dst, why);
  auto ls = region_layout(rp.src, *ctx.env, &why);
  if (!ls) return operand_reason(rp.src, why);
  for (int a = 1; a < kNumAxes; ++a)
    if (ld->thread_offset[a] != 0 || ls->thread_offset[a] != 0)
      return std::string("a region selects a subset of the threads");

  std::vector<Iter> spatial, reduced;
  std::int64_t spatial_n = 1;
  for (std::size_t d = 0; d < ls->dims.size(); ++d) {
    auto& into = rp.reduced[d] ? reduced : spatial;
    into.insert(into.end(), ls->dims[d].begin(), ls->dims[d].end());
    if (!rp.reduced[d]) spatial_n *= ls->extents[d];
  }
  auto joint = joint_refine({ld->flat(), spatial}, spatial_n, &why);
  if (!joint) return why;

  auto norm = [&](const Iter& it) -> std::optional<std::int64_t> {
    auto m = thread_axis_multiplier(it.axis, ctx.scope);
    if (!m) return std::nullopt;
    return it.stride * *m;
  };
  // Destination anchor: its thread iters and replicas cover the scope.
  std::vector<ThreadIter> cover;
  for (const JointIter& j : *joint)
    if (j.parts[0].axis != Axis::m) {
      auto s = norm(j.parts[0]);
      if (!s)
        return operand_reason(rp.dst, std::string("axis ") + axis_name(j.parts[0].axis) +
                                          " is not a thread axis of this scope");
      cover.push_back({j.extent, *s, false});
    }
  std::vector<ThreadIter> dst_replicas;
  for (const Iter& it : ld->replica) {
    auto s = norm(it);
    if (!s)
      return operand_reason(rp.dst, std::string("replica axis ") + axis_name(it.axis) +
                                        " is not a thread axis of this scope");
    cover.push_back({it.extent, *s, true});
    dst_replicas.push_back(cover.back());
  }
  // A tile with no thread axes is held whole by every thread of the scope.
  if (cover.empty() && ctx.scope_threads > 1) {
    cover.push_back({ctx.scope_threads, 1, true});
    dst_replicas.push_back(cover.back());
  }
  if (auto e = check_thread_cover(cover, ctx.scope_threads, rp.dst.buffer->layout.str()))
    return operand_reason(rp.dst, *e);

  Expr rel = scope_thread_index(ctx.scope);
  Expr d_base = ld->mem_offset, s_base = ls->mem_offset;
  std::vector<JointIter> bundle;
  for (const JointIter& j : *joint) {
    const Iter &dp = j.parts[0], &sp = j.parts[1];
    if (sp.axis != Axis::m) {
      auto ss = norm(sp), ds = norm(dp);
      if (dp.axis == Axis::m || !ss || !ds || *ss != *ds)
        return operand_reason(rp.src,
                              "kept dimensions are distributed over threads differently "
                              "from the destination " +
                                  rp.dst.buffer->name);
    } else if (dp.axis != Axis::m && sp.stride != 0) {
      s_base = add(s_base, mul(thread_coord(rel, *norm(dp), j.extent), c32(sp.stride)));
    }
    if (dp.axis == Axis::m) bundle.push_back(j);
  }

  // Reduced iters: registers (a loop) or lanes (a shuffle butterfly).
  std::vector<std::int64_t> red_ext, red_stride, masks;
  std::vector<ThreadIter> lane_iters;
  for (const Iter& it : reduced) {
    if (it.axis == Axis::m) {
      red_ext.push_back(it.extent);
      red_stride.push_back(it.stride);
      continue;
    }
    auto s = norm(it);
    if (!s)
      return operand_reason(rp.src, std::string("axis ") + axis_name(it.axis) +
                                        " is not a thread axis of this scope");
    if (!pow2(*s) || !pow2(it.extent) || *s * it.extent > 32)
      return operand_reason(rp.src,
                            "reduced dimension spans threads beyond one warp's lanes "
                            "(a warp shuffle cannot combine them)");
    lane_iters.push_back({it.extent, *s, false});
    for (std::int64_t m = *s; m < *s * it.extent; m *= 2) masks.push_back(m);
  }
  for (const ThreadIter& l : lane_iters) {
    bool found = false;
    for (const ThreadIter& r : dst_replicas) found |= r.stride == l.stride && r.extent == l.extent;
    if (!found)
      return operand_reason(rp.dst,
                            "the reduction crosses lanes, so the destination needs a "
                            "laneid replica over them (e.g. R({" +
                                std::to_string(l.extent) + "}, {" + std::to_string(l.stride) +
                                " * laneid}))");
  }
  std::sort(masks.rbegin(), masks.rend());

  std::vector<JointIter> atoms = coalesce(bundle);
  std::vector<std::int64_t> sp_ext, sp_d, sp_s;
  for (const JointIter& a : atoms) {
    sp_ext.push_back(a.extent);
    sp_d.push_back(a.parts[0].stride);
    sp_s.push_back(a.parts[1].stride);
  }
  std::int64_t sp_total = 1, red_total = 1;
  for (auto e : sp_ext) sp_total *= e;
  for (auto e : red_ext) red_total *= e;

  Buffer fd = flat_view(rp.dst.buffer), fs = flat_view(rp.src.buffer);
  DType t = rp.dst.buffer->dtype;
  BinOp op = rp.spec->combine;
  bool shuffle = !masks.empty();
  auto spatial_body = [&](Expr s) -> Stmt {
    Expr d_off = simplify(add(d_base, mixed_radix_offset(s, sp_ext, sp_d)), ctx.env);
    Expr src0 = simplify(add(s_base, mixed_radix_offset(s, sp_ext, sp_s)), ctx.env);
    Expr cur = make_load(fd, {d_off});
    std::vector<Stmt> body;
    if (!rp.accum || shuffle) body.push_back(make_store(fd, rp.spec->identity(t), {d_off}));
    Var r("red", i32);
    Expr s_off = simplify(add(src0, mixed_radix_offset(r, red_ext, red_stride)), ctx.env);
    Stmt fold = make_store(fd, make_binary(op, cur, make_load(fs, {s_off})), {d_off});
    body.push_back(red_total == 1 ? substitute(fold, {{r, c32(0)}})
                                  : make_for(r, c32(0), c32(red_total), ForKind::unrolled, fold));
    for (std::int64_t m : masks)
      body.push_back(make_store(
          fd, make_binary(op, cur, make_call(Intrinsic::shfl_xor, {cur, c32(m)})), {d_off}));
    if (rp.accum && shuffle) {
      Var old("old", t);
      body.push_back(make_store(fd, make_binary(op, old, cur), {d_off}));
      return make_let(old, cur, make_seq(body));
    }
    return make_seq(body);
  };
  Stmt s;
  if (sp_total == 1) {
    s = spatial_body(c32(0));
  } else {
    Var spa("spa", i32);
    s = make_for(spa, c32(0), c32(sp_total), ForKind::unrolled, spatial_body(spa));
  }
  return make_origin(origin_text(ctx, shuffle ? "reduction/local (warp shuffle)"
                                              : "reduction/local (thread-wise)"),
                     s, ctx.call->loc);
}

}  // namespace
}  // namespace tx::lowering::variants

namespace tx::lowering {

void register_reduction_local(Registry& r) {
  using namespace variants;
  // One registration for every op of the reduction family (tile_op_table.hpp).
  Variant v;
  v.family = "reduction";
  v.name = "local";
  v.priority = 10;
  // Shuffles stay within a warp: a guard may leave whole warps out.
  v.when = per_warp_predicates(common_predicates());
  v.when.push_back({"all_local", all_local});
  v.when.push_back({"not_cta", not_cta});
  v.plan = plan;
  r.add(v);
}

}  // namespace tx::lowering
