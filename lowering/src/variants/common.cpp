#include "common.hpp"

#include "reduce_common.hpp"
#include "tx/ir_functor.hpp"
#include "tx/printer.hpp"

namespace tx::lowering::variants {

const BufferRegion* region_arg(const TileCallNode* call, std::size_t i) {
  if (i >= call->args.size()) return nullptr;
  return std::get_if<BufferRegion>(&call->args[i]);
}

std::vector<const BufferRegion*> region_args(const TileCallNode* call) {
  std::vector<const BufferRegion*> out;
  for (const TileArg& a : call->args)
    if (auto* r = std::get_if<BufferRegion>(&a)) out.push_back(r);
  return out;
}

std::string operand_reason(const BufferRegion& r, const std::string& what) {
  return "operand " + r.buffer->name + ": " + what;
}

Check scope_fits_cta(const DispatchContext& ctx) {
  if (ctx.scope_threads > ctx.cta_threads || ctx.cta_threads % ctx.scope_threads != 0)
    return std::string(exec_scope_name(ctx.scope)) + " scope needs a multiple of " +
           std::to_string(ctx.scope_threads) + " threads but the CTA has " +
           std::to_string(ctx.cta_threads);
  return ok();
}

namespace {
Check guards_at_least(const DispatchContext& ctx, Uniformity need) {
  for (const Guard& g : ctx.guards)
    if (static_cast<int>(g.level) < static_cast<int>(need)) {
      std::string why = std::string("not all threads of the ") + exec_scope_name(ctx.scope) +
                        " are active: the guard `" + g.text + "` at " + g.loc.str() +
                        " varies per " + uniformity_name(g.level) + ", which splits a " +
                        exec_scope_name(ctx.scope);
      // The destination is the operand the partial group would leave half written.
      const BufferRegion* dst = region_arg(ctx.call, 0);
      return dst ? operand_reason(*dst, why) : why;
    }
  return ok();
}
}  // namespace

Check all_threads_active(const DispatchContext& ctx) {
  return guards_at_least(ctx, scope_level(ctx.scope));
}

Check whole_warps_active(const DispatchContext& ctx) {
  const Uniformity need = scope_level(ctx.scope);
  return guards_at_least(
      ctx, static_cast<int>(need) < static_cast<int>(Uniformity::warp) ? need : Uniformity::warp);
}

std::vector<std::pair<std::string, Predicate>> per_warp_predicates(
    std::vector<std::pair<std::string, Predicate>> p) {
  for (auto& [name, check] : p)
    if (name == "all_threads_active") {
      name = "whole_warps_active";
      check = whole_warps_active;
    }
  return p;
}

Check operands_in(const DispatchContext& ctx, MemScope scope) {
  for (const BufferRegion* r : region_args(ctx.call))
    if (r->buffer->scope != scope)
      return operand_reason(*r, std::string("scope ") + mem_scope_name(r->buffer->scope) +
                                    " != " + mem_scope_name(scope));
  return ok();
}

namespace {
Check in_bounds(const DispatchContext& ctx, bool masks_partial_tiles) {
  for (const BufferRegion* r : region_args(ctx.call)) {
    const bool partial = ctx.call->attrs.partial && r->buffer->scope == MemScope::global;
    for (std::size_t d = 0; d < r->ranges.size(); ++d) {
      Interval s = ctx.env->bound(r->ranges[d].start);
      std::int64_t dim = r->buffer->shape[d];
      // An extent known at launch: the region may reach past it, only its
      // start must be inside. A flat buffer's copy is predicated
      // (lower_tile_ops); a (tokens, heads, dim) buffer's is masked by a
      // variant that masks partial tiles, against the T::dim variable.
      if (!r->buffer->dims[d].as<IntImmNode>()) {
        if (s.lo < 0)
          return operand_reason(*r,
                                "region in dimension " + std::to_string(d) + " may start below 0");
        // (A symbolic inner extent is symbolic_regions_flat's to refuse.)
        bool inner_symbolic = false;
        for (std::size_t e = 1; e < r->buffer->dims.size(); ++e)
          inner_symbolic = inner_symbolic || !r->buffer->dims[e].as<IntImmNode>();
        if (r->buffer->dims.size() > 1 && !inner_symbolic && !(partial && masks_partial_tiles))
          return operand_reason(
              *r, "the region may reach past dimension " + std::to_string(d) +
                      ", whose extent is known at launch: " +
                      (partial ? std::string("this variant does not mask")
                               : std::string("pass partial=true (the copy is then masked)")));
        continue;
      }
      if (partial && s.lo >= 0 && s.hi + r->ranges[d].extent > dim) {
        if (masks_partial_tiles) continue;
        return operand_reason(*r, "partial tile: the region may reach past the extent " +
                                      std::to_string(dim) + " in dimension " + std::to_string(d) +
                                      ", and this variant does not mask");
      }
      if (s.lo < 0 || s.hi + r->ranges[d].extent > dim) {
        std::string range = s.bounded() ? "[" + std::to_string(s.lo) + ", " +
                                              std::to_string(s.hi + r->ranges[d].extent) + ")"
                                        : "an unbounded range";
        return operand_reason(*r, "region in dimension " + std::to_string(d) + " may cover " +
                                      range + ", outside the extent " + std::to_string(dim));
      }
    }
  }
  return ok();
}
}  // namespace

Check regions_in_bounds(const DispatchContext& ctx) { return in_bounds(ctx, false); }

BufferRegion partial_view(const DispatchContext& ctx, const BufferRegion& r) {
  const Buffer& b = r.buffer;
  if (!ctx.call->attrs.partial || b->scope != MemScope::global || b->symbolic() ||
      !(b->layout == TileLayout::row_major(b->shape)))
    return r;
  std::vector<std::int64_t> shape = b->shape;
  bool wider = false;
  for (std::size_t d = 0; d < shape.size(); ++d)
    if (r.ranges[d].extent > shape[d]) {
      shape[d] = r.ranges[d].extent;
      wider = true;
    }
  if (!wider) return r;
  std::vector<Iter> iters;
  std::int64_t stride = 1;
  std::vector<Iter> rev;
  for (std::size_t d = shape.size(); d-- > 0;) {
    rev.push_back(Iter{shape[d], stride, Axis::m});
    stride *= b->shape[d];
  }
  iters.assign(rev.rbegin(), rev.rend());
  std::vector<Expr> dims;
  for (std::int64_t e : shape) dims.push_back(c32(e));
  Buffer view(std::make_shared<const BufferNode>(b->name, b->dtype, shape, b->scope,
                                                 TileLayout(iters), b->data, b->loc, dims));
  return BufferRegion{view, r.ranges};
}

Expr partial_inside(const DispatchContext& ctx, const BufferRegion& r, const Expr& idx) {
  if (!ctx.call->attrs.partial || r.buffer->scope != MemScope::global) return Expr();
  Expr cond;
  std::int64_t inner = 1;
  for (std::size_t d = r.ranges.size(); d-- > 0;) {
    const std::int64_t e = r.ranges[d].extent, dim = r.buffer->shape[d];
    Interval s = ctx.env->bound(r.ranges[d].start);
    // An extent known at launch (the first of a (tokens, heads, dim) buffer)
    // is compared with its T::dim variable.
    const bool at_launch = !r.buffer->dims[d].as<IntImmNode>();
    if (at_launch || !(s.bounded() && s.hi + e <= dim)) {
      Expr coord = e == 1 ? c32(0) : mod(div(idx, c32(inner)), c32(e));
      Expr in = lt(add(r.ranges[d].start, coord), at_launch ? r.buffer->dims[d] : c32(dim));
      cond = cond.defined() ? land(in, cond) : in;
    }
    inner *= e;
  }
  return cond.defined() ? simplify(cond, ctx.env) : cond;
}
Check regions_in_bounds_or_masked(const DispatchContext& ctx) { return in_bounds(ctx, true); }

std::vector<std::pair<std::string, Predicate>> common_predicates_masking() {
  auto p = common_predicates();
  for (auto& [name, check] : p)
    if (name == "regions_in_bounds") check = regions_in_bounds_or_masked;
  return p;
}

// Layouts of buffers with extents known at launch are exact when only the
// first extent is symbolic: the row-major strides are products of the
// others (a (tokens, heads, dim) buffer). A symbolic inner extent makes the
// strides products of T::dim variables, which the layout algebra does not take.
Check symbolic_regions_flat(const DispatchContext& ctx) {
  for (const BufferRegion* r : region_args(ctx.call)) {
    if (!r->buffer->symbolic()) continue;
    for (std::size_t d = 1; d < r->buffer->dims.size(); ++d)
      if (!r->buffer->dims[d].as<IntImmNode>())
        return operand_reason(*r,
                              "tile primitives take buffers with extents known at launch in one "
                              "dimension only, the first (declare it flat, or use element "
                              "access)");
  }
  return ok();
}

std::vector<std::pair<std::string, Predicate>> common_predicates() {
  return {{"scope_fits_cta", scope_fits_cta},
          {"all_threads_active", all_threads_active},
          {"regions_in_bounds", regions_in_bounds},
          {"symbolic_regions_flat", symbolic_regions_flat},
          {"no_where", no_where}};
}

Check no_where(const DispatchContext& ctx) {
  if (ctx.call->attrs.where)
    return std::string("does not take where= (a condition on the coordinates)");
  return ok();
}

std::vector<std::pair<std::string, Predicate>> common_predicates_where() {
  auto p = common_predicates();
  std::erase_if(p, [](const auto& c) { return c.first == "no_where"; });
  return p;
}

std::vector<Iter> coordinate_iters(const BufferRegion& r) {
  std::vector<Iter> out;
  std::int64_t weight = 1;
  for (std::size_t d = r.ranges.size(); d-- > 0;) {
    const std::int64_t e = r.ranges[d].extent;
    if (e > 1) out.insert(out.begin(), Iter{e, weight, Axis::m});
    weight *= e;
  }
  return out;
}

RegionCoordinates::RegionCoordinates(const BufferRegion& r) {
  std::int64_t weight = 1;
  extents_.resize(r.ranges.size());
  weights_.resize(r.ranges.size());
  for (std::size_t d = r.ranges.size(); d-- > 0;) {
    extents_[d] = r.ranges[d].extent;
    weights_[d] = weight;
    weight *= extents_[d];
  }
  coords_.assign(r.ranges.size(), c32(0));
}

void RegionCoordinates::add(std::int64_t stride, const Expr& digit) {
  if (stride == 0) return;
  for (std::size_t d = 0; d < extents_.size(); ++d)
    if (extents_[d] > 1 && stride >= weights_[d] && stride < weights_[d] * extents_[d]) {
      coords_[d] = lowering::add(coords_[d], mul(digit, c32(stride / weights_[d])));
      return;
    }
}

Expr where_condition(const TileCallNode* call, const std::vector<Expr>& coords) {
  if (!call->attrs.where) return Expr();
  struct Coords : IRMutator {
    const std::vector<Expr>* at = nullptr;
    using IRMutator::mutate_node;
    Expr mutate_node(const Expr& self, const CallNode* n) override {
      if (n->op == Intrinsic::tile_coord) {
        const auto d = static_cast<std::size_t>(as_const_int(n->args[0]).value_or(0));
        if (d >= at->size())
          fail("where=", "", n->loc, "a coordinate beyond the destination region's rank");
        return (*at)[d];
      }
      return IRMutator::mutate_node(self, n);
    }
  } m;
  m.at = &coords;
  return m.mutate(call->attrs.where.cond);
}

Buffer scratch(const std::string& name, DType dtype, std::int64_t n) {
  return make_buffer(name, dtype, {n}, MemScope::local, std::nullopt, {});
}

Stmt scope_barrier(ExecScope s, SourceLoc loc) {
  if (s == ExecScope::thread) return Stmt();
  return make_barrier(s, loc);
}

std::variant<ElementwisePlan, std::string> parse_elementwise(const DispatchContext& ctx) {
  const TileCallNode* call = ctx.call;
  ElementwisePlan plan;
  plan.spec = find_elementwise(call->op);
  if (!plan.spec) return "not an elementwise op";
  const ElementwiseSpec& spec = *plan.spec;
  const std::vector<TileArg> operands = call->operands();
  if (static_cast<int>(operands.size()) != spec.inputs() + 1)
    return "takes " + std::to_string(spec.inputs() + 1) + " operands, got " +
           std::to_string(operands.size());
  const BufferRegion* dst = std::get_if<BufferRegion>(&operands[0]);
  if (!dst) return "the destination must be a buffer region";
  plan.dst = *dst;
  DType dt = dst->buffer->dtype;
  std::vector<TileArg> inputs(operands.begin() + 1, operands.end());

  if (spec.name == "fill") {
    if (!std::holds_alternative<Expr>(inputs[0])) return "fill takes a scalar value";
  } else {
    // Float operands may mix dtypes (an f32 tile in, a bf16 tile out: the
    // math in f32, one rounding on store); integer ones must match.
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      auto* r = std::get_if<BufferRegion>(&inputs[i]);
      if (!r) continue;
      const DType it = r->buffer->dtype;
      if (!spec.converts() && it != dt && !(it.is_float() && dt.is_float()))
        return operand_reason(*r, "dtype " + it.name() + " differs from the destination's " +
                                      dt.name() + " (use Tx cast)");
    }
    if (spec.inputs() >= 2 && std::holds_alternative<Expr>(inputs[0])) {
      if (!spec.commutative())
        return "operand 1 is a scalar; " + spec.name +
               " is not commutative, so its left operand must be a tile";
      std::swap(inputs[0], inputs[1]);
    }
    if (spec.inputs() >= 1 && spec.name != "fma") {
      bool any_region = false;
      for (auto& in : inputs) any_region |= std::holds_alternative<BufferRegion>(in);
      if (!any_region) return "needs at least one tile input";
    }
  }
  if (spec.float_only() && !dt.is_float())
    return "operand " + dst->buffer->name + ": " + spec.name + " needs a float dtype, got " +
           dt.name();
  if (dt.is_bool() && spec.name != "cast" && spec.name != "fill" && spec.name != "zero")
    return "operand " + dst->buffer->name + ": no arithmetic on bool tiles";
  const bool tile_scale = call->attrs.scale_arg >= 0, tile_bias = call->attrs.bias_arg >= 0;
  if ((call->attrs.scale || call->attrs.bias || tile_scale || tile_bias) &&
      !spec.accepts(TileAttr::scale_bias))
    return spec.name + " takes no scale/bias";
  // A tile scale / bias: a float region that broadcasts to the destination
  // (checked by the variant, like any input), loaded beside the op's inputs.
  plan.op_inputs = inputs.size();
  for (int at : {call->attrs.scale_arg, call->attrs.bias_arg}) {
    if (at < 0) continue;
    const auto& r = std::get<BufferRegion>(call->args[static_cast<std::size_t>(at)]);
    if (!r.buffer->dtype.is_float() || !dt.is_float())
      return operand_reason(r, std::string(at == call->attrs.scale_arg ? "scale" : "bias") +
                                   " tiles need float dtypes, got " + r.buffer->dtype.name() +
                                   " for a " + dt.name() + " destination");
    (at == call->attrs.scale_arg ? plan.scale_input : plan.bias_input) =
        static_cast<int>(inputs.size());
    inputs.emplace_back(r);
  }
  if ((!call->attrs.axes.empty() && !spec.accepts(TileAttr::axes)) ||
      (call->attrs.accum && !spec.accepts(TileAttr::accum)))
    return spec.name + " takes no axes/accum";
  plan.compute = compute_dtype(spec.converts() ? f32 : dt);
  if (!spec.converts() && dt.is_float())  // the widest of the operands' compute dtypes
    for (const TileArg& in : inputs)
      if (auto* r = std::get_if<BufferRegion>(&in);
          r && r->buffer->dtype.is_float() &&
          compute_dtype(r->buffer->dtype).bits > plan.compute.bits)
        plan.compute = compute_dtype(r->buffer->dtype);
  if (spec.name == "cast") {
    auto* src = std::get_if<BufferRegion>(&inputs[0]);
    if (!src) return "cast takes a tile source";
    DType st = src->buffer->dtype;
    // Integer <-> integer casts stay exact; anything involving a float goes through f32 (or f64).
    if (st.is_integer() || st.is_bool())
      plan.compute = (dt.is_integer() || dt.is_bool()) ? st : (dt == f64 ? f64 : f32);
    else
      plan.compute = (st == f64 || dt == f64) ? f64 : f32;
  }
  for (auto& in : inputs)
    if (auto* e = std::get_if<Expr>(&in)) {
      Expr v = *e;
      if (v.dtype() != plan.compute) v = simplify(make_cast(plan.compute, v, call->loc));
      in = v;
    }
  auto scalar = [&](Expr e) {
    if (!e) return e;
    return e.dtype() == plan.compute ? e : simplify(make_cast(plan.compute, e, call->loc));
  };
  plan.scale = scalar(call->attrs.scale.value);
  plan.bias = scalar(call->attrs.bias.value);
  plan.inputs = std::move(inputs);
  return plan;
}

