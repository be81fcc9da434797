// elementwise/smem [10]: an elementwise op whose operands are all shared
// memory tiles, plus scalars.
//
// Accepts: cuda; any scope with all its threads active; every tile operand
// shared; the op's dtype rules; inputs that broadcast to the destination.
//
// Algorithm (seed 001): like copy/gmem_smem the partition is synthesized
// from the scope's thread count: the N destination elements split as
// [outer, threads, vec], vec the widest access (16 bytes down) that keeps
// the destination and every non-broadcast input contiguous and aligned. Each
// (round, thread) loads its vec-element bundles into registers with one
// vector access per operand (an input broadcast along the innermost
// dimension loads a single element), applies the op per element, and stores
// the bundle with one vector access. Rounds that would run past N are
// guarded, so any N works. The op ends with the scope's barrier so that the
// result is visible to every thread of the scope. With where=, accesses are
// single elements, each stored only where the condition holds (the others
// are not written: two scopes may fill disjoint parts of one tile).
// Swizzled operands (layouts::swizzled_tiles, the tiles TMA writes and wgmma
// reads) are addressed through their swizzle, each access at most one
// 16-byte chunk wide (the swizzle moves whole chunks): a kernel can widen an
// fp8 tile into a 16-bit one, or zero a tile's tail rows, in place between
// the TMA and the MMA.
#include "common.hpp"

