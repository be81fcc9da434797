// atomic/fallback [0]: dst += src as a scalar loop of atomics, memory to
// memory -- a shared tile (or a thread-private register tile) added into a
// global or shared float32 region where neither atomic/reg (a distributed
// register source) nor atomic/tma_reduce (sm_90, TMA boxes) applies: the
// host, GPUs before Hopper, layouts the TMA does not read.
//
// Accepts: any target; any scope with all its threads active; float32
// operands of equal extents; a global / shared destination; a source in
// memory or a register tile without thread axes; partial= (elements past a
// tensor's end are skipped).
//
// Algorithm: copy/fallback's element loop (scalar_transfer.cpp) with one
// atomicAdd per element in place of the store; a shared source is preceded
// by the scope's barrier (atomic/tma_reduce's contract: the scope's writes
// to the tile are complete before it is added). The order of the adds is
// not fixed, so float sums may differ in the last bits from run to run.
#include "scalar_transfer.hpp"

namespace tx::lowering {

void register_atomic_fallback(Registry& r) {
  using namespace variants;
  Variant v;
  v.family = "atomic";
  v.name = "fallback";
  v.priority = 0;
  v.when = common_predicates_masking();
  v.when.push_back({"copy_operands_match", copy_operands_match});
  v.when.push_back({"atomic_destination", atomic_destination});
  v.when.push_back({"no_distributed_registers", no_distributed_registers});
  v.plan = [](const DispatchContext& ctx) -> Plan {
    Plan p = plan_scalar_transfer(ctx, {.origin = "atomic/fallback", .atomic_add = true});
    // A shared source: the scope's barrier first, as atomic/tma_reduce's --
    // the tile's elements were written by the scope's other threads, and
    // the two variants keep one contract.
    const BufferRegion* src = region_arg(ctx.call, 1);
    if (auto* s = std::get_if<Stmt>(&p);
        s && src->buffer->scope == MemScope::shared && ctx.scope != ExecScope::thread)
      return make_seq({make_barrier(ctx.scope, ctx.call->loc), *s}, ctx.call->loc);
    return p;
  };
  r.add("atomic", v);
}

}  // namespace tx::lowering
