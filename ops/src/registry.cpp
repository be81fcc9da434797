// The registry: each Hana table entry becomes an OpInfo whose expr calls
// the entry's lambda with Exprs and whose ref calls the same lambda with
// doubles (or int64 for integer dtypes) -- one definition, two uses.
#include "tx/ops/registry.hpp"

#include <cmath>
#include <limits>

namespace tx::optable {
const char* category_name(Category c) {
  switch (c) {
    case Category::unary_math: return "unary_math";
    case Category::binary_arith: return "binary_arith";
    case Category::activation: return "activation";
    case Category::fused_gated_activation: return "fused_gated_activation";
    case Category::comparison: return "comparison";
    case Category::bitwise: return "bitwise";
    case Category::logical: return "logical";
    case Category::special_elementwise: return "special_elementwise";
    case Category::alibi: return "alibi";
    case Category::sinusoidal: return "sinusoidal";
  }
  return "?";
}
}  // namespace tx::optable

namespace tx::ops {

namespace {

using optable::Category;
using optable::DTypes;
using optable::Out;
using optable::Template;

template <class R>
double as_double(R r) {
  if constexpr (std::is_same_v<R, bool>)
    return r ? 1.0 : 0.0;
  else
    return static_cast<double>(r);
}

// Evaluates the lambda with the C++ type matching the dtype class.
template <class F>
double eval_ref1(F f, double x, DType t) {
  if (t.is_integer() || t.is_bool()) return as_double(f(static_cast<std::int64_t>(x)));
  return as_double(f(x));
}
template <class F>
double eval_ref2(F f, double a, double b, DType t) {
  if (t.is_integer() || t.is_bool())
    return as_double(f(static_cast<std::int64_t>(a), static_cast<std::int64_t>(b)));
  return as_double(f(a, b));
}

std::vector<OpInfo> build() {
  std::vector<OpInfo> ops;
  boost::hana::for_each(optable::kUnaryOps, [&](auto e) {
    auto f = e.f;
    OpInfo o{std::string(e.meta.name), Template::unary, e.meta.category, e.meta.dtypes, e.meta.out, 1, 0,
             [f](const std::vector<Expr>& x, const Params&) { return to_expr(f(x[0])); },
             [f](const std::vector<double>& x, const Params&, DType t) { return eval_ref1(f, x[0], t); }};
    ops.push_back(o);
  });
  boost::hana::for_each(optable::kBinaryOps, [&](auto e) {
    auto f = e.f;
    OpInfo o{std::string(e.meta.name), Template::binary, e.meta.category, e.meta.dtypes, e.meta.out, 2, 0,
             [f](const std::vector<Expr>& x, const Params&) { return to_expr(f(x[0], x[1])); },
             [f](const std::vector<double>& x, const Params&, DType t) { return eval_ref2(f, x[0], x[1], t); }};
    ops.push_back(o);
  });
  boost::hana::for_each(optable::kGatedOps, [&](auto e) {
    auto f = e.f;
    OpInfo o{std::string(e.meta.name), Template::gated, e.meta.category, e.meta.dtypes, e.meta.out, 1, 0,
             [f](const std::vector<Expr>& x, const Params&) { return to_expr(f(x[0]) * x[1]); },
             [f](const std::vector<double>& x, const Params&, DType) { return f(x[0]) * x[1]; }};
    ops.push_back(o);
  });

  // Independent ops: their own signatures and scalar parameters.
  auto add = [&](std::string name, Category c, DTypes d, int inputs, int params,
                 std::function<Expr(const std::vector<Expr>&, const Params&)> expr,
                 std::function<double(const std::vector<double>&, const Params&, DType)> ref,
                 Out out = Out::same) {
    ops.push_back({std::move(name), Template::independent, c, d, out, inputs, params, std::move(expr),
                   std::move(ref)});
  };
  using V = const std::vector<Expr>&;
  using D = const std::vector<double>&;
  using P = const Params&;
  add("leaky_relu", Category::activation, DTypes::floats, 1, 1,
      [](V x, P p) { return to_expr(select(x[0] > 0.0, x[0], x[0] * p[0])); },
      [](D x, P p, DType) { return x[0] > 0 ? x[0] : x[0] * p[0]; });
  add("elu", Category::activation, DTypes::floats, 1, 1,
      [](V x, P p) { return to_expr(select(x[0] > 0.0, x[0], p[0] * expm1(x[0]))); },
      [](D x, P p, DType) { return x[0] > 0 ? x[0] : p[0] * std::expm1(x[0]); });
  add("hardtanh", Category::activation, DTypes::floats, 1, 2,
      [](V x, P p) { return to_expr(min(max(x[0], p[0]), p[1])); },
      [](D x, P p, DType) { return std::isnan(x[0]) ? x[0] : std::min(std::max(x[0], p[0]), p[1]); });
  add("softplus", Category::activation, DTypes::floats, 1, 2,
      [](V x, P p) {
        Expr bx = x[0] * p[0];
        return to_expr(select(bx > p[1], x[0], log1p(exp(bx)) / p[0]));
      },
      [](D x, P p, DType) { return x[0] * p[0] > p[1] ? x[0] : std::log1p(std::exp(x[0] * p[0])) / p[0]; });
  add("prelu", Category::activation, DTypes::floats, 2, 0,
      [](V x, P) { return to_expr(select(x[0] > 0.0, x[0], x[1] * x[0])); },
      [](D x, P, DType) { return x[0] > 0 ? x[0] : x[1] * x[0]; });
  add("where", Category::special_elementwise, DTypes::all, 3, 0,
      [](V x, P) { return to_expr(select(x[0], x[1], x[2])); },
      [](D x, P, DType) { return x[0] != 0 ? x[1] : x[2]; });
  add("clamp", Category::special_elementwise, DTypes::numeric, 1, 2,
      [](V x, P p) { return to_expr(min(max(x[0], p[0]), p[1])); },
      [](D x, P p, DType) { return std::isnan(x[0]) ? x[0] : std::min(std::max(x[0], p[0]), p[1]); });
  add("masked_fill", Category::special_elementwise, DTypes::all, 2, 1,
      // The fill value in the tensor's dtype first (3.5 into int32 is 3, as torch).
      [](V x, P p) { return to_expr(select(x[1], cast(p[0], x[0].dtype()), x[0])); },
      [](D x, P p, DType t) { return x[1] != 0 ? cast(p[0], t) : x[0]; });
  add("nan_to_num", Category::special_elementwise, DTypes::floats, 1, 3,
      [](V x, P p) {
        return to_expr(select(isnan(x[0]), p[0],
                              select(isinf(x[0]), select(x[0] > 0.0, p[1], p[2]), x[0])));
      },
      [](D x, P p, DType) {
        if (std::isnan(x[0])) return p[0];
        if (std::isinf(x[0])) return x[0] > 0 ? p[1] : p[2];
        return x[0];
      });
  // alibi and sinusoidal compute from the output index (see ops.cpp).
  add("alibi", Category::alibi, DTypes::floats, 0, 2, nullptr, nullptr);
  add("sinusoidal", Category::sinusoidal, DTypes::floats, 0, 2, nullptr, nullptr);
  return ops;
}

}  // namespace

const std::vector<OpInfo>& all_ops() {
  static const std::vector<OpInfo>* ops = new std::vector<OpInfo>(build());
  return *ops;
}

const OpInfo* find_op(const std::string& name) {
  for (const OpInfo& o : all_ops())
    if (o.name == name) return &o;
  return nullptr;
}

DType compute_dtype_for(DType t) { return t.is_low_precision_float() ? f32 : t; }

DType out_dtype_for(const OpInfo& op, DType t) { return op.out == Out::boolean ? boolean : t; }

}  // namespace tx::ops
