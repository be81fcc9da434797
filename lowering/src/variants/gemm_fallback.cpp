// gemm/fallback [0]: D = A B (+ D with accum) for any scope, dtype and
// layouts, as FMA loops; with a warning on a GPU target.
//
// Accepts: any target; any scope with all its threads active; D (M, N),
// A (M, K), B (K, N) (or (N, K) with transpose_b) as 2-D regions (leading extents 1) in any memory,
// in any layout. It exists so that every gemm call has a correct path: shapes and dtypes the
// tensor-core variants refuse, and the host, which runs no PTX (there it is the path, and says
// nothing).
//
// Algorithm, D in registers spread over the scope's threads (an MMA
// fragment: wgmma_c, mma_c) and A, B in memory: each thread computes its own
// elements of D in place, where the register layout puts them (the layout's
// joint refinement with D's row-major index gives each register's (i, j)).
// No staging and no barrier: this is the host's path for warp and warpgroup
// MMA kernels, whose accumulators (64 x 256 f32 per warpgroup) would not fit
// in shared scratch. With A in registers too (wgmma's register A: attention's
// P V), A alone is staged through shared scratch, then D is updated in place.
//
// Otherwise: register operands spread over the scope's threads are first
// copied into per-group shared scratch (the copy dispatch picks the variant,
// so any fragment layout works), then a barrier; each thread of the scope
// computes the elements d = rel, rel + threads, ... of D (all of them when D
// is a thread's own registers): acc = (accum ? D[i, j] : 0) + sum over k in
// increasing order of A[i, k] B[k, j], in f32 for 16-bit and fp8 inputs (f64
// if any operand is f64), rounded once to D's dtype. A staged D is copied
// back after a barrier; inside a loop, whenever anything was staged, the op
// ends with a barrier, so the next trip's staging cannot overwrite scratch
// another thread still reads.
#include <mutex>
#include <set>

#include "common.hpp"
#include "tx/printer.hpp"

