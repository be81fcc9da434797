// The tile primitives tx knows: what each elementwise op computes, its
// arity and dtype rules, and the reductions' combiners and identities. One
// table drives the builders' validation, both elementwise variants, the
// docs and the tests.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "tx/ir.hpp"

namespace tx::lowering {

struct ElementwiseSpec {
  std::string name;
  int inputs;          // operands after the destination
  bool commutative;    // a scalar left operand may be swapped to the right
  bool float_only;     // rejects integer dtypes
  bool scale_bias;     // accepts scale= and bias=: op(x * scale + bias)
  bool converts;       // destination dtype may differ from the inputs' (cast)
  // The value of one element from its inputs, all already in the compute dtype.
  std::function<Expr(const std::vector<Expr>&)> compute;
};

// nullptr when `op` is not an elementwise op.
const ElementwiseSpec* find_elementwise(const std::string& op);
const std::vector<ElementwiseSpec>& elementwise_ops();

struct ReductionSpec {
  std::string name;  // sum, max, min
  BinOp combine;
  // The identity in dtype: 0, -inf (lowest), +inf (highest).
  Expr identity(DType t) const;
};
const ReductionSpec* find_reduction(const std::string& op);

// The dtype elementwise math runs in: f32 for f16/bf16/fp8, else the dtype itself.
DType compute_dtype(DType t);

}  // namespace tx::lowering
