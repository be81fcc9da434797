#include "tx/lowering/tile_ops.hpp"

#include <cmath>
#include <limits>

#include "tx/expr.hpp"

namespace tx::lowering {

namespace {
Expr one_like(const Expr& x) {
  return x.dtype().is_float() ? make_float(1.0, x.dtype()) : make_int(1, x.dtype());
}
Expr zero_of(DType t) { return t.is_float() ? make_float(0.0, t) : make_int(0, t); }
}  // namespace

const std::vector<ElementwiseSpec>& elementwise_ops() {
  static const std::vector<ElementwiseSpec> ops = [] {
    using V = const std::vector<Expr>&;
    std::vector<ElementwiseSpec> v;
    // zero and fill take the destination dtype directly (see the variants).
    v.push_back({"zero", 0, false, false, false, false, [](V) { return Expr(); }});
    v.push_back({"fill", 1, false, false, false, true, [](V x) { return x[0]; }});
    v.push_back({"cast", 1, false, false, false, true, [](V x) { return x[0]; }});
    v.push_back({"sqrt", 1, false, true, true, false,
                 [](V x) { return make_call(Intrinsic::sqrt, {x[0]}); }});
    v.push_back({"exp", 1, false, true, true, false,
                 [](V x) { return make_call(Intrinsic::exp, {x[0]}); }});
    v.push_back({"exp2", 1, false, true, true, false,
                 [](V x) { return make_call(Intrinsic::exp2, {x[0]}); }});
    v.push_back({"log", 1, false, true, true, false,
                 [](V x) { return make_call(Intrinsic::log, {x[0]}); }});
    v.push_back({"log2", 1, false, true, true, false,
                 [](V x) { return make_call(Intrinsic::log2, {x[0]}); }});
    v.push_back({"reciprocal", 1, false, true, true, false,
                 [](V x) { return make_binary(BinOp::Div, one_like(x[0]), x[0]); }});
    // silu(x) = x / (1 + exp(-x))
    v.push_back({"silu", 1, false, true, true, false, [](V x) {
                   Expr e = make_call(Intrinsic::exp, {make_unary(UnOp::Neg, x[0])});
                   return make_binary(BinOp::Div, x[0],
                                      make_binary(BinOp::Add, one_like(x[0]), e));
                 }});
    v.push_back({"add", 2, true, false, false, false,
                 [](V x) { return make_binary(BinOp::Add, x[0], x[1]); }});
    v.push_back({"sub", 2, false, false, false, false,
                 [](V x) { return make_binary(BinOp::Sub, x[0], x[1]); }});
    v.push_back({"mul", 2, true, false, false, false,
                 [](V x) { return make_binary(BinOp::Mul, x[0], x[1]); }});
    v.push_back({"fdiv", 2, false, true, false, false,
                 [](V x) { return make_binary(BinOp::Div, x[0], x[1]); }});
    v.push_back({"maximum", 2, true, false, false, false,
                 [](V x) { return make_binary(BinOp::Max, x[0], x[1]); }});
    v.push_back({"minimum", 2, true, false, false, false,
                 [](V x) { return make_binary(BinOp::Min, x[0], x[1]); }});
    v.push_back({"fma", 3, false, false, false, false, [](V x) {
                   if (x[0].dtype().is_float()) return make_call(Intrinsic::fma, {x[0], x[1], x[2]});
                   return make_binary(BinOp::Add, make_binary(BinOp::Mul, x[0], x[1]), x[2]);
                 }});
    return v;
  }();
  return ops;
}

const ElementwiseSpec* find_elementwise(const std::string& op) {
  for (const auto& s : elementwise_ops())
    if (s.name == op) return &s;
  return nullptr;
}

Expr ReductionSpec::identity(DType t) const {
  if (combine == BinOp::Add) return zero_of(t);
  bool is_max = combine == BinOp::Max;
  if (t.is_float()) return make_float(is_max ? -INFINITY : INFINITY, t);
  if (t.is_uint())
    return make_int(is_max ? 0 : (t.bits >= 64 ? -1 : (std::int64_t{1} << t.bits) - 1), t);
  if (t.bits >= 64)
    return make_int(is_max ? std::numeric_limits<std::int64_t>::min()
                           : std::numeric_limits<std::int64_t>::max(),
                    t);
  std::int64_t half = std::int64_t{1} << (t.bits - 1);
  return make_int(is_max ? -half : half - 1, t);
}

const ReductionSpec* find_reduction(const std::string& op) {
  static const ReductionSpec specs[] = {
      {"sum", BinOp::Add},
      {"max", BinOp::Max},
      {"min", BinOp::Min},
  };
  for (const auto& s : specs)
    if (s.name == op) return &s;
  return nullptr;
}

DType compute_dtype(DType t) { return t.is_low_precision_float() ? f32 : t; }

}  // namespace tx::lowering