namespace tx::lowering::variants {

namespace {

Plan plan(const DispatchContext& ctx) {
  auto parsed = parse_elementwise(ctx);
  if (auto* e = std::get_if<std::string>(&parsed)) return *e;
  ElementwisePlan& ep = std::get<ElementwisePlan>(parsed);
  const BufferRegion& dst = ep.dst;
  std::string why;
  auto ld = region_layout(dst, *ctx.env, &why, {.allow_swizzle = true});
  if (!ld) return operand_reason(dst, why);
  Extents target = dst.extents();
  std::vector<const BufferRegion*> srcs;
  std::vector<RegionLayout> layouts{*ld};
  for (const TileArg& in : ep.inputs)
    if (auto* r = std::get_if<BufferRegion>(&in)) {
      auto l = region_layout(*r, *ctx.env, &why, {.allow_swizzle = true});
      if (!l) return operand_reason(*r, why);
      auto b = broadcast_to(*l, target, &why);
      if (!b) return operand_reason(*r, why + " (destination " + dst.buffer->name + ")");
      srcs.push_back(r);
      layouts.push_back(*b);
    }
  std::vector<std::vector<Iter>> flats;
  for (auto& l : layouts) flats.push_back(l.flat());
  std::int64_t n = dst.numel();
  auto joint = joint_refine(flats, n, &why);
  if (!joint) return why;
  std::vector<JointIter> iters = coalesce(*joint);

  // Operands read or written as vectors: those contiguous in the innermost iter.
  std::vector<std::size_t> vectorized{0};
  std::vector<bool> scalar_broadcast(layouts.size(), false);
  std::vector<Expr> bases;
  for (auto& l : layouts) bases.push_back(l.mem_offset);
  bool inner_strided = false;
  for (std::size_t i = 1; i < layouts.size(); ++i) {
    std::int64_t s = iters.empty() ? 0 : iters.back().parts[i].stride;
    if (s == 1)
      vectorized.push_back(i);
    else if (s == 0)
      scalar_broadcast[i] = true;
    else
      inner_strided = true;
  }
  std::int64_t threads = ctx.scope_threads;
  int esize = dst.buffer->dtype.bytes();
  for (const BufferRegion* s : srcs) esize = std::max(esize, s->buffer->dtype.bytes());
  // where= decides per element: one element per access.
  const bool where = static_cast<bool>(ctx.call->attrs.where);
  int vec = inner_strided || where
                ? 1
                : widest_vector(iters, vectorized, bases, esize, *ctx.env, [&](int v) {
                    for (std::size_t i : vectorized)
                      if (v > swizzle_vector_cap(layouts[i])) return false;
                    return n % v == 0;
                  });
  // Element counts per vector for each operand's own dtype (cast may change sizes).
  std::int64_t rounds = (n + threads * vec - 1) / (threads * vec);
  bool guarded = rounds * threads * vec != n;

  Expr rel = scope_thread_index(ctx.scope);
  Buffer fd = flat_view(dst.buffer);
  std::vector<Buffer> fs;
  for (const BufferRegion* s : srcs) fs.push_back(flat_view(s->buffer));

  auto round_body = [&](Expr f) -> Stmt {
    Expr idx = simplify(mul(add(mul(f, c32(threads)), rel), c32(vec)), ctx.env);
    std::vector<Expr> offs;
    for (std::size_t i = 0; i < layouts.size(); ++i) {
      // The swizzle applies to the whole pre-swizzle offset.
      Expr o = simplify(add(bases[i], joint_offset(iters, i, idx)), ctx.env);
      offs.push_back(layouts[i].swizzle ? simplify(swizzle_expr(*layouts[i].swizzle, o), ctx.env)
                                        : o);
    }
    if (vec == 1) {
      std::vector<Expr> loaded;
      std::size_t si = 0;
      for (const TileArg& in : ep.inputs) {
        if (auto* e = std::get_if<Expr>(&in)) {
          loaded.push_back(*e);
        } else {
          ++si;
          loaded.push_back(make_load(fs[si - 1], {offs[si]}));
        }
      }
      Expr value = elementwise_value(ep, loaded);
      if (where) {
        // idx is the element's row-major index in the destination region.
        std::vector<Expr> coords;
        std::int64_t inner = dst.numel();
        for (const Range& rg : dst.ranges) {
          inner /= rg.extent;
          coords.push_back(rg.extent == 1 ? c32(0) : mod(div(idx, c32(inner)), c32(rg.extent)));
        }
        // A guarded store, not a select that writes the old value back:
        // elements outside the condition are not touched at all, so two
        // scopes may fill disjoint parts of one tile at the same time.
        return make_if(simplify(where_condition(ctx.call, coords), ctx.env),
                       make_store(fd, value, {offs[0]}, ctx.call->loc));
      }
      return make_store(fd, value, {offs[0]}, ctx.call->loc);
    }
    // Vector path: stage each vectorized input in registers.
    std::vector<Stmt> body;
    std::vector<Buffer> staged(layouts.size());
    for (std::size_t i = 1; i < layouts.size(); ++i) {
      if (scalar_broadcast[i]) continue;
      staged[i] = scratch(i == 1 ? "in_vec" : "in" + std::to_string(i - 1) + "_vec",
                          srcs[i - 1]->buffer->dtype, vec);
      body.push_back(make_copy_bytes(staged[i], c32(0), fs[i - 1], offs[i],
                                     vec * srcs[i - 1]->buffer->dtype.bytes(), ctx.call->loc));
    }
    Buffer out = scratch("out_vec", dst.buffer->dtype, vec);
    Var v("v", i32);
    std::vector<Expr> loaded;
    std::size_t si = 0;
    for (const TileArg& in : ep.inputs) {
      if (auto* e = std::get_if<Expr>(&in)) {
        loaded.push_back(*e);
        continue;
      }
      ++si;
      loaded.push_back(scalar_broadcast[si] ? make_load(fs[si - 1], {offs[si]})
                                            : make_load(staged[si], {Expr(v)}));
    }
    body.push_back(make_for(v, c32(0), c32(vec), ForKind::unrolled,
                            make_store(out, elementwise_value(ep, loaded), {Expr(v)})));
    body.push_back(
        make_copy_bytes(fd, offs[0], out, c32(0), vec * dst.buffer->dtype.bytes(), ctx.call->loc));
    Stmt s = make_seq(body);
    s = make_allocate(out, s);
    for (std::size_t i = layouts.size(); i-- > 1;)
      if (staged[i]) s = make_allocate(staged[i], s);
    return s;
  };

  auto guard = [&](Expr f, Stmt s) {
    if (!guarded) return s;
    Expr idx = simplify(mul(add(mul(f, c32(threads)), rel), c32(vec)), ctx.env);
    return make_if(lt(idx, c32(n)), s);
  };
  Stmt s;
  if (rounds == 1) {
    s = guard(c32(0), round_body(c32(0)));
  } else {
    Var f("f", i32);
    s = make_for(f, c32(0), c32(rounds), ForKind::serial, guard(f, round_body(f)));
  }
  s = make_seq({s, scope_barrier(ctx.scope, ctx.call->loc)});
  return make_origin(origin_text(ctx, "elementwise/smem"), s, ctx.call->loc);
}

Check all_shared(const DispatchContext& ctx) { return operands_in(ctx, MemScope::shared); }

}  // namespace
}  // namespace tx::lowering::variants

namespace tx::lowering {

void register_elementwise_smem(Registry& r) {
  using namespace variants;
  // One registration for every op of the elementwise family (tile_op_table.hpp).
  Variant v;
  v.family = "elementwise";
  v.name = "smem";
  v.priority = 10;
  v.when = common_predicates_where();
  v.when.push_back({"all_shared", all_shared});
  v.plan = plan;
  r.add(v);
}

}  // namespace tx::lowering
