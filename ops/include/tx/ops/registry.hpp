// The runtime view of the op table: every op's metadata, its kernel-body
// builder and its double-precision reference, built from the Hana tables of
// op_table.hpp plus the independent ops. Tests, benchmarks and the docs use
// this to enumerate the library.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "tx/expr.hpp"
#include "tx/ops/op_table.hpp"
#include "tx/ops/ops.hpp"

namespace tx::ops {

struct OpInfo {
  std::string name;
  optable::Template tmpl;
  optable::Category category;
  optable::DTypes dtypes;
  optable::Out out;
  int inputs = 1;  // tensors the op takes (0 for alibi / sinusoidal)
  int params = 0;  // scalar parameters it takes
  // The output value from the inputs (already in their compute dtypes) and
  // the scalar parameters.
  std::function<Expr(const std::vector<Expr>&, const Params&)> expr;
  // The reference, evaluated in double (or int64 for integer dtypes) on
  // values of dtype `t`.
  std::function<double(const std::vector<double>&, const Params&, DType t)> ref;
};

// nullptr when there is no such op.
const OpInfo* find_op(const std::string& name);
const std::vector<OpInfo>& all_ops();

// The dtype an op computes in for input dtype `t` (f32 for f16/bf16/fp8).
DType compute_dtype_for(DType t);
// The output dtype for input dtype `t`.
DType out_dtype_for(const OpInfo& op, DType t);

}  // namespace tx::ops
