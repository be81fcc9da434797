// copy_async/tma [30]: a global -> shared tile copy through the Tensor
// Memory Accelerator (cp.async.bulk.tensor), completing on an mbarrier.
//
// Accepts: cuda on sm_90+; any scope (one thread of it issues the copy: the
// scope's thread 0); `barrier=` an element of a shared u64 buffer; a source
// region of a row-major global buffer parameter of at most 5 dimensions and
// a shared destination of the same dtype and extents whose layout is what
// the TMA writes: a sequence of dense boxes (row-major over the region's
// extents, the innermost extent cut into pieces of b0 elements), each
// 128-byte aligned, swizzled by one of the TMA's modes -- none, or 16-byte
// chunks XORed within 32-, 64- or 128-byte rows (layouts::swizzled_tiles:
// Sw<1..3, log2(16 / size), 3>). b0 is the region's inner extent, capped at
// the swizzle row (128 bytes: 64 bf16) or at 256 elements, as TIRx's
// tma_auto derives the largest legal box from the shared layout. Every
// element's shared address is checked against that model (layouts are read
// as tables): a layout the TMA cannot produce is a reason, never a wrong
// copy. Global row pitches must be multiples of 16 bytes (checked here for
// static shapes, at launch otherwise).
//
// Emits, in the issuing thread: mbarrier.expect_tx(barrier, bytes of all
// boxes), then one cp.async.bulk.tensor per box. The runtime encodes one
// tensor map per (buffer, box, swizzle) at launch (cuTensorMapEncodeTiled)
// and passes it as a __grid_constant__ parameter. Out-of-bounds box
// elements are zero-filled by the hardware.
// Why: a single thread moves a whole tile with no address arithmetic in the
// other threads, and the swizzle that makes wgmma / ldmatrix conflict-free
// is applied by the copy itself.
#include "common.hpp"
#include "tx/printer.hpp"

namespace tx::lowering::variants {

namespace {

Check barrier_and_operands(const DispatchContext& ctx) {
  const BufferRegion& dst = *region_arg(ctx.call, 0);
  const BufferRegion& src = *region_arg(ctx.call, 1);
  if (src.buffer->scope != MemScope::global || dst.buffer->scope != MemScope::shared)
    return operand_reason(dst, std::string("the TMA copies global -> shared (here ") +
                                   mem_scope_name(src.buffer->scope) + " -> " +
                                   mem_scope_name(dst.buffer->scope) + ")");
  if (!ctx.call->attrs.barrier.defined())
    return "a TMA copy completes on an mbarrier: pass {.barrier = pipe.full(it)} (without "
           "one, copy_async/ldgsts uses commit / wait groups)";
  if (ctx.target.below_sm(90))
    return "the TMA needs sm_90; the target is sm_" + std::to_string(ctx.target.sm);
  return ok();
}

// The shared layout's swizzle as a TMA mode (bytes per swizzled row), or the
// reason it is not one.
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

Plan plan(const DispatchContext& ctx) {
  const BufferRegion& dst = *region_arg(ctx.call, 0);
  const BufferRegion& src = *region_arg(ctx.call, 1);
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
                                       " of the tile's period: the TMA writes 128-byte aligned "
                                       "boxes");
    }
    if (base < 0) return operand_reason(dst, "internal: box base before its first element");
    std::int64_t want = tma_swz((base + lin) * esize), got = tx_swz(pre) * esize;
    if (want != got)
      return operand_reason(dst, "element " + std::to_string(x) + " of the tile is at byte " +
                                     std::to_string(got) + " but the TMA (box " +
                                     std::to_string(j) + ", " + std::to_string(W) +
                                     "-byte swizzle) writes it at byte " + std::to_string(want) +
                                     ": the shared layout is not a sequence of dense boxes");
  }

  TensorMapDesc map;
  map.global = g;
  map.box.assign(ext.begin(), ext.end() - 1);
  map.box.push_back(b0);
  map.swizzle_bytes = W;
  const Expr bar = ctx.call->attrs.barrier;
  const Buffer fd = flat_view(dst.buffer);
  std::vector<Stmt> body;
  body.push_back(make_evaluate(
      make_call(Intrinsic::mbarrier_expect_tx, {bar, c32(map.box_bytes() * boxes)}, ctx.call->loc),
      ctx.call->loc));
  const Expr dyn = simplify(sub(pl.base, c32(*c)), ctx.env);
  for (std::int64_t j = 0; j < boxes; ++j) {
    std::vector<Expr> coords;
    for (std::size_t d = 0; d < D; ++d) {
      Expr s = src.ranges[d].start;
      if (d + 1 == D && j > 0) s = add(s, make_int(j * b0, s.dtype()));
      coords.push_back(simplify(s, ctx.env));
    }
    Expr off = simplify(add(dyn, c32(box_base[static_cast<std::size_t>(j)])), ctx.env);
    body.push_back(make_tma_copy(map, fd, off, coords, bar, ctx.call->loc));
  }
  Stmt s = make_seq(body);
  if (ctx.scope != ExecScope::thread)
    s = make_if(eq(scope_thread_index(ctx.scope), c32(0)), s, Stmt(), ctx.call->loc);
  std::string box;
  for (std::size_t d = 0; d < map.box.size(); ++d)
    box += (d ? "x" : "") + std::to_string(map.box[d]);
  return make_origin(
      origin_text(ctx, "copy_async/tma (" + std::to_string(boxes) + " x box " + box + ", " +
                           (W ? std::to_string(W) + "-byte swizzle" : "no swizzle") + ", " +
                           std::to_string(map.box_bytes() * boxes) + " bytes)"),
      s, ctx.call->loc);
}

}  // namespace
}  // namespace tx::lowering::variants

namespace tx::lowering {

void register_copy_async_tma(Registry& r) {
  using namespace variants;
  Variant v;
  v.targets = {TargetKind::cuda};
  v.off_target = "the host runs no PTX (copy_async/sync copies synchronously)";
  v.async_model = true;
  v.family = "copy_async";
  v.name = "tma";
  v.priority = 30;
  v.when = common_predicates_masking();
  v.when.push_back({"copy_operands_match", copy_operands_match});
  v.when.push_back({"barrier_and_operands", barrier_and_operands});
  v.plan = plan;
  r.add("copy_async", v);
}

}  // namespace tx::lowering
