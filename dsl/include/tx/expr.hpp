// Expression templates: arithmetic on DSL values builds lightweight objects
// that become IR nodes only when stored or handed to a builder.
//
// The same generic code runs on plain numbers, so a formula is written once:
//
//   auto silu = [](auto x) { return x / (1 + exp(-x)); };
//   silu(2.0);              // double: the reference
//   B(i) = silu(A(i));      // DSL: records  B[i] = A[i] / (1 + T.exp(-A[i]))
//
// Literals adopt the dtype of the DSL operand they meet (1 next to an f16
// value is an f16 1). Mixing two DSL values of different dtypes is an error
// that asks for an explicit cast().
#pragma once

#include <cmath>
#include <concepts>
#include <cstdint>
#include <limits>
#include <tuple>
#include <type_traits>

#include "tx/ir.hpp"

namespace tx {

// Base of every expression-template type (not of Expr itself).
struct ExprTemplateTag {};

template <class T>
concept Literal = std::is_arithmetic_v<std::remove_cvref_t<T>>;
template <class T>
concept DslValue = std::is_base_of_v<Expr, std::remove_cvref_t<T>> ||
    std::is_base_of_v<ExprTemplateTag, std::remove_cvref_t<T>>;
template <class T>
concept Operand = DslValue<T> || Literal<T>;

namespace detail {
// Location of the statement being recorded; expressions inherit it.
SourceLoc current_loc();
// A literal with the dtype of the expression it meets.
Expr literal_like(double v, bool is_integral, DType like);
Expr literal_default(double v, bool is_integral, bool is_bool);
// Binary materialization with literal adaptation and int->float promotion.
Expr combine(BinOp op, const Expr& a, const Expr& b);
// While a kernel is being built, an operand deeper than the builder's limit
// is bound to a T::let part and replaced by its variable (builder.cpp), so
// that no IR traversal recurses deeper than that.
Expr spill_deep(Expr e);
// The location for a node built from these operands: where one of them was
// written (an element access), else the statement being recorded.
SourceLoc use_loc(const Expr& a, const Expr& b = Expr());
[[noreturn]] void fail_undefined(const char* what);
}  // namespace detail

// ------------------------------------------------------------ materialize

inline Expr to_expr(const Expr& e) { return e; }
template <class T>
requires std::is_base_of_v<ExprTemplateTag, T> Expr to_expr(const T& t) { return t.materialize(); }
template <Literal T>
Expr to_expr(T v) {
  return detail::literal_default(static_cast<double>(v), std::is_integral_v<T>,
                                 std::is_same_v<T, bool>);
}

// Materialize `x` next to `other` (literals take other's dtype).
template <Operand X>
Expr to_expr_like(const X& x, const Expr& other) {
  if constexpr (Literal<X>) {
    if (!other.defined()) detail::fail_undefined("tx::Expr");
    return detail::literal_like(static_cast<double>(x), std::is_integral_v<X>, other.dtype());
  } else {
    return to_expr(x);
  }
}

template <BinOp Op, class A, class B>
struct BinaryET : ExprTemplateTag {
  A a;
  B b;
  BinaryET(A x, B y) : a(std::move(x)), b(std::move(y)) {}
  Expr materialize() const {
    if constexpr (Literal<A>) {
      Expr eb = to_expr(b);
      return detail::combine(Op, to_expr_like(a, eb), eb);
    } else if constexpr (Literal<B>) {
      Expr ea = to_expr(a);
      return detail::combine(Op, ea, to_expr_like(b, ea));
    } else {
      return detail::combine(Op, to_expr(a), to_expr(b));
    }
  }
  operator Expr() const { return materialize(); }  // NOLINT: implicit by design
};

template <UnOp Op, class A>
struct UnaryET : ExprTemplateTag {
  A a;
  explicit UnaryET(A x) : a(std::move(x)) {}
  Expr materialize() const {
    Expr x = detail::spill_deep(to_expr(a));
    return make_unary(Op, x, detail::use_loc(x));
  }
  operator Expr() const { return materialize(); }  // NOLINT
};

template <Intrinsic Op, class... Args>
struct CallET : ExprTemplateTag {
  std::tuple<Args...> args;
  explicit CallET(Args... xs) : args(std::move(xs)...) {}
  Expr materialize() const {
    // Literals take the dtype of the first DSL argument.
    Expr anchor;
    std::apply([&](const auto&... x) { ((anchor = anchor ? anchor : materialize_if_dsl(x)), ...); },
               args);
    std::vector<Expr> out;
    std::apply([&](const auto&... x) { (out.push_back(to_expr_like(x, anchor)), ...); }, args);
    SourceLoc loc = detail::use_loc(anchor);
    // An integer argument to a float math function is converted to f32.
    for (Expr& e : out) {
      if (!e.defined()) detail::fail_undefined("tx::Expr");
      e = detail::spill_deep(e);
      if (Op != Intrinsic::fabs && Op != Intrinsic::shfl_xor && e.dtype().is_integer())
        e = make_cast(f32, e, loc);
    }
    return make_call(Op, std::move(out), loc);
  }
  operator Expr() const { return materialize(); }  // NOLINT

