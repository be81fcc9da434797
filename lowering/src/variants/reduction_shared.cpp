// reduction/shared [10]: sum / max / min with shared-memory source and
// destination, at any scope.
//
// Accepts: cuda; any scope with all its threads active; both operands
// shared; the destination holds the source's kept dimensions.
//
// Algorithm: the scope's T threads split into groups of G lanes (G a power
// of two, at most 32, so a group never leaves its warp); each group reduces
// one destination element per round: its lanes stride over the K reduced
// elements, then a __shfl_xor butterfly of width G folds the lanes, and the
// group's first lane stores. G grows when there are fewer outputs than
// threads (G = 1 when M >= T). Loads are guarded, the shuffles are not, so
// every lane of a warp reaches every shuffle. The op ends with the scope's
// barrier: the result is read by other threads.
#include "reduce_common.hpp"

namespace tx::lowering::variants {

namespace {

Check all_shared(const DispatchContext& ctx) { return operands_in(ctx, MemScope::shared); }

std::int64_t pow2_floor(std::int64_t x) {
  std::int64_t p = 1;
  while (p * 2 <= x) p *= 2;
  return p;
}

// Coordinates of linear index `lin` over `extents` (row-major).
std::vector<Expr> unflatten(const Expr& lin, const std::vector<std::int64_t>& extents) {
  std::vector<Expr> out(extents.size());
  std::int64_t inner = 1;
  for (std::size_t d = extents.size(); d-- > 0;) {
    Expr c = div(lin, c32(inner));
    if (d != 0) c = mod(c, c32(extents[d]));
    out[d] = c;
    inner *= extents[d];
  }
  return out;
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

  std::vector<std::int64_t> sp_ext, red_ext;
  for (std::size_t d = 0; d < ls->extents.size(); ++d)
    (rp.reduced[d] ? red_ext : sp_ext).push_back(ls->extents[d]);
  std::int64_t m_out = 1, k_red = 1;
  for (auto e : sp_ext) m_out *= e;
  for (auto e : red_ext) k_red *= e;

  std::int64_t threads = ctx.scope_threads;
  std::int64_t g = 1;
  if (m_out < threads)
    g = std::min<std::int64_t>({32, pow2_floor(threads / m_out), pow2_floor(k_red)});
  std::int64_t rows_per_round = threads / g;
  std::int64_t rounds = (m_out + rows_per_round - 1) / rows_per_round;
  std::int64_t k_steps = (k_red + g - 1) / g;

  Expr rel = scope_thread_index(ctx.scope);
  Expr slot = div(rel, c32(g)), lane = mod(rel, c32(g));
  DType t = rp.dst.buffer->dtype;
  BinOp op = rp.spec->combine;
  Buffer fd = flat_view(rp.dst.buffer), fs = flat_view(rp.src.buffer);
  Buffer acc = scratch("acc", t, 1);
  Expr acc0 = make_load(acc, {c32(0)});

  auto round_body = [&](Expr rnd) -> Stmt {
    Expr row = simplify(add(mul(rnd, c32(rows_per_round)), slot), ctx.env);
    Expr valid = simplify(lt(row, c32(m_out)), ctx.env);
    std::vector<Expr> sp = unflatten(row, sp_ext);
    Var k("k", i32);
    Expr kk = simplify(add(mul(k, c32(g)), lane), ctx.env);
    std::vector<Expr> rd = unflatten(kk, red_ext);
    std::vector<Expr> src_coords;
    std::size_t si = 0, ri = 0;
    for (std::size_t d = 0; d < rp.reduced.size(); ++d)
      src_coords.push_back(rp.reduced[d] ? rd[ri++] : sp[si++]);
    Expr s_off = simplify(add(ls->mem_offset, offset_of_coords(ls->dims, src_coords)), ctx.env);
    std::vector<Expr> kept;
    for (std::size_t d = 0; d < sp.size(); ++d)
      if (sp_ext[d] != 1) kept.push_back(sp[d]);
    std::vector<Expr> dst_coords;
    std::size_t ki = 0;
    for (auto e : ld->extents) dst_coords.push_back(e == 1 ? c32(0) : kept[ki++]);
    Expr d_off = simplify(add(ld->mem_offset, offset_of_coords(ld->dims, dst_coords)), ctx.env);

    std::vector<Stmt> body;
    body.push_back(make_store(acc, rp.spec->identity(t), {c32(0)}));
    Stmt fold = make_store(acc, make_binary(op, acc0, make_load(fs, {s_off})), {c32(0)});
    Expr load_ok = simplify(land(valid, lt(kk, c32(k_red))), ctx.env);
    if (!is_const_int(load_ok, 1)) fold = make_if(load_ok, fold);
    body.push_back(k_steps == 1 ? substitute(fold, {{k, c32(0)}})
                                : make_for(k, c32(0), c32(k_steps), ForKind::serial, fold));
    for (std::int64_t m = g / 2; m >= 1; m /= 2)
      body.push_back(make_store(
          acc, make_binary(op, acc0, make_call(Intrinsic::shfl_xor, {acc0, c32(m)})), {c32(0)}));
    Expr result = rp.accum ? make_binary(op, make_load(fd, {d_off}), acc0) : acc0;
    Stmt store = make_store(fd, result, {d_off});
    Expr store_ok = simplify(land(valid, eq(lane, c32(0))), ctx.env);
    body.push_back(is_const_int(store_ok, 1) ? store : make_if(store_ok, store));
    return make_seq(body);
  };
  Stmt s;
  if (rounds == 1) {
    s = round_body(c32(0));
  } else {
    Var rnd("rnd", i32);
    s = make_for(rnd, c32(0), c32(rounds), ForKind::serial, round_body(rnd));
  }
  s = make_allocate(acc, s);
  s = make_seq({s, scope_barrier(ctx.scope, ctx.call->loc)});
  return make_origin(origin_text(ctx, "reduction/shared"), s, ctx.call->loc);
}

}  // namespace
}  // namespace tx::lowering::variants

namespace tx::lowering {

void register_reduction_shared(Registry& r) {
  using namespace variants;
  // One registration for every op of the reduction family (tile_op_table.hpp).
  Variant v;
  v.family = "reduction";
  v.name = "shared";
  v.priority = 10;
  v.when = common_predicates();
  v.when.push_back({"all_shared", all_shared});
  v.plan = plan;
  r.add(v);
}

}  // namespace tx::lowering
