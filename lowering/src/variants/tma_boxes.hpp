// The TMA's view of a (global region, shared tile) pair, shared by
// copy_async/tma (global -> shared) and copy_async/tma_store (shared ->
// global): the tensor map's box and swizzle, and where each box sits in the
// shared tile -- with every element's shared address checked against where
// the TMA puts it (layouts read as tables), so a layout the TMA cannot move
// is a reason, never a wrong copy.
#pragma once

#include <variant>

#include "common.hpp"

namespace tx::lowering::variants {

struct TmaBoxes {
  TensorMapDesc map;                   // global buffer, box (innermost b0), swizzle
  Buffer smem;                         // the shared buffer, flat
  Expr dynamic_base;                   // the tile's start less its constant part
  std::vector<std::int64_t> box_base;  // box j's constant element offset in smem
  std::int64_t b0 = 0;                 // box's innermost extent
  std::int64_t boxes() const { return static_cast<std::int64_t>(box_base.size()); }
  // Box j's global coordinates (outermost first) and shared element offset.
  std::vector<Expr> coords(const BufferRegion& global, std::int64_t j, const Env* env) const;
  Expr smem_offset(std::int64_t j, const Env* env) const;
  // "2 x box 64x64, 128-byte swizzle, 16384 bytes" for the variant's origin.
  std::string describe() const;
};

// `global`: a region of a row-major global buffer parameter of at most 5
// dimensions (row pitches multiples of 16 bytes); `shared`: a tile of the
// same extents whose layout is a sequence of dense boxes (row-major over the
// region's extents, the innermost extent cut into pieces of b0 elements),
// each 128-byte aligned, swizzled by one of the TMA's modes -- none, or
// 16-byte chunks XORed within 32-, 64- or 128-byte rows
// (layouts::swizzled_tiles: Sw<1..3, log2(16 / size), 3>). b0 is the inner
// extent capped at the swizzle row (128 bytes: 64 bf16) or at 256 elements.
std::variant<TmaBoxes, std::string> plan_tma_boxes(const DispatchContext& ctx,
                                                   const BufferRegion& global,
                                                   const BufferRegion& shared);

// A shared tile out through the TMA, box by box (copy_async/tma_store: a
// store; atomic/tma_reduce: reduce_add, each element added into global
// memory): fence.proxy.async in every thread of the scope, the scope's
// barrier, then thread 0 issues the boxes and commits its bulk group.
// Its operands: shared -> global, no barrier= (a bulk group completes it),
// sm_90. `what`: "a TMA store copies" / "a TMA reduction adds", for the reasons.
Check tma_from_shared_operands(const DispatchContext& ctx, const std::string& what);
Plan plan_tma_from_shared(const DispatchContext& ctx, bool reduce_add, const std::string& origin);

}  // namespace tx::lowering::variants