Expr elementwise_value(const ElementwisePlan& plan, const std::vector<Expr>& loaded) {
  DType dt = plan.dst.buffer->dtype;
  if (plan.spec->name == "zero") return dt.is_float() ? make_float(0.0, dt) : make_int(0, dt);
  std::vector<Expr> xs;
  for (const Expr& v : loaded)
    xs.push_back(v.dtype() == plan.compute ? v : make_cast(plan.compute, v));
  Expr scale = plan.scale_input >= 0 ? xs[static_cast<std::size_t>(plan.scale_input)] : plan.scale;
  Expr bias = plan.bias_input >= 0 ? xs[static_cast<std::size_t>(plan.bias_input)] : plan.bias;
  xs.resize(plan.op_inputs);
  if (scale || bias) {
    Expr x = xs[0];
    if (scale) x = make_binary(BinOp::Mul, x, scale);
    if (bias) x = make_binary(BinOp::Add, x, bias);
    xs[0] = x;
  }
  Expr r = plan.spec->math(xs);
  return r.dtype() == dt ? r : make_cast(dt, r);
}

std::string origin_text(const DispatchContext& ctx, const std::string& variant) {
  return tile_call_str(ctx.call) + "  -> " + variant;
}

}  // namespace tx::lowering::variants

namespace tx::lowering::variants {

Check atomic_destination(const DispatchContext& ctx) {
  const BufferRegion* dst = region_arg(ctx.call, 0);
  if (dst->buffer->scope == MemScope::local)
    return operand_reason(*dst, "is a register tile; atomic_add adds into global or shared memory");
  if (dst->buffer->dtype != f32)
    return operand_reason(*dst, "dtype " + dst->buffer->dtype.name() +
                                    ": atomic_add adds into float32 (accumulate in float32, "
                                    "convert afterwards)");
  return ok();
}

Check copy_operands_match(const DispatchContext& ctx) {
  const TileCallNode* call = ctx.call;
  if (call->attrs.scale || call->attrs.bias || call->attrs.scale_arg >= 0 ||
      call->attrs.bias_arg >= 0)
    return std::string("copy takes no scale/bias (use an elementwise op: Tx::mul, Tx::fma)");
  if (call->args.size() != 2) return std::string("copy takes a destination and a source");
  if (call->attrs.barrier.defined() && call->op != "copy_async")
    return std::string("barrier= belongs to copy_async (a copy completing on an mbarrier)");
  const BufferRegion* dst = region_arg(call, 0);
  const BufferRegion* src = region_arg(call, 1);
  if (!dst || !src) return std::string("copy operands must be buffer regions");
  if (dst->buffer->dtype != src->buffer->dtype)
    return operand_reason(*src, "dtype " + src->buffer->dtype.name() + " differs from " +
                                    dst->buffer->name + "'s " + dst->buffer->dtype.name() +
                                    " (copy does not convert; use cast)");
  if (squeeze(dst->extents()) != squeeze(src->extents())) {
    auto str = [](const Extents& e) {
      std::string s = "(";
      for (std::size_t i = 0; i < e.size(); ++i) s += (i ? ", " : "") + std::to_string(e[i]);
      return s + ")";
    };
    return operand_reason(*src, "region extents " + str(src->extents()) + " differ from " +
                                    dst->buffer->name + "'s " + str(dst->extents()));
  }
  return ok();
}

std::optional<std::int64_t> aligned_constant_part(const Expr& offset, const Env& env,
                                                  std::int64_t period) {
  auto lf = linear_form(offset, env);
  if (!lf) return std::nullopt;
  for (const auto& [atom, coef] : lf->terms)
    if (coef % period != 0) return std::nullopt;
  return lf->constant;
}

Expr joint_offset(const std::vector<JointIter>& iters, std::size_t operand, const Expr& idx) {
  Expr off = c32(0);
  std::int64_t inner = 1;
  for (std::size_t k = iters.size(); k-- > 0;) {
    const Iter& p = iters[k].parts[operand];
    if (p.stride != 0) {
      Expr c = div(idx, c32(inner));
      if (k != 0) c = mod(c, c32(iters[k].extent));
      off = add(off, mul(c, c32(p.stride)));
    }
    inner *= iters[k].extent;
  }
  return off;
}

std::variant<ElementPlaces, std::string> element_places(const BufferRegion& r, const Env& env,
                                                        RegionOptions opt) {
  std::string why;
  auto l = region_layout(r, env, &why, opt);
  if (!l) return operand_reason(r, why);
  for (const Iter& it : l->replica)
    if (it.extent > 1)
      return operand_reason(r, "layout " + r.buffer->layout.str() +
                                   " has a replica (an element held in several places)");
  const std::int64_t n = r.numel();
  if (n > (1 << 16))
    return operand_reason(r, "region of " + std::to_string(n) +
                                 " elements (a fragment table is for tiles up to 65536)");
  ElementPlaces p;
  p.base = l->mem_offset;
  p.swizzle = l->swizzle;
  p.at.resize(static_cast<std::size_t>(n));
  for (std::int64_t x = 0; x < n; ++x) {
    Location loc = l->thread_offset;
    loc[static_cast<int>(Axis::m)] = 0;
    std::int64_t rest = x;
    for (std::size_t d = l->extents.size(); d-- > 0;) {
      std::int64_t c = rest % l->extents[d];
      rest /= l->extents[d];
      for (std::size_t k = l->dims[d].size(); k-- > 0;) {
        const Iter& it = l->dims[d][k];
        loc[static_cast<int>(it.axis)] += (c % it.extent) * it.stride;
        c /= it.extent;
      }
    }
    p.at[static_cast<std::size_t>(x)] = loc;
  }
  return p;
}

std::optional<std::pair<std::int64_t, std::int64_t>> matrix_extents(const BufferRegion& r) {
  const std::size_t n = r.ranges.size();
  if (n < 2) return std::nullopt;
  for (std::size_t d = 0; d + 2 < n; ++d)
    if (r.ranges[d].extent != 1) return std::nullopt;
  return std::make_pair(r.ranges[n - 2].extent, r.ranges[n - 1].extent);
}

// Operand shapes of a gemm call: D (M, N), A (M, K), B (K, N) -- or B (N,
// K) with transpose_b.
Check gemm_operands(const DispatchContext& ctx) {
  const std::vector<TileArg> ops = ctx.call->operands();
  if (ops.size() != 3) return "gemm takes D, A, B";
  const BufferRegion* r[3];
  for (int i = 0; i < 3; ++i) {
    r[i] = std::get_if<BufferRegion>(&ops[static_cast<std::size_t>(i)]);
    if (!r[i]) return "gemm operands are tiles, not scalars";
  }
  for (const BufferRegion* x : r)
    if (!matrix_extents(*x))
      return operand_reason(*x,
                            "not a matrix: a gemm operand is a 2-D region (leading "
                            "extents 1)");
  auto d = *matrix_extents(*r[0]), a = *matrix_extents(*r[1]), b = *matrix_extents(*r[2]);
  const bool bt = ctx.call->attrs.transpose_b;
  if (bt) std::swap(b.first, b.second);  // B^T's (K, N)
  if (a.first != d.first || b.second != d.second || a.second != b.first)
    return operand_reason(*r[1], "shapes do not chain: D " + std::to_string(d.first) + "x" +
                                     std::to_string(d.second) + " = A " + std::to_string(a.first) +
                                     "x" + std::to_string(a.second) + (bt ? " B^T (B " : " B ") +
                                     std::to_string(bt ? b.second : b.first) + "x" +
                                     std::to_string(bt ? b.first : b.second) + (bt ? ")" : ""));
  if (ctx.call->attrs.scale || ctx.call->attrs.bias || !ctx.call->attrs.axes.empty())
    return "gemm takes no scale / bias / axes";
  return ok();
}

int widest_vector(const std::vector<JointIter>& iters, const std::vector<std::size_t>& vectorized,
                  const std::vector<Expr>& bases, int esize, const Env& env,
                  const std::function<bool(int)>& extra) {
  for (int bytes : {16, 8, 4, 2, 1}) {
    if (bytes < esize || bytes % esize != 0) continue;
    int v = bytes / esize;
    if (extra && !extra(v)) continue;
    if (v == 1) return 1;
    bool fits = !iters.empty();
    for (std::size_t op : vectorized) {
      if (!fits) break;
      const JointIter& inner = iters.back();
      if (inner.parts[op].axis != Axis::m || inner.parts[op].stride != 1 || inner.extent % v != 0) {
        fits = false;
        break;
      }
      for (std::size_t k = 0; k + 1 < iters.size(); ++k)
        if (iters[k].parts[op].stride % v != 0) fits = false;
      std::int64_t kd = env.known_divisor(bases[op]);
      if (kd != 0 && kd % v != 0) fits = false;
    }
    if (fits) return v;
  }
  return 1;
}

}  // namespace tx::lowering::variants

