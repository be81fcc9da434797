// The registry: each Hana table entry becomes an OpInfo whose expr calls
// the entry's lambda with Exprs and whose ref calls the same lambda with
// doubles (or int64 for integer dtypes) -- one definition, two uses. Every
// op, the independent ones included, comes from the table (op_table.hpp).
#include "tx/ops/registry.hpp"

#include <cmath>
#include <limits>
#include <utility>

namespace tx::optable {
const char* category_name(Category c) {
  switch (c) {
    case Category::unary_math:
      return "unary_math";
    case Category::binary_arith:
      return "binary_arith";
    case Category::activation:
      return "activation";
    case Category::fused_gated_activation:
      return "fused_gated_activation";
    case Category::comparison:
      return "comparison";
    case Category::bitwise:
      return "bitwise";
    case Category::logical:
      return "logical";
    case Category::special_elementwise:
      return "special_elementwise";
    case Category::alibi:
      return "alibi";
    case Category::sinusoidal:
      return "sinusoidal";
    case Category::rope:
      return "rope";
    case Category::dropout:
      return "dropout";
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

// f(x[0], ..., x[In-1], p[0], ..., p[NParams-1], t).
template <int In, int NParams, class F, class X>
auto call_independent(F f, const std::vector<X>& x, const Params& p, DType t) {
  return [&]<std::size_t... I, std::size_t... J>(std::index_sequence<I...>,
                                                 std::index_sequence<J...>) {
    return f(x[I]..., p[J]..., t);
  }
  (std::make_index_sequence<In>{}, std::make_index_sequence<NParams>{});
}

std::vector<OpInfo> build() {
  std::vector<OpInfo> ops;
  boost::hana::for_each(optable::kUnaryOps, [&](auto e) {
    auto f = e.f;
    OpInfo o{std::string(e.meta.name),
             Template::unary,
             e.meta.category,
             e.meta.dtypes,
             e.meta.out,
             1,
             0,
             [f](const std::vector<Expr>& x, const Params&) { return to_expr(f(x[0])); },
             [f](const std::vector<double>& x, const Params&, DType t) {
               return eval_ref1(f, x[0], t);
             }};
    ops.push_back(o);
  });
  boost::hana::for_each(optable::kBinaryOps, [&](auto e) {
    auto f = e.f;
    OpInfo o{std::string(e.meta.name),
             Template::binary,
             e.meta.category,
             e.meta.dtypes,
             e.meta.out,
             2,
             0,
             [f](const std::vector<Expr>& x, const Params&) { return to_expr(f(x[0], x[1])); },
             [f](const std::vector<double>& x, const Params&, DType t) {
               return eval_ref2(f, x[0], x[1], t);
             }};
    ops.push_back(o);
  });
  boost::hana::for_each(optable::kGatedOps, [&](auto e) {
    auto f = e.f;
    OpInfo o{std::string(e.meta.name),
             Template::gated,
             e.meta.category,
             e.meta.dtypes,
             e.meta.out,
             1,
             0,
             [f](const std::vector<Expr>& x, const Params&) { return to_expr(f(x[0]) * x[1]); },
             [f](const std::vector<double>& x, const Params&, DType) { return f(x[0]) * x[1]; }};
    ops.push_back(o);
  });

  // Independent ops: their own signatures and scalar parameters. alibi and
  // sinusoidal read no tensor (ops.cpp calls their lambdas on the output
  // coordinates), so they have no per-element expr / ref here.
  boost::hana::for_each(optable::kIndependentOps, [&](auto e) {
    using Meta = decltype(e.meta);
    constexpr int kIn = Meta::inputs, kParams = Meta::params;
    OpInfo o{std::string(e.meta.name),
             Template::independent,
             e.meta.category,
             e.meta.dtypes,
             e.meta.out,
             kIn,
             kParams,
             nullptr,
             nullptr};
    if constexpr (kIn > 0) {
      auto f = e.f;
      o.expr = [f](const std::vector<Expr>& x, const Params& p) {
        return to_expr(call_independent<kIn, kParams>(f, x, p, x[0].dtype()));
      };
      o.ref = [f](const std::vector<double>& x, const Params& p, DType t) {
        if (t.is_integer() || t.is_bool()) {
          std::vector<std::int64_t> xi(x.begin(), x.end());
          return as_double(call_independent<kIn, kParams>(f, xi, p, t));
        }
        return as_double(call_independent<kIn, kParams>(f, x, p, t));
      };
    }
    ops.push_back(o);
  });

  // rope and dropout: metadata only. Their kernels are not of the
  // elementwise template, so run() / Elementwise refuse them by name.
  auto special = [&](Template tmpl) {
    return [&ops, tmpl](auto e) {
      std::string name(e.meta.name);
      OpInfo o{name,
               tmpl,
               e.meta.category,
               e.meta.dtypes,
               e.meta.out,
               e.meta.inputs,
               e.meta.params,
               [name](const std::vector<Expr>&, const Params&) -> Expr {
                 fail("tx.ops." + name, "", {},
                      "is not an elementwise op: call tx::ops::" +
                          std::string(name == "dropout" ? "dropout" : "rope") + "(...)");
               },
               nullptr};
      ops.push_back(o);
    };
  };
  boost::hana::for_each(optable::kRopeOps, special(Template::rope));
  boost::hana::for_each(optable::kDropoutOps, special(Template::dropout));
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
