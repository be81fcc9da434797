// Shared parsing of reduction calls (sum / max / min): which source
// dimensions are reduced and how the destination's dimensions line up with
// the source's remaining ("spatial") dimensions.
#pragma once

#include "common.hpp"
#include "tx/ir_functor.hpp"

namespace tx::lowering::variants {

struct ReducePlan {
  const ReductionSpec* spec = nullptr;
  BufferRegion dst, src;
  std::vector<bool> reduced;          // per source dimension
  std::vector<std::int64_t> spatial;  // extents of the non-reduced source dims
  bool accum = false;
};

// Axes: TileAttrs::axes (negative counts from the end) or, when empty, the
// source dims whose destination extent is 1 (same rank) or the trailing dims
// the destination lacks (lower rank). The destination must hold the spatial
// dims in order, with or without the reduced dims kept as extent 1.
std::variant<ReducePlan, std::string> parse_reduction(const DispatchContext& ctx);

}  // namespace tx::lowering::variants
