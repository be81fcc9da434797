// atomic/reg [10]: dst += src by atomics, src a register (local) tile and
// dst a region of a global or shared float32 buffer -- sums that several
// CTAs (or warpgroups) add into, such as the attention backward's dQ, where
// each CTA holds one key block's contribution to every query row.
//
// Accepts: any scope with all its threads active; a local source and a
// global / shared destination, both float32, of equal extents; the register
// layouts copy/reg takes (the same partition: reg_transfer.cpp); partial=
// (elements past the tensor's end are skipped) and where=.
//
// Algorithm: copy/reg's transfer with one atomicAdd per element (the
// hardware's RED.ADD.F32 when the result is unused) in place of the vector
// stores; a register source replicated over threads adds once (replica 0).
// The order of the adds is not fixed, so float sums may differ in the last
// bits from run to run.
#include "reg_transfer.hpp"

namespace tx::lowering::variants {

namespace {

Check register_source(const DispatchContext& ctx) {
  const BufferRegion* src = region_arg(ctx.call, 1);
  if (src->buffer->scope != MemScope::local)
    return operand_reason(*src, std::string("scope ") + mem_scope_name(src->buffer->scope) +
                                    " != local: atomic_add adds a register tile");
  return ok();
}

}  // namespace
}  // namespace tx::lowering::variants

namespace tx::lowering {

void register_atomic_reg(Registry& r) {
  using namespace variants;
  Variant v;
  v.family = "atomic";
  v.name = "reg";
  v.priority = 10;
  v.when = common_predicates_masking();
  std::erase_if(v.when, [](const auto& c) { return c.first == "no_where"; });
  v.when.push_back({"copy_operands_match", copy_operands_match});
  v.when.push_back({"atomic_destination", atomic_destination});
  v.when.push_back({"register_source", register_source});
  v.plan = [](const DispatchContext& ctx) {
    return plan_register_transfer(ctx, {.origin = "atomic/reg", .atomic_add = true});
  };
  r.add("atomic", v);
}

}  // namespace tx::lowering
