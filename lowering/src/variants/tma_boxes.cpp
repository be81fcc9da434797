// plan_tma_boxes (tma_boxes.hpp): the TMA box model of copy_async/tma and
// copy_async/tma_store.
#include "tma_boxes.hpp"

#include "tx/printer.hpp"

namespace tx::lowering::variants {

// The shared layout's swizzle as a TMA mode (bytes per swizzled row), or the
// reason it is not one.
namespace {

std::variant<int, std::string> tma_swizzle(const BufferRegion& dst,
                                           const std::optional<Swizzle>& sw) {
  if (!sw) return 0;
  const int esize = dst.buffer->dtype.bytes();
  int chunk = 0;  // log2(16 / esize)
  while ((1 << chunk) * esize < 16) ++chunk;
  if (sw->shift != 3 || sw->base != chunk || sw->bits < 1 || sw->bits > 3)
    return operand_reason(dst, "swizzle " + sw->str() +
                                   " is not a TMA mode (16-byte chunks XORed by the 128-byte "
                                   "line: Sw<1..3, " +
                                   std::to_string(chunk) + ", 3>, layouts::swizzled_tiles)");
  return 16 << sw->bits;
}

}  // namespace

std::variant<TmaBoxes, std::string> plan_tma_boxes(const DispatchContext& ctx,
                                                   const BufferRegion& src,
                                                   const BufferRegion& dst) {
  const Buffer& g = src.buffer;
  const int esize = g->dtype.bytes();
  const std::size_t D = src.ranges.size();
  if (D > 5) return operand_reason(src, "a TMA box has at most 5 dimensions");
  if (!g->symbolic() && !(g->layout == TileLayout::row_major(g->shape)))
    return operand_reason(src, "layout " + g->layout.str() + ": the TMA reads row-major tensors");
  if (!g->symbolic()) {
    std::int64_t pitch = esize;
    for (std::size_t d = D; d-- > 1;) {
      pitch *= g->shape[d];
      if (pitch % 16 != 0)
        return operand_reason(src, "a row pitch of " + std::to_string(pitch) +
                                       " bytes: the TMA needs multiples of 16");
    }
  }
  auto places = element_places(dst, *ctx.env, {.allow_swizzle = true});
  if (auto* e = std::get_if<std::string>(&places)) return *e;
  const ElementPlaces& pl = std::get<ElementPlaces>(places);
  for (const Location& at : pl.at)
    for (int a = 1; a < kNumAxes; ++a)
      if (at[a] != 0) return operand_reason(dst, "a shared tile spread over threads");
  auto mode = tma_swizzle(dst, pl.swizzle);
  if (auto* e = std::get_if<std::string>(&mode)) return *e;
  const int W = std::get<int>(mode);
  // The tile's base: a dynamic part that keeps the swizzle's phase (a
  // multiple of its period, or of 128 bytes) and a constant one.
  const std::int64_t period = std::max<std::int64_t>(128, 8 * W) / esize;
  auto c = aligned_constant_part(pl.base, *ctx.env, period);
  if (!c)
    return operand_reason(dst, "the tile starts at " + to_string(pl.base) +
                                   ", not provably a multiple of " +
                                   std::to_string(period * esize) +
                                   " bytes (the TMA's alignment and swizzle period)");

  std::vector<std::int64_t> ext;
  for (const Range& r : src.ranges) ext.push_back(r.extent);
  for (std::size_t d = 0; d + 1 < D; ++d)
    if (ext[d] > 256)
      return operand_reason(src, "extent " + std::to_string(ext[d]) + " of dimension " +
                                     std::to_string(d) +
                                     " exceeds the TMA's box limit of 256 (copy in parts)");
  const std::int64_t inner = ext[D - 1];
  std::int64_t b0 =
      W ? std::min<std::int64_t>(inner, W / esize) : std::min<std::int64_t>(inner, 256);
  if (inner % b0 != 0)
    return operand_reason(src, "inner extent " + std::to_string(inner) +
                                   " is not a multiple of the box's " + std::to_string(b0) +
                                   " elements (the swizzle row)");
  if (b0 * esize % 16 != 0)
    return operand_reason(src, "an inner box of " + std::to_string(b0 * esize) +
                                   " bytes: the TMA moves multiples of 16");
  const std::int64_t boxes = inner / b0;
  std::int64_t box_elems = b0;
  for (std::size_t d = 0; d + 1 < D; ++d) box_elems *= ext[d];

  // Every element where the TMA puts it: box j's base plus the element's
  // row-major place in the box, swizzled on the byte address.
  const std::int64_t n = src.numel();
  std::vector<std::int64_t> box_base(static_cast<std::size_t>(boxes), -1);
  auto tma_swz = [&](std::int64_t byte) {
    if (!W) return byte;
    const int bits = W == 128 ? 3 : W == 64 ? 2 : 1;
    return byte ^ (((byte >> 7) & ((1 << bits) - 1)) << 4);
  };
  auto tx_swz = [&](std::int64_t elem) { return pl.swizzle ? pl.swizzle->apply(elem) : elem; };
  for (std::int64_t x = 0; x < n; ++x) {
    std::int64_t c_in = x % inner, outer = x / inner;
    std::int64_t j = c_in / b0, lin = outer * b0 + c_in % b0;
    std::int64_t pre = *c + pl.at[static_cast<std::size_t>(x)][0];
    auto& base = box_base[static_cast<std::size_t>(j)];
    if (lin == 0) {
      base = pre;
      if (base * esize % 128 != 0)
        return operand_reason(dst, "box " + std::to_string(j) + " starts at byte " +
                                       std::to_string(base * esize) +
                                       " of the tile's period: the TMA moves 128-byte aligned "
                                       "boxes");
    }
    if (base < 0) return operand_reason(dst, "internal: box base before its first element");
    std::int64_t want = tma_swz((base + lin) * esize), got = tx_swz(pre) * esize;
    if (want != got)
      return operand_reason(dst, "element " + std::to_string(x) + " of the tile is at byte " +
                                     std::to_string(got) + " but the TMA (box " +
                                     std::to_string(j) + ", " + std::to_string(W) +
                                     "-byte swizzle) places it at byte " + std::to_string(want) +
                                     ": the shared layout is not a sequence of dense boxes");
  }

  TmaBoxes t;
  t.map.global = g;
  t.map.box.assign(ext.begin(), ext.end() - 1);
  t.map.box.push_back(b0);
  t.map.swizzle_bytes = W;
  t.smem = flat_view(dst.buffer);
  t.dynamic_base = simplify(sub(pl.base, make_int(*c, i32)), ctx.env);
  t.box_base = std::move(box_base);
  t.b0 = b0;
  return t;
}

std::vector<Expr> TmaBoxes::coords(const BufferRegion& global, std::int64_t j,
                                   const Env* env) const {
  std::vector<Expr> out;
  const std::size_t D = global.ranges.size();
  for (std::size_t d = 0; d < D; ++d) {
    Expr s = global.ranges[d].start;
    if (d + 1 == D && j > 0) s = add(s, make_int(j * b0, s.dtype()));
    out.push_back(simplify(s, env));
  }
  return out;
}

Expr TmaBoxes::smem_offset(std::int64_t j, const Env* env) const {
  return simplify(add(dynamic_base, make_int(box_base[static_cast<std::size_t>(j)], i32)), env);
}

std::string TmaBoxes::describe() const {
  std::string box;
  for (std::size_t d = 0; d < map.box.size(); ++d)
    box += (d ? "x" : "") + std::to_string(map.box[d]);
  const int W = map.swizzle_bytes;
  return std::to_string(boxes()) + " x box " + box + ", " +
         (W ? std::to_string(W) + "-byte swizzle" : "no swizzle") + ", " +
         std::to_string(map.box_bytes() * boxes()) + " bytes";
}

Check tma_from_shared_operands(const DispatchContext& ctx, const std::string& what) {
  const BufferRegion& dst = *region_arg(ctx.call, 0);
  const BufferRegion& src = *region_arg(ctx.call, 1);
  if (src.buffer->scope != MemScope::shared || dst.buffer->scope != MemScope::global)
    return operand_reason(dst, what + " shared -> global (here " +
                                   mem_scope_name(src.buffer->scope) + " -> " +
                                   mem_scope_name(dst.buffer->scope) + ")");
  if (ctx.call->attrs.barrier.defined())
    return operand_reason(dst, what.substr(0, what.rfind(' ')) +
                                   " completes in a bulk group, not on an mbarrier: drop barrier= "
                                   "and wait with T::cuda::tma_store_wait");
  if (ctx.target.below_sm(90))
    return "the TMA needs sm_90; the target is sm_" + std::to_string(ctx.target.sm);
  return ok();
}

Plan plan_tma_from_shared(const DispatchContext& ctx, bool reduce_add, const std::string& origin) {
  const BufferRegion& dst = *region_arg(ctx.call, 0);
  const BufferRegion& src = *region_arg(ctx.call, 1);
  auto planned = plan_tma_boxes(ctx, dst, src);
  if (auto* e = std::get_if<std::string>(&planned)) return *e;
  const TmaBoxes& t = std::get<TmaBoxes>(planned);
  const SourceLoc loc = ctx.call->loc;
  std::vector<Stmt> issue;
  for (std::int64_t j = 0; j < t.boxes(); ++j) {
    Expr off = t.smem_offset(j, ctx.env);
    std::vector<Expr> coords = t.coords(dst, j, ctx.env);
    issue.push_back(reduce_add ? make_tma_reduce_add(t.map, t.smem, off, coords, loc)
                               : make_tma_store(t.map, t.smem, off, coords, loc));
  }
  issue.push_back(make_evaluate(make_call(Intrinsic::tma_store_commit, {}, loc), loc));
  Stmt s = make_seq(issue);
  if (ctx.scope != ExecScope::thread)
    s = make_if(eq(scope_thread_index(ctx.scope), c32(0)), s, Stmt(), loc);
  s = make_seq({make_evaluate(make_call(Intrinsic::fence_proxy_async, {}, loc), loc),
                make_barrier(ctx.scope, loc), s},
               loc);
  return make_origin(origin_text(ctx, origin + " (" + t.describe() + ")"), s, loc);
}

}  // namespace tx::lowering::variants
