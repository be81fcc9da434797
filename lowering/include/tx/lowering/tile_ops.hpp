// What lowering reads of the tile ops: their definitions are the rows of
// TX_TILE_OP_TABLE (tx/tile_op_table.hpp) -- arity, dtype rule, accepted
// attributes, an elementwise op's math, a reduction's combiner -- viewed here
// the way the variants use them.
#pragma once

#include <string>

#include "tx/ir.hpp"
#include "tx/tile_op_table.hpp"

namespace tx::lowering {

// An elementwise op: its row (inputs(), commutative(), float_only(),
// converts(), accepts(TileAttr::scale_bias), math).
using ElementwiseSpec = TileOpDef;
// nullptr when `op` is not an elementwise op.
const ElementwiseSpec* find_elementwise(const std::string& op);

struct ReductionSpec {
  std::string name;  // sum, max, min
  BinOp combine;
  // The identity in dtype: 0, -inf (lowest), +inf (highest).
  Expr identity(DType t) const;
};
// nullptr when `op` is not a reduction.
const ReductionSpec* find_reduction(const std::string& op);

// The dtype elementwise math runs in: f32 for f16/bf16/fp8, else the dtype itself.
DType compute_dtype(DType t);

}  // namespace tx::lowering
