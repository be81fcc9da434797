// copy/fallback [0]: any valid copy as a scalar loop, with a warning.
//
// Accepts: cuda; any scope with all its threads active; equal dtypes and
// extents; memory operands, or local operands whose layout has no thread
// axes (each thread holds the whole tile). It exists for the copies the fast
// variants decline -- an element count that does not divide the thread
// count, layouts that do not nest -- so that a valid program always lowers.
//
// Memory <-> memory: element i goes to thread i % threads, guarded by i < N
// (scalar_transfer.cpp, shared with atomic/fallback).
#include "scalar_transfer.hpp"

namespace tx::lowering::variants {

namespace {

Plan plan(const DispatchContext& ctx) {
  return plan_scalar_transfer(ctx, {.origin = "copy/fallback", .warn_once = true});
}

}  // namespace
}  // namespace tx::lowering::variants

namespace tx::lowering {

void register_copy_fallback(Registry& r) {
  using namespace variants;
  Variant v;
  v.family = "copy";
  v.name = "fallback";
  v.priority = 0;
  v.when = common_predicates_masking();
  v.when.push_back({"copy_operands_match", copy_operands_match});
  v.when.push_back({"no_distributed_registers", no_distributed_registers});
  v.plan = plan;
  r.add("copy", v);
}

}  // namespace tx::lowering