namespace tx::lowering::variants {

namespace {

bool spread(const BufferRegion& r) {
  return r.buffer->scope == MemScope::local && r.buffer->layout.has_thread_axes();
}

DType accumulate_in(const std::vector<const BufferRegion*>& ops) {
  bool any_f64 = false, all_float = true;
  for (const BufferRegion* r : ops) {
    any_f64 = any_f64 || r->buffer->dtype == f64;
    all_float = all_float && r->buffer->dtype.is_float();
  }
  if (!all_float) return ops[0]->buffer->dtype;
  return any_f64 ? f64 : f32;
}

// Memory offset of (row, col) of a matrix region (leading extents 1).
Expr matrix_offset(const RegionLayout& l, const Expr& row, const Expr& col) {
  std::vector<Expr> coords(l.extents.size(), c32(0));
  coords[coords.size() - 2] = row;
  coords[coords.size() - 1] = col;
  return address(l, offset_of_coords(l.dims, coords));
}

// On a GPU, once per call site (a kernel rebuilt in a loop should not flood
// the log): the FMA loops are far slower than the tensor cores.
void warn_once(const DispatchContext& ctx) {
  if (!ctx.target.is_cuda()) return;
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
         ": no tensor-core gemm variant applies; using gemm/fallback (FMA loops)");
}

// acc = (accum ? D[d_off] : 0) + sum_k A[i, k] B[k, j] (B[j, k] with
// transpose_b), stored to D[d_off].
Stmt element_update(const Buffer& fd, const Expr& d_off, const Buffer& fa, const RegionLayout& la,
                    const Buffer& fb, const RegionLayout& lb, bool transpose_b, const Expr& i,
                    const Expr& j, std::int64_t K, DType acc_t, bool accum, const Buffer& acc,
                    const Env* env) {
  Var k("k", i32);
  Expr old = make_cast(acc_t, make_load(fd, {d_off}));
  Expr b_off = transpose_b ? matrix_offset(lb, j, k) : matrix_offset(lb, k, j);
  Expr prod = make_binary(BinOp::Mul,
                          make_cast(acc_t, make_load(fa, {simplify(matrix_offset(la, i, k), env)})),
                          make_cast(acc_t, make_load(fb, {simplify(b_off, env)})));
  Expr cur = make_load(acc, {c32(0)});
  return make_seq({
      make_store(acc,
                 accum ? old : (acc_t.is_float() ? make_float(0.0, acc_t) : make_int(0, acc_t)),
                 {c32(0)}),
      make_for(k, c32(0), c32(K), ForKind::serial,
               make_store(acc, make_binary(BinOp::Add, cur, prod), {c32(0)})),
      make_store(fd, make_cast(fd->dtype, cur), {d_off}),
  });
}

// D a register fragment, A and B in memory: every thread updates its own
// registers. The joint refinement of D's layout with D's row-major index
// splits that index into thread iters (a per-thread base) and register
// iters (the thread's loop), as copy/reg splits a copy.
Plan in_place_fragment(const DispatchContext& ctx, const BufferRegion& D, const BufferRegion& A,
                       const BufferRegion& B, std::int64_t N, std::int64_t K) {
  std::string why;
  auto ld = region_layout(D, *ctx.env, &why);
  if (!ld) return operand_reason(D, why);
  auto la = region_layout(A, *ctx.env, &why, {.allow_swizzle = true});
  if (!la) return operand_reason(A, why);
  auto lb = region_layout(B, *ctx.env, &why, {.allow_swizzle = true});
  if (!lb) return operand_reason(B, why);
  for (int a = 1; a < kNumAxes; ++a)
    if (ld->thread_offset[a] != 0)
      return operand_reason(D, std::string("region selects a subset of the threads (") +
                                   axis_name(static_cast<Axis>(a)) + " offset " +
                                   std::to_string(ld->thread_offset[a]) + ")");
  const std::int64_t n = D.numel();
  auto joint = joint_refine({ld->flat(), {Iter{n, 1, Axis::m}}}, n, &why);
  if (!joint) return operand_reason(D, why);

  std::vector<ThreadIter> cover;
  Expr rel = scope_thread_index(ctx.scope);
  Expr lin_base = c32(0);
  std::vector<std::int64_t> ext, rs, cs;  // the thread's registers: extent, register, index strides
  auto thread_iter = [&](const Iter& it, std::int64_t extent, bool replica) -> std::string {
    auto mult = thread_axis_multiplier(it.axis, ctx.scope);
    if (!mult)
      return operand_reason(D, std::string("register layout uses axis ") + axis_name(it.axis) +
                                   ", which is not a thread axis of a " +
                                   exec_scope_name(ctx.scope) + " scope");
    cover.push_back({extent, it.stride * *mult, replica});
    return {};
  };
  for (const JointIter& j : *joint) {
    const Iter& rp = j.parts[0];
    if (rp.axis == Axis::m) {
      ext.push_back(j.extent);
      rs.push_back(rp.stride);
      cs.push_back(j.parts[1].stride);
      continue;
    }
    if (auto e = thread_iter(rp, j.extent, false); !e.empty()) return e;
    lin_base = add(lin_base,
                   mul(thread_coord(rel, cover.back().stride, j.extent), c32(j.parts[1].stride)));
  }
  for (const Iter& it : ld->replica) {
    if (it.axis == Axis::m) return operand_reason(D, "memory replicas are not supported");
    if (auto e = thread_iter(it, it.extent, true); !e.empty()) return e;
  }
  if (auto e = check_thread_cover(cover, ctx.scope_threads, D.buffer->layout.str()))
    return operand_reason(D, *e);

  std::int64_t total = 1;
  for (auto e : ext) total *= e;
  Var f("f", i32);
  Expr lin = add(lin_base, mixed_radix_offset(f, ext, cs));
  Expr d_off = simplify(add(ld->mem_offset, mixed_radix_offset(f, ext, rs)), ctx.env);
  // The register's (row, col) of D, bound once per register.
  Var i("row", i32), j("col", i32);
  DType acc_t = accumulate_in({&D, &A, &B});
  Buffer acc = scratch("gemm_acc", acc_t, 1);
  Stmt update = element_update(flat_view(D.buffer), d_off, flat_view(A.buffer), *la,
                               flat_view(B.buffer), *lb, ctx.call->attrs.transpose_b, i, j, K,
                               acc_t, ctx.call->attrs.accum, acc, ctx.env);
  update = make_let(i, simplify(div(lin, c32(N)), ctx.env),
                    make_let(j, simplify(mod(lin, c32(N)), ctx.env), update));
  Stmt s = make_allocate(acc, make_for(f, c32(0), c32(total), ForKind::serial, update));
  return make_origin(origin_text(ctx, "gemm/fallback (in registers)"), s, ctx.call->loc);
}

Plan plan(const DispatchContext& ctx) {
  const BufferRegion& D0 = *region_arg(ctx.call, 0);
  const BufferRegion& A0 = *region_arg(ctx.call, 1);
  const BufferRegion& B0 = *region_arg(ctx.call, 2);
  auto [M, N] = *matrix_extents(D0);
  const std::int64_t K = matrix_extents(A0)->second;
  if (spread(D0) && !spread(A0) && !spread(B0)) {
    warn_once(ctx);
    return in_place_fragment(ctx, D0, A0, B0, N, K);
  }
  const std::int64_t threads = ctx.scope_threads;
  const std::int64_t groups = std::max<std::int64_t>(1, ctx.cta_threads / threads);
  Expr group = threads >= ctx.cta_threads || ctx.scope == ExecScope::thread
                   ? c32(0)
                   : div(scope_thread_index(ExecScope::cta), c32(threads));

  std::vector<Stmt> pre, post;
  std::vector<Buffer> allocs;
  std::vector<Stmt> keep;  // synthesized calls live until dispatch is done
  // Stages region r into shared scratch (this group's slice), returning the
  // scratch region; `in` copies r -> scratch first, `out` copies back after.
  auto stage = [&](const BufferRegion& r, const std::string& name, bool in,
                   bool out) -> std::variant<BufferRegion, std::string> {
    auto [rows, cols] = *matrix_extents(r);
    Buffer s = make_buffer(name, r.buffer->dtype, {groups, rows, cols}, MemScope::shared,
                           std::nullopt, ctx.call->loc);
    allocs.push_back(s);
    BufferRegion sr{s, {Range{group, 1}, Range{c32(0), rows}, Range{c32(0), cols}}};
    auto copy = [&](const BufferRegion& dst, const BufferRegion& src) -> std::string {
      Stmt call = make_tile_call("copy", ctx.scope, {dst, src}, {}, ctx.call->loc);
      keep.push_back(call);
      DispatchContext c = ctx;
      c.call = call.as<TileCallNode>();
      c.mask_symbolic = false;
      try {
        DispatchResult res = dispatch(c);
        (dst.buffer.same_as(s) ? pre : post).push_back(res.lowered);
      } catch (const Error& e) {
        return operand_reason(r, std::string("cannot stage through shared memory: ") + e.what());
      }
      return {};
    };
    if (in)
      if (std::string e = copy(sr, r); !e.empty()) return e;
    if (out)
      if (std::string e = copy(r, sr); !e.empty()) return e;
    return sr;
  };

  // A in registers (wgmma's register A, mma's A fragment) and D a fragment:
  // A goes through scratch, then every thread updates its own D in place.
  if (spread(D0) && spread(A0) && !spread(B0)) {
    auto sa = stage(A0, "gemm_a", true, false);
    if (auto* e = std::get_if<std::string>(&sa)) return *e;
    Plan inner = in_place_fragment(ctx, D0, std::get<BufferRegion>(sa), B0, N, K);
    if (auto* e = std::get_if<std::string>(&inner)) return *e;
    std::vector<Stmt> body = pre;
    body.push_back(scope_barrier(ctx.scope, ctx.call->loc));
    body.push_back(std::get<Stmt>(inner));
    // The next call may stage into the same scratch: every thread is done reading.
    body.push_back(scope_barrier(ctx.scope, ctx.call->loc));
    Stmt s = make_seq(body);
    for (const Buffer& b : allocs) s = make_allocate(b, s);
    warn_once(ctx);
    return s;
  }

  const bool accum = ctx.call->attrs.accum;
  BufferRegion D = D0, A = A0, B = B0;
  bool staged_d = false;
  for (auto [r, src, name] : {std::tuple{&A, &A0, "gemm_a"}, std::tuple{&B, &B0, "gemm_b"}})
    if (spread(*src)) {
      auto s = stage(*src, name, true, false);
      if (auto* e = std::get_if<std::string>(&s)) return *e;
      *r = std::get<BufferRegion>(s);
    }
  if (spread(D0)) {
    auto s = stage(D0, "gemm_d", accum, true);
    if (auto* e = std::get_if<std::string>(&s)) return *e;
    D = std::get<BufferRegion>(s);
    staged_d = true;
  }

  std::string why;
  auto ld = region_layout(D, *ctx.env, &why, {.allow_swizzle = true});
  if (!ld) return operand_reason(D, why);
  auto la = region_layout(A, *ctx.env, &why, {.allow_swizzle = true});
  if (!la) return operand_reason(A, why);
  auto lb = region_layout(B, *ctx.env, &why, {.allow_swizzle = true});
  if (!lb) return operand_reason(B, why);

  DType acc_t = accumulate_in({&D0, &A0, &B0});
  Buffer fd = flat_view(D.buffer), fa = flat_view(A.buffer), fb = flat_view(B.buffer);
  // A thread's own D (registers every thread keeps whole): each computes all.
  const bool private_d = D.buffer->scope == MemScope::local;
  const std::int64_t workers = private_d ? 1 : threads;
  Expr rel = private_d ? c32(0) : scope_thread_index(ctx.scope);
  Var q("q", i32);
  Expr e = workers == 1 ? Expr(q) : add(mul(q, c32(workers)), rel);
  Expr i = div(e, c32(N)), j = mod(e, c32(N));
  Buffer acc = scratch("gemm_acc", acc_t, 1);
  Expr d_off = simplify(matrix_offset(*ld, i, j), ctx.env);
  Stmt elem = element_update(fd, d_off, fa, *la, fb, *lb, ctx.call->attrs.transpose_b, i, j, K,
                             acc_t, accum, acc, ctx.env);
  const std::int64_t total = M * N;
  const std::int64_t rounds = (total + workers - 1) / workers;
  if (rounds * workers != total) elem = make_if(lt(e, c32(total)), elem);
  Stmt compute = make_allocate(acc, make_for(q, c32(0), c32(rounds), ForKind::serial, elem));

  std::vector<Stmt> body = pre;
  const bool shared_d = D.buffer->scope != MemScope::local;
  if (!pre.empty()) body.push_back(scope_barrier(ctx.scope, ctx.call->loc));
  body.push_back(compute);
  if (staged_d || (shared_d && ctx.scope != ExecScope::thread))
    body.push_back(scope_barrier(ctx.scope, ctx.call->loc));
  for (const Stmt& s : post) body.push_back(s);
  if (ctx.in_loop && !allocs.empty()) body.push_back(scope_barrier(ctx.scope, ctx.call->loc));
  Stmt s = make_seq(body);
  for (const Buffer& b : allocs) s = make_allocate(b, s);

  warn_once(ctx);
  return make_origin(origin_text(ctx, "gemm/fallback"), s, ctx.call->loc);
}

}  // namespace
}  // namespace tx::lowering::variants

namespace tx::lowering {

void register_gemm_fallback(Registry& r) {
  using namespace variants;
  Variant v;
  v.family = "gemm";
  v.name = "fallback";
  v.priority = 0;
  v.when = common_predicates();
  v.when.push_back({"gemm_operands", gemm_operands});
  v.plan = plan;
  r.add("gemm", v);
}

}  // namespace tx::lowering
