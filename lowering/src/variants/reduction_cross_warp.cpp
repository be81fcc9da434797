// reduction/cross_warp [10]: sum / max / min of a register tile spread over
// the warps of a CTA (or of a warpgroup) into a register tile that every
// thread then holds whole -- a row statistic broadcast to every thread.
//
// Accepts: cuda; cta or warpgroup scope with all its threads active, a
// multiple of 32 of them; both operands local; a destination held whole by
// every thread (no thread iters, or replicas that cover the scope); a source
// whose kept dimensions are registers laid out like the destination's, whose
// thread iters are all reduced and give each thread of the scope its own
// part (no replicas: a sum would count the copies).
//
// Why a variant: registers of different warps cannot meet in a shuffle
// (reduction/local refuses cta scope), and staging the whole tile in shared
// memory for reduction/shared costs a barrier and a shared round trip per
// element; here only one value per warp goes through shared memory.
//
// Algorithm: each thread folds its own registers (unrolled), a __shfl_xor
// butterfly folds its warp (every lane ends with the warp's value), lane 0
// of each warp stores that into a shared slot, one barrier of the scope,
// and every thread folds the scope's slots as a pairwise tree -- the same
// order in every thread, so all threads hold the same bits. Inside a loop a second
// barrier ends the op: the next trip's stores into the slots must wait until
// every warp has read them.
#include "reduce_common.hpp"

namespace tx::lowering::variants {

namespace {

Check all_local(const DispatchContext& ctx) { return operands_in(ctx, MemScope::local); }

Check across_warps(const DispatchContext& ctx) {
  if (ctx.scope != ExecScope::cta && ctx.scope != ExecScope::warpgroup)
    return std::string("reduction/cross_warp reduces across the warps of a cta or warpgroup");
  if (ctx.scope_threads % 32 != 0 || ctx.scope_threads < 64)
    return "the scope has " + std::to_string(ctx.scope_threads) +
           " threads; reduction/cross_warp needs whole warps, at least two";
  return ok();
}

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

  auto norm = [&](const Iter& it) -> std::optional<std::int64_t> {
    auto m = thread_axis_multiplier(it.axis, ctx.scope);
    if (!m) return std::nullopt;
    return it.stride * *m;
  };
  // The destination: in every thread whole.
  for (const Iter& it : ld->flat())
    if (it.axis != Axis::m && it.extent > 1)
      return operand_reason(rp.dst, "is distributed over threads (" + rp.dst.buffer->layout.str() +
                                        "); reduction/cross_warp gives every thread the whole "
                                        "result: use a destination with no thread axes or a "
                                        "replica over the scope, e.g. S({1}), R({" +
                                        std::to_string(ctx.scope_threads) + "}, {tid})");
  if (!ld->replica.empty()) {
    std::vector<ThreadIter> cover;
    for (const Iter& it : ld->replica) {
      auto s = norm(it);
      if (!s)
        return operand_reason(rp.dst, std::string("replica axis ") + axis_name(it.axis) +
                                          " is not a thread axis of this scope");
      cover.push_back({it.extent, *s, true});
    }
    if (auto e = check_thread_cover(cover, ctx.scope_threads, rp.dst.buffer->layout.str()))
      return operand_reason(rp.dst, *e);
  }
  if (!ls->replica.empty())
    return operand_reason(rp.src, "has a replica (" + rp.src.buffer->layout.str() +
                                      "): its copies would be folded more than once");

  // The source: kept iters in registers, reduced iters in registers or
  // across every thread of the scope.
  std::vector<Iter> spatial;
  std::vector<std::int64_t> red_ext, red_stride;
  std::vector<ThreadIter> cover;
  std::int64_t spatial_n = 1;
  for (std::size_t d = 0; d < ls->dims.size(); ++d) {
    if (!rp.reduced[d]) {
      spatial.insert(spatial.end(), ls->dims[d].begin(), ls->dims[d].end());
      spatial_n *= ls->extents[d];
      continue;
    }
    for (const Iter& it : ls->dims[d]) {
      if (it.axis == Axis::m) {
        red_ext.push_back(it.extent);
        red_stride.push_back(it.stride);
        continue;
      }
      auto s = norm(it);
      if (!s)
        return operand_reason(rp.src, std::string("axis ") + axis_name(it.axis) +
                                          " is not a thread axis of this scope");
      cover.push_back({it.extent, *s, false});
    }
  }
  for (const Iter& it : spatial)
    if (it.axis != Axis::m && it.extent > 1)
      return operand_reason(rp.src,
                            "a kept dimension is distributed over threads; "
                            "reduction/cross_warp folds every thread's part into one "
                            "result (reduce over the thread dimensions)");
  if (auto e = check_thread_cover(cover, ctx.scope_threads, rp.src.buffer->layout.str()))
    return operand_reason(rp.src, *e + " (every thread of the scope must hold its own part)");