namespace tx::lowering {

Check family_rules(const DispatchContext& ctx) {
  using namespace variants;
  const TileCallNode* call = ctx.call;
  if (find_elementwise(call->op)) {
    auto parsed = parse_elementwise(ctx);
    if (auto* why = std::get_if<std::string>(&parsed)) return *why;
    // Every tile input broadcasts to the destination (NumPy's rule: leading
    // extent-1 dimensions may be dropped, a 1 stretches).
    const ElementwisePlan& ep = std::get<ElementwisePlan>(parsed);
    const Extents target = ep.dst.extents();
    for (const TileArg& in : ep.inputs) {
      auto* r = std::get_if<BufferRegion>(&in);
      if (!r) continue;
      const Extents e = r->extents();
      const std::size_t extra = e.size() > target.size() ? e.size() - target.size() : 0;
      for (std::size_t j = 0; j < e.size(); ++j) {
        if (j < extra) {
          if (e[j] != 1)
            return operand_reason(*r, "cannot broadcast a rank-" + std::to_string(e.size()) +
                                          " operand to rank " + std::to_string(target.size()));
          continue;
        }
        const std::int64_t t = target[target.size() - (e.size() - j)];
        if (e[j] != t && e[j] != 1)
          return operand_reason(
              *r, "extent " + std::to_string(e[j]) + " does not broadcast to " + std::to_string(t));
      }
    }
    return ok();
  }
  if (find_reduction(call->op)) {
    auto parsed = parse_reduction(ctx);
    if (auto* why = std::get_if<std::string>(&parsed)) return *why;
    return ok();
  }
  if (call->op == "copy" || call->op == "copy_async" || call->op == "atomic_add")
    return copy_operands_match(ctx);
  return ok();
}

}  // namespace tx::lowering