 private:
  template <class X>
  static Expr materialize_if_dsl(const X& x) {
    if constexpr (DslValue<X>)
      return to_expr(x);
    else
      return Expr();
  }
};

template <class A>
struct CastET : ExprTemplateTag {
  A a;
  DType to;
  CastET(A x, DType t) : a(std::move(x)), to(t) {}
  Expr materialize() const {
    if constexpr (Literal<A>) {
      return make_cast(to, detail::literal_like(static_cast<double>(a), std::is_integral_v<A>, to),
                       detail::current_loc());
    } else {
      Expr x = detail::spill_deep(to_expr(a));
      return make_cast(to, x, detail::use_loc(x));
    }
  }
  operator Expr() const { return materialize(); }  // NOLINT
};

template <class C, class A, class B>
struct SelectET : ExprTemplateTag {
  C c;
  A a;
  B b;
  SelectET(C x, A y, B z) : c(std::move(x)), a(std::move(y)), b(std::move(z)) {}
  Expr materialize() const {
    Expr cond = detail::spill_deep(to_expr(c));
    Expr x, y;
    if constexpr (Literal<A> && Literal<B>) {
      x = to_expr(a);
      y = to_expr(b);
    } else if constexpr (Literal<A>) {
      y = to_expr(b);
      x = to_expr_like(a, y);
    } else {
      x = to_expr(a);
      y = to_expr_like(b, x);
    }
    x = detail::spill_deep(x);
    y = detail::spill_deep(y);
    return make_select(cond, x, y, detail::use_loc(x, y));
  }
  operator Expr() const { return materialize(); }  // NOLINT
};

// Operand storage: DSL values by value (handles are cheap), literals as-is.
template <class T>
using et_store_t = std::remove_cvref_t<T>;

template <class A, class B>
concept MixedOperands = Operand<A> && Operand<B> &&(DslValue<A> || DslValue<B>);

#define TX_ET_BINARY(SYM, OP)                                       \
  template <class A, class B>                                       \
  requires MixedOperands<A, B>                                      \
  auto operator SYM(const A& a, const B& b) {                       \
    return BinaryET<BinOp::OP, et_store_t<A>, et_store_t<B>>(a, b); \
  }
TX_ET_BINARY(+, Add)
TX_ET_BINARY(-, Sub)
TX_ET_BINARY(*, Mul)
TX_ET_BINARY(/, Div)
TX_ET_BINARY(%, Mod)
TX_ET_BINARY(==, EQ)
TX_ET_BINARY(!=, NE)
TX_ET_BINARY(<, LT)
TX_ET_BINARY(<=, LE)
TX_ET_BINARY(>, GT)
TX_ET_BINARY(>=, GE)
TX_ET_BINARY(&&, And)
TX_ET_BINARY(||, Or)
TX_ET_BINARY(&, BitAnd)
TX_ET_BINARY(|, BitOr)
TX_ET_BINARY(^, BitXor)
TX_ET_BINARY(<<, Shl)
TX_ET_BINARY(>>, Shr)
#undef TX_ET_BINARY

template <DslValue A>
auto operator-(const A& a) {
  return UnaryET<UnOp::Neg, et_store_t<A>>(a);
}
template <DslValue A>
auto operator!(const A& a) {
  return UnaryET<UnOp::Not, et_store_t<A>>(a);
}
template <DslValue A>
auto operator~(const A& a) {
  return UnaryET<UnOp::BitNot, et_store_t<A>>(a);
}

// ------------------------------------------------- functions on both worlds
//
// Each function takes DSL values (building IR) or plain numbers (computing
// the reference in double precision).

#define TX_ET_MATH1(NAME, INTR, HOST)                 \
  template <DslValue A>                               \
  auto NAME(const A& a) {                             \
    return CallET<Intrinsic::INTR, et_store_t<A>>(a); \
  }                                                   \
  template <Literal A>                                \
  auto NAME(A a) {                                    \
    return HOST;                                      \
  }
TX_ET_MATH1(sqrt, sqrt, std::sqrt(static_cast<double>(a)))
TX_ET_MATH1(rsqrt, rsqrt, 1.0 / std::sqrt(static_cast<double>(a)))
TX_ET_MATH1(exp, exp, std::exp(static_cast<double>(a)))
TX_ET_MATH1(exp2, exp2, std::exp2(static_cast<double>(a)))
TX_ET_MATH1(log, log, std::log(static_cast<double>(a)))
TX_ET_MATH1(log2, log2, std::log2(static_cast<double>(a)))
TX_ET_MATH1(log1p, log1p, std::log1p(static_cast<double>(a)))
TX_ET_MATH1(expm1, expm1, std::expm1(static_cast<double>(a)))
TX_ET_MATH1(sin, sin, std::sin(static_cast<double>(a)))
TX_ET_MATH1(cos, cos, std::cos(static_cast<double>(a)))
TX_ET_MATH1(tan, tan, std::tan(static_cast<double>(a)))
TX_ET_MATH1(tanh, tanh, std::tanh(static_cast<double>(a)))
TX_ET_MATH1(erf, erf, std::erf(static_cast<double>(a)))
TX_ET_MATH1(erfc, erfc, std::erfc(static_cast<double>(a)))
// The standard normal CDF, Phi(x) = erfc(-x / sqrt 2) / 2 (CUDA's normcdf):
// no cancellation on either side of zero, unlike (1 + erf(x / sqrt 2)) / 2.
TX_ET_MATH1(normcdf, normcdf, 0.5 * std::erfc(static_cast<double>(a) * -0.70710678118654752440))
TX_ET_MATH1(abs, fabs, (a < 0 ? -a : a))
TX_ET_MATH1(floor, floor, std::floor(static_cast<double>(a)))
TX_ET_MATH1(ceil, ceil, std::ceil(static_cast<double>(a)))
// Round half to even, as torch.round and CUDA's rint.
TX_ET_MATH1(round, round, std::nearbyint(static_cast<double>(a)))
TX_ET_MATH1(trunc, trunc, std::trunc(static_cast<double>(a)))
TX_ET_MATH1(isnan, isnan, std::isnan(static_cast<double>(a)))
TX_ET_MATH1(isinf, isinf, std::isinf(static_cast<double>(a)))
TX_ET_MATH1(isfinite, isfinite, std::isfinite(static_cast<double>(a)))
#undef TX_ET_MATH1

#define TX_ET_MATH2(NAME, INTR, HOST)                                   \
  template <class A, class B>                                           \
  requires MixedOperands<A, B>                                          \
  auto NAME(const A& a, const B& b) {                                   \
    return CallET<Intrinsic::INTR, et_store_t<A>, et_store_t<B>>(a, b); \
  }                                                                     \
  template <Literal A, Literal B>                                       \
  auto NAME(A a, B b) {                                                 \
    return HOST;                                                        \
  }
TX_ET_MATH2(pow, pow, std::pow(static_cast<double>(a), static_cast<double>(b)))
TX_ET_MATH2(fmod, fmod, std::fmod(static_cast<double>(a), static_cast<double>(b)))
TX_ET_MATH2(copysign, copysign, std::copysign(static_cast<double>(a), static_cast<double>(b)))
#undef TX_ET_MATH2

template <class A, class B>
requires MixedOperands<A, B>
auto min(const A& a, const B& b) {
  return BinaryET<BinOp::Min, et_store_t<A>, et_store_t<B>>(a, b);
}
// min/max propagate NaN (as torch.minimum / maximum and the GPU code).
template <Literal A, Literal B>
auto min(A a, B b) {
  using C = std::common_type_t<A, B>;
  C x = static_cast<C>(a), y = static_cast<C>(b);
  if constexpr (std::is_floating_point_v<C>)
    if (x != x || y != y) return x + y;
  return x < y ? x : y;
}
template <class A, class B>
requires MixedOperands<A, B>
auto max(const A& a, const B& b) {
  return BinaryET<BinOp::Max, et_store_t<A>, et_store_t<B>>(a, b);
}
template <Literal A, Literal B>
auto max(A a, B b) {
  using C = std::common_type_t<A, B>;
  C x = static_cast<C>(a), y = static_cast<C>(b);
  if constexpr (std::is_floating_point_v<C>)
    if (x != x || y != y) return x + y;
  return x > y ? x : y;
}

template <class A, class B>
requires MixedOperands<A, B>
auto floordiv(const A& a, const B& b) {
  return BinaryET<BinOp::FloorDiv, et_store_t<A>, et_store_t<B>>(a, b);
}
template <Literal A, Literal B>
auto floordiv(A a, B b) {
  if constexpr (std::is_integral_v<A> && std::is_integral_v<B>) {
    auto q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
  } else {
    return std::floor(static_cast<double>(a) / static_cast<double>(b));
  }
}
template <class A, class B>
requires MixedOperands<A, B>
auto floormod(const A& a, const B& b) {
  return BinaryET<BinOp::FloorMod, et_store_t<A>, et_store_t<B>>(a, b);
}
template <Literal A, Literal B>
auto floormod(A a, B b) {
  if constexpr (std::is_integral_v<A> && std::is_integral_v<B>) {
    auto r = a % b;
    return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
  } else {
    double x = static_cast<double>(a), y = static_cast<double>(b);
    return x - std::floor(x / y) * y;
  }
}

// ceil(a / b) for non-negative integers: the grid of a shape-generic kernel,
// T::cta_id({ceildiv(n, 256)}).
template <class A, class B>
requires MixedOperands<A, B>
auto ceildiv(const A& a, const B& b) {
  if constexpr (Literal<B>)
    return (a + (b - 1)) / b;  // n + 255, not n + 256 - 1
  else
    return (a + b - 1) / b;
}
template <Literal A, Literal B>
auto ceildiv(A a, B b) {
  return (a + b - 1) / b;
}

template <class A, class B, class C>
requires(Operand<A>&& Operand<B>&& Operand<C> &&
         (DslValue<A> || DslValue<B> || DslValue<C>)) auto fma(const A& a, const B& b, const C& c) {
  return CallET<Intrinsic::fma, et_store_t<A>, et_store_t<B>, et_store_t<C>>(a, b, c);
}
template <Literal A, Literal B, Literal C>
double fma(A a, B b, C c) {
  return std::fma(static_cast<double>(a), static_cast<double>(b), static_cast<double>(c));
}

template <class C, class A, class B>
requires(Operand<C>&& Operand<A>&& Operand<B> &&
         (DslValue<C> || DslValue<A> || DslValue<B>)) auto select(const C& c, const A& a,
                                                                  const B& b) {
  return SelectET<et_store_t<C>, et_store_t<A>, et_store_t<B>>(c, a, b);
}
template <Literal C, Literal A, Literal B>
auto select(C c, A a, B b) {
  using R = std::common_type_t<A, B>;
  return c ? static_cast<R>(a) : static_cast<R>(b);
}

// Round a double to the nearest value of `t` as the GPU stores it: RNE;
// e4m3fn saturates to +-448 (NaN stays NaN); other floats overflow to Inf;
// integers truncate toward zero and wrap to their width; bool is x != 0.
double quantize(double v, DType t);

template <DslValue A>
auto cast(const A& a, DType t) {
  return CastET<et_store_t<A>>(a, t);
}
template <Literal A>
double cast(A a, DType t) {
  return quantize(static_cast<double>(a), t);
}

// Bit-level encodings used by tensors and the host runtime.
std::uint64_t encode_bits(double v, DType t);
double decode_bits(std::uint64_t bits, DType t);

}  // namespace tx