  auto joint = joint_refine({ld->flat(), spatial}, spatial_n, &why);
  if (!joint) return why;
  std::vector<JointIter> bundle;
  for (const JointIter& j : *joint)
    if (j.parts[0].axis == Axis::m) bundle.push_back(j);
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

  const std::int64_t warps = ctx.scope_threads / 32;           // in the scope
  const std::int64_t cta_warps = (ctx.cta_threads + 31) / 32;  // slots: one per warp of the CTA
  Expr cta_tid = scope_thread_index(ExecScope::cta);
  Expr lane = mod(cta_tid, c32(32)), warp = div(cta_tid, c32(32));
  // The scope's first warp: 0 for the CTA, 4 * wgid for a warpgroup.
  Expr first_warp =
      ctx.scope == ExecScope::cta ? c32(0) : simplify(mul(div(cta_tid, c32(128)), c32(4)), ctx.env);

  DType t = rp.dst.buffer->dtype;
  BinOp op = rp.spec->combine;
  Buffer fd = flat_view(rp.dst.buffer), fs = flat_view(rp.src.buffer);
  Buffer acc = scratch("warp_acc", t, sp_total);
  Buffer slots = make_buffer("warp_slots", t, {sp_total * cta_warps}, MemScope::shared,
                             std::nullopt, ctx.call->loc);

  // 1. Each warp's value of each output, stored by its lane 0.
  std::vector<Stmt> body;
  for (std::int64_t s = 0; s < sp_total; ++s) {
    Expr src0 = simplify(add(ls->mem_offset, mixed_radix_offset(c32(s), sp_ext, sp_s)), ctx.env);
    Expr cur = make_load(acc, {c32(s)});
    body.push_back(make_store(acc, rp.spec->identity(t), {c32(s)}));
    Var r("red", i32);
    Expr s_off = simplify(add(src0, mixed_radix_offset(r, red_ext, red_stride)), ctx.env);
    Stmt fold = make_store(acc, make_binary(op, cur, make_load(fs, {s_off})), {c32(s)});
    body.push_back(red_total == 1 ? substitute(fold, {{r, c32(0)}})
                                  : make_for(r, c32(0), c32(red_total), ForKind::unrolled, fold));
    for (std::int64_t m = 16; m >= 1; m /= 2)
      body.push_back(make_store(
          acc, make_binary(op, cur, make_call(Intrinsic::shfl_xor, {cur, c32(m)})), {c32(s)}));
  }
  std::vector<Stmt> publish;
  for (std::int64_t s = 0; s < sp_total; ++s)
    publish.push_back(make_store(slots, make_load(acc, {c32(s)}),
                                 {simplify(add(c32(s * cta_warps), warp), ctx.env)}));
  body.push_back(make_if(eq(lane, c32(0)), make_seq(publish)));
  body.push_back(scope_barrier(ctx.scope, ctx.call->loc));

  // 2. Every thread folds the scope's warps.
  for (std::int64_t s = 0; s < sp_total; ++s) {
    Expr d_off = simplify(add(ld->mem_offset, mixed_radix_offset(c32(s), sp_ext, sp_d)), ctx.env);
    // A pairwise tree (depth log2 of the warps, loads independent).
    std::vector<Expr> level;
    for (std::int64_t w = 0; w < warps; ++w)
      level.push_back(
          make_load(slots, {simplify(add(c32(s * cta_warps + w), first_warp), ctx.env)}));
    while (level.size() > 1) {
      std::vector<Expr> next;
      for (std::size_t i = 0; i + 1 < level.size(); i += 2)
        next.push_back(make_binary(op, level[i], level[i + 1]));
      if (level.size() % 2) next.push_back(level.back());
      level = std::move(next);
    }
    Expr total = level[0];
    if (rp.accum) total = make_binary(op, make_load(fd, {d_off}), total);
    body.push_back(make_store(fd, total, {d_off}));
  }
  if (ctx.in_loop) body.push_back(scope_barrier(ctx.scope, ctx.call->loc));
  Stmt s = make_allocate(slots, make_allocate(acc, make_seq(body)));
  return make_origin(origin_text(ctx, ctx.in_loop ? "reduction/cross_warp (in a loop: 2 barriers)"
                                                  : "reduction/cross_warp"),
                     s, ctx.call->loc);
}

}  // namespace
}  // namespace tx::lowering::variants

namespace tx::lowering {

void register_reduction_cross_warp(Registry& r) {
  using namespace variants;
  // One registration for every op of the reduction family (tile_op_table.hpp).
  Variant v;
  v.family = "reduction";
  v.name = "cross_warp";
  v.priority = 10;
  v.when = common_predicates();
  v.when.push_back({"all_local", all_local});
  v.when.push_back({"across_warps", across_warps});
  v.plan = plan;
  r.add(v);
}

}  // namespace tx::lowering
