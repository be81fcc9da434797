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
#include "tma_boxes.hpp"
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

Plan plan(const DispatchContext& ctx) {
  const BufferRegion& dst = *region_arg(ctx.call, 0);
  const BufferRegion& src = *region_arg(ctx.call, 1);
  auto planned = plan_tma_boxes(ctx, src, dst);
  if (auto* e = std::get_if<std::string>(&planned)) return *e;
  const TmaBoxes& t = std::get<TmaBoxes>(planned);
  const Expr bar = ctx.call->attrs.barrier;
  std::vector<Stmt> body;
  body.push_back(make_evaluate(make_call(Intrinsic::mbarrier_expect_tx,
                                         {bar, c32(t.map.box_bytes() * t.boxes())}, ctx.call->loc),
                               ctx.call->loc));
  for (std::int64_t j = 0; j < t.boxes(); ++j)
    body.push_back(make_tma_copy(t.map, t.smem, t.smem_offset(j, ctx.env),
                                 t.coords(src, j, ctx.env), bar, ctx.call->loc));
  Stmt s = make_seq(body);
  if (ctx.scope != ExecScope::thread)
    s = make_if(eq(scope_thread_index(ctx.scope), c32(0)), s, Stmt(), ctx.call->loc);
  return make_origin(origin_text(ctx, "copy_async/tma (" + t.describe() + ")"), s, ctx.call->loc);
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
