// copy/reg [10]: a copy where exactly one side is a register (local) tile.
//
// Accepts: cuda; any scope with all its threads active; one local operand
// and one shared/global operand; equal dtypes and extents; a register layout
// whose thread iters use the scope's thread axes (laneid for a warp,
// tid_in_wg / wid_in_wg / laneid for a warpgroup, tx / warpid / laneid /
// wgid for a CTA, none for a thread) and map the scope's threads one-to-one
// (replicas included); a memory side whose layout nests with the register
// layout's iters.
//
// Algorithm (seed 002, reg_transfer.cpp): the partition is induced by the
// register layout; the copy is a serial loop of the widest vector
// transfers both layouts allow.
#include "reg_transfer.hpp"

namespace tx::lowering {

void register_copy_reg(Registry& r) {
  using namespace variants;
  Variant v;
  v.family = "copy";
  v.name = "reg";
  v.priority = 10;
  v.when = common_predicates_masking();
  std::erase_if(v.when, [](const auto& c) { return c.first == "no_where"; });
  v.when.push_back({"copy_operands_match", copy_operands_match});
  v.when.push_back({"one_local", one_local});
  v.plan = [](const DispatchContext& ctx) { return plan_register_transfer(ctx, {}); };
  r.add("copy", v);
}

}  // namespace tx::lowering
