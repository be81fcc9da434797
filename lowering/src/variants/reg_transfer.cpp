// The register-side transfer that copy/reg and atomic/reg share (seed 002):
// the partition induced by the register layout. The joint refinement of
// both layouts gives iters that are either thread iters (which thread owns
// the element) or memory iters (which register). Thread iters become a
// per-thread base offset on the memory side; memory iters are the thread's
// private bundle. The vector width is chosen widest-first (16 bytes down)
// so that the bundle's contiguous tail divides it and every other stride
// and base offset is aligned; thread-axis strides of the register side are
// excluded from that check (they are thread coordinates, not addresses).
// The transfer is a serial loop of vector moves (atomic adds: one element
// each). A register source with thread replicas is written back by replica
// 0 only. With where=, each transfer is guarded by the condition at its
// first element's coordinates in the destination region; vectors then stay
// inside the region's innermost dimension, and a condition that reads the
// innermost coordinate makes every transfer a single element.
#include "reg_transfer.hpp"

#include "tx/ir_functor.hpp"

namespace tx::lowering::variants {

Check one_local(const DispatchContext& ctx) {
  const BufferRegion* dst = region_arg(ctx.call, 0);
  const BufferRegion* src = region_arg(ctx.call, 1);
  bool dl = dst->buffer->scope == MemScope::local, sl = src->buffer->scope == MemScope::local;
  if (dl == sl)
    return dl ? operand_reason(*dst, "both operands are local (register-to-register copy)")
              : operand_reason(*dst, std::string("scope ") + mem_scope_name(dst->buffer->scope) +
                                         " != local, and neither operand is local");
  return ok();
}

namespace {

struct ThreadPart {
  std::int64_t extent, nstride, mem_stride, idx_stride;
};

}  // namespace

Plan plan_register_transfer(const DispatchContext& ctx, const RegisterTransfer& how) {
  const BufferRegion& dst = *region_arg(ctx.call, 0);
  const BufferRegion& src = *region_arg(ctx.call, 1);
  bool r_is_dst = dst.buffer->scope == MemScope::local;
  const BufferRegion& R = r_is_dst ? dst : src;
  const BufferRegion& M = r_is_dst ? src : dst;
  std::string why;
  auto lr = region_layout(R, *ctx.env, &why);
  if (!lr) return operand_reason(R, why);
  auto lm = region_layout(partial_view(ctx, M), *ctx.env, &why, {.allow_swizzle = true});
  if (!lm) return operand_reason(M, why);
  for (int a = 1; a < kNumAxes; ++a)
    if (lr->thread_offset[a] != 0)
      return operand_reason(R, std::string("region selects a subset of the threads (") +
                                   axis_name(static_cast<Axis>(a)) + " offset " +
                                   std::to_string(lr->thread_offset[a]) + ")");
  std::int64_t n = R.numel();
  // A partial= tile that may reach past the tensor's end: the region's own
  // row-major index rides along as a third operand, so each transfer knows
  // its coordinates and is guarded (a load past the end yields zeros).
  const bool masked = partial_inside(ctx, M, c32(0)).defined();
  // where=: the same index gives the destination's coordinates.
  const bool where = static_cast<bool>(ctx.call->attrs.where);
  const bool indexed = masked || where;
  std::vector<std::vector<Iter>> operands = {lr->flat(), lm->flat()};
  if (indexed) operands.push_back({Iter{n, 1, Axis::m}});
  auto joint = joint_refine(operands, n, &why);
  if (!joint) return operand_reason(M, why);

  // Split the joint iters into thread iters and the per-thread bundle.
  std::vector<ThreadIter> cover;
  std::vector<ThreadPart> threads;
  std::vector<JointIter> bundle;
  std::array<std::int64_t, kNumAxes> axis_max{};
  auto thread_iter = [&](const Iter& it, std::int64_t extent, bool replica) -> std::string {
    auto mult = thread_axis_multiplier(it.axis, ctx.scope);
    if (!mult)
      return operand_reason(R, std::string("register layout uses axis ") + axis_name(it.axis) +
                                   ", which is not a thread axis of a " +
                                   exec_scope_name(ctx.scope) + " scope");
    axis_max[static_cast<int>(it.axis)] += (extent - 1) * it.stride;
    cover.push_back({extent, it.stride * *mult, replica});
    return {};
  };
  for (const JointIter& j : *joint) {
    const Iter& rp = j.parts[0];
    if (rp.axis == Axis::m) {
      bundle.push_back(j);
      continue;
    }
    if (auto e = thread_iter(rp, j.extent, false); !e.empty()) return e;
    threads.push_back(
        {j.extent, cover.back().stride, j.parts[1].stride, indexed ? j.parts[2].stride : 0});
  }
  std::vector<ThreadIter> replicas;
  for (const Iter& it : lr->replica) {
    if (it.axis == Axis::m) return operand_reason(R, "memory replicas are not supported");
    if (auto e = thread_iter(it, it.extent, true); !e.empty()) return e;
    replicas.push_back(cover.back());
  }
  for (int a = 1; a < kNumAxes; ++a)
    if (axis_max[a] >= axis_limit(static_cast<Axis>(a), ctx.cta_threads))
      return operand_reason(R, std::string("register layout reaches ") +
                                   axis_name(static_cast<Axis>(a)) + " " +
                                   std::to_string(axis_max[a]) + ", past its range");
  // A tile with no thread axes is held whole by every thread of the scope.
  if (cover.empty() && ctx.scope_threads > 1) {
    cover.push_back({ctx.scope_threads, 1, true});
    replicas.push_back(cover.back());
  }
  if (auto e = check_thread_cover(cover, ctx.scope_threads, R.buffer->layout.str()))
    return operand_reason(R, *e);

  // Base offsets: the register side is per thread; the memory side moves with the thread.
  Expr rel = scope_thread_index(ctx.scope);
  Expr r_base = lr->mem_offset;
  Expr m_base = lm->mem_offset;
  Expr i_base = c32(0);
  for (const ThreadPart& t : threads) {
    m_base = add(m_base, mul(thread_coord(rel, t.nstride, t.extent), c32(t.mem_stride)));
    if (indexed)
      i_base = add(i_base, mul(thread_coord(rel, t.nstride, t.extent), c32(t.idx_stride)));
  }

  std::vector<JointIter> atoms = coalesce(bundle);
  int esize = R.buffer->dtype.bytes();
  bool where_reads_innermost = false;
  if (where) {
    std::vector<Expr> probe(dst.ranges.size(), c32(0));
    Var inner("inner", i32);
    probe.back() = inner;
    where_reads_innermost = expr_uses_var(where_condition(ctx.call, probe), inner);
  }
  int vec = widest_vector(atoms, {0, 1}, {r_base, lm->mem_offset}, esize, *ctx.env, [&](int v) {
    if (how.atomic_add && v > 1) return false;  // an atomic per element
    if (v > swizzle_vector_cap(*lm)) return false;
    for (const ThreadPart& t : threads)
      if (t.mem_stride % v != 0) return false;
    // A masked transfer is all inside or all outside: rows hold whole vectors.
    if (masked && M.buffer->shape.back() % v != 0) return false;
    // where= decides per vector: its elements share every coordinate but the
    // innermost one, which the condition must not read.
    if (where && (where_reads_innermost || dst.ranges.back().extent % v != 0 || atoms.empty() ||
                  atoms.back().parts[2].stride != 1))
      return false;
    return true;
  });

  // Outer atoms: the bundle with its contiguous tail divided by the vector.
  std::vector<std::int64_t> ext, rs, ms, is;
  for (std::size_t k = 0; k < atoms.size(); ++k) {
    std::int64_t e = atoms[k].extent;
    std::int64_t r = atoms[k].parts[0].stride, m = atoms[k].parts[1].stride;
    std::int64_t x = indexed ? atoms[k].parts[2].stride : 0;
    if (k + 1 == atoms.size() && vec > 1) {
      e /= vec;
      r *= vec;
      m *= vec;
      x *= vec;
    }
    if (e == 1) continue;
    ext.push_back(e);
    rs.push_back(r);
    ms.push_back(m);
    is.push_back(x);
  }
  std::int64_t total = 1;
  for (auto e : ext) total *= e;

  Buffer fr = flat_view(R.buffer), fm = flat_view(M.buffer);
  auto body = [&](Expr f) {
    Expr ro = simplify(add(r_base, mixed_radix_offset(f, ext, rs)), ctx.env);
    // The swizzle (if any) applies to the whole pre-swizzle offset.
    Expr mo = add(m_base, mixed_radix_offset(f, ext, ms));
    if (lm->swizzle) mo = swizzle_expr(*lm->swizzle, mo);
    mo = simplify(mo, ctx.env);
    Stmt move =
        how.atomic_add
            ? make_evaluate(make_call(Intrinsic::atomic_add,
                                      {make_load(fm, {mo}, ctx.call->loc), make_load(fr, {ro})},
                                      ctx.call->loc),
                            ctx.call->loc)
        : r_is_dst ? make_copy_bytes(fr, ro, fm, mo, vec * esize, ctx.call->loc)
                   : make_copy_bytes(fm, mo, fr, ro, vec * esize, ctx.call->loc);
    if (!indexed) return move;
    const Expr idx = add(i_base, mixed_radix_offset(f, ext, is));
    Expr keep;  // where=: the destination's element (the vector's first) is written
    if (where) {
      std::vector<Expr> coords;
      std::int64_t inner = n;
      for (const Range& rg : dst.ranges) {
        inner /= rg.extent;
        coords.push_back(rg.extent == 1 ? c32(0) : mod(div(idx, c32(inner)), c32(rg.extent)));
      }
      keep = simplify(where_condition(ctx.call, coords), ctx.env);
    }
    Stmt guarded = move;
    if (masked) {
      Expr inside = partial_inside(ctx, M, idx);
      if (!r_is_dst) {
        guarded = make_if(inside, move);
      } else {
        // Past the end: the registers read zero, as the TMA fills a box.
        DType t = R.buffer->dtype;
        Expr zero = t.is_float() ? make_float(0.0, t) : make_int(0, t);
        std::vector<Stmt> zeros;
        for (int e = 0; e < vec; ++e)
          zeros.push_back(make_store(fr, zero, {simplify(add(ro, c32(e)), ctx.env)}));
        guarded = make_if(inside, move, make_seq(zeros));
      }
    }
    return keep.defined() ? make_if(keep, guarded) : guarded;
  };
  Stmt s;
  if (total == 1) {
    s = body(c32(0));
  } else {
    Var f("f", i32);
    // Unrolled up to 64 transfers: indexed by a loop variable, the register
    // array would live in local memory (a GEMM's accumulator, say).
    s = make_for(f, c32(0), c32(total), total <= 64 ? ForKind::unrolled : ForKind::serial, body(f));
  }
  if (!r_is_dst && !replicas.empty()) {
    Expr first = make_bool(true);
    for (const ThreadIter& t : replicas)
      first = land(first, eq(thread_coord(rel, t.stride, t.extent), c32(0)));
    s = make_if(simplify(first, ctx.env), s);
  }
  return make_origin(origin_text(ctx, how.origin), s, ctx.call->loc);
}

}  // namespace tx::lowering::variants
