// The operator library's one table (seed 004): every op with its category,
// template, dtype support, output rule and its math, written once as a
// generic lambda. Called with tx::Expr the lambda builds the kernel body;
// called with double it is the reference the tests compare against.
//
// The table is a Boost.Hana tuple: tests, benchmarks and the docs' op list
// iterate it at compile time (tx::optable::for_each_op), and ops.cpp builds the
// runtime registry from it, so an op exists in every one of those places or
// in none.
#pragma once

#include <boost/hana.hpp>
#include <cmath>
#include <cstdint>
#include <string_view>
#include <type_traits>

#include "tx/expr.hpp"

namespace tx::optable {

namespace hana = boost::hana;

// rope and dropout have kernels of their own (rope.cpp, dropout.cpp): rotary
// addressing in place, counter-based random numbers.
enum class Template { unary, binary, gated, independent, rope, dropout };
enum class Category {
  unary_math,
  binary_arith,
  activation,
  fused_gated_activation,
  comparison,
  bitwise,
  logical,
  special_elementwise,
  alibi,
  sinusoidal,
  rope,
  dropout,
};
const char* category_name(Category c);

// Which input dtypes an op accepts.
enum class DTypes : unsigned {
  floats = 1,  // f32, f16, bf16, f8e4m3, f8e5m2 (and f64)
  ints = 2,    // i8..i64, u8..u64
  boolean = 4,
  numeric = 3,   // floats | ints
  integral = 6,  // ints | bool
  all = 7,
  wide_floats = 8,  // f32, f16, bf16 (and f64): rope
};
constexpr bool accepts(DTypes d, DType t) {
  unsigned m = static_cast<unsigned>(d);
  if (t.is_float()) return (m & 1) || ((m & 8) && !t.is_fp8());
  if (t.is_integer()) return m & 2;
  if (t.is_bool()) return m & 4;
  return false;
}

// The output dtype: the input's, or bool (comparisons, predicates, logic).
enum class Out { same, boolean };

// -------------------------------------------------------------- the math
//
// Each lambda takes its inputs already in the compute dtype (f32 for
// f16/bf16/fp8) and, for ops with parameters, a pointer to them.

namespace math {
inline constexpr double kSqrt2OverPi = 0.79788456080286535588;

inline constexpr auto sigmoid = [](auto x) { return 1.0 / (1.0 + exp(-x)); };
// gelu(x) = x/2 (1 + erf(x/sqrt2)) = x Phi(x), written with the normal CDF:
// 1 + erf(t) cancels for negative t, Phi does not (f32 keeps its relative
// accuracy in the tail), and the GPU evaluates Phi in one exponential.
inline constexpr auto gelu = [](auto x) { return x * normcdf(x); };
// The tanh form, x/2 (1 + tanh(y)) = x * sigmoid(2y): same value, no cancellation.
inline constexpr auto gelu_tanh = [](auto x) {
  return x / (1.0 + exp(-2.0 * kSqrt2OverPi * (x + 0.044715 * x * x * x)));
};
inline constexpr auto silu = [](auto x) { return x / (1.0 + exp(-x)); };
// ALiBi: bias[h, i, j] = slope_h (j - i) from the output coordinates, slopes
// as BLOOM / vLLM: for n the largest power of two <= heads, 2^(-8 (h + 1) / n)
// for h < n, then the odd powers of 2^(-4 / n).
inline constexpr auto alibi_bias = [](auto h, auto i, auto j, double heads) {
  std::int64_t n = 1;
  while (static_cast<double>(n * 2) <= heads) n *= 2;
  const double nn = static_cast<double>(n);
  auto hf = cast(h, f32);
  auto slope =
      select(h < n, exp2(hf * (-8.0 / nn) - 8.0 / nn), exp2((hf - nn) * (-8.0 / nn) - 4.0 / nn));
  return slope * cast(j - i, f32);
};
// Sinusoidal, interleaved: pe[p, 2k] = sin(p w_k), pe[p, 2k + 1] = cos(p w_k),
// w_k = 10000^(-2k / dim); the angle in f64 (f32 loses the phase at large p).
inline constexpr auto sinusoidal_pe = [](auto p, auto d, double dim) {
  auto angle = cast(p, f64) * exp2(cast(d / 2 * 2, f64) * (-std::log2(10000.0) / dim));
  return cast(select(d % 2 == 0, sin(angle), cos(angle)), f32);
};
// softplus with PyTorch's default beta = 1, threshold = 20.
inline constexpr auto softplus1 = [](auto x) { return select(x > 20.0, x, log1p(exp(x))); };
// Python's % and // on floats, exact as PyTorch computes them: through fmod
// rather than floor(a / b), whose rounding can cross an integer.
inline constexpr auto remainder = [](auto a, auto b) {
  auto r = fmod(a, b);
  return select((r != 0.0) && ((r < 0.0) != (b < 0.0)), r + b, r);
};
inline constexpr auto floor_divide = [](auto a, auto b) {
  auto m = fmod(a, b);
  auto q = (a - m) / b;
  auto d = select((m != 0.0) && ((b < 0.0) != (m < 0.0)), q - 1.0, q);
  auto f = floor(d);
  // (The rounding step selects f or f + 1 rather than adding a selected
  // 1.0 or 0.0: a select of two literals is an f32 value, which an f64 f
  // cannot add.)
  return select(d == 0.0, copysign(0.0, a / b), select(d - f > 0.5, f + 1.0, f));
};
// max propagates NaN (tx's max, as torch.relu).
inline constexpr auto relu = [](auto x) { return max(x, 0.0); };
}  // namespace math

// Bitwise ops apply to integers and DSL values only; a float reference
// (never evaluated: those ops accept no float dtype) still has to compile.
template <class F, class... X>
constexpr auto bits(F f, X... x) {
  if constexpr ((std::is_floating_point_v<X> || ...))
    return (x + ...);
  else
    return f(x...);
}

struct UnaryDef {
  std::string_view name;
  Category category;
  DTypes dtypes;
  Out out;
};
struct BinaryDef {
  std::string_view name;
  Category category;
  DTypes dtypes;
  Out out;
};

// An op with its own signature: `In` input tensors and `Params` scalar
// parameters (compile-time counts, so the registry can call the lambda with
// exactly that many arguments).
template <int In, int NParams>
struct IndependentDef {
  static constexpr int inputs = In;
  static constexpr int params = NParams;
  std::string_view name;
  Category category;
  DTypes dtypes;
  Out out;
};

// A table entry: the metadata and the lambda, kept together.
template <class Meta, class F>
struct Entry {
  Meta meta;
  F f;
};
template <class Meta, class F>
constexpr Entry<Meta, F> entry(Meta m, F f) {
  return {m, f};
}

// ------------------------------------------------------------ unary (31)

inline constexpr auto kUnaryOps = hana::make_tuple(
    entry(UnaryDef{"exp", Category::unary_math, DTypes::floats, Out::same},
          [](auto x) { return exp(x); }),
    entry(UnaryDef{"log", Category::unary_math, DTypes::floats, Out::same},
          [](auto x) { return log(x); }),
    entry(UnaryDef{"sqrt", Category::unary_math, DTypes::floats, Out::same},
          [](auto x) { return sqrt(x); }),
    entry(UnaryDef{"rsqrt", Category::unary_math, DTypes::floats, Out::same},
          [](auto x) { return rsqrt(x); }),
    entry(UnaryDef{"abs", Category::unary_math, DTypes::numeric, Out::same},
          [](auto x) { return abs(x); }),
    entry(UnaryDef{"neg", Category::unary_math, DTypes::numeric, Out::same},
          [](auto x) { return -x; }),
    entry(UnaryDef{"reciprocal", Category::unary_math, DTypes::floats, Out::same},
          [](auto x) { return 1.0 / x; }),
    entry(UnaryDef{"sign", Category::unary_math, DTypes::floats, Out::same},
          [](auto x) { return select(x > 0.0, 1.0, select(x < 0.0, -1.0, x * 0.0 + x)); }),
    entry(UnaryDef{"sin", Category::unary_math, DTypes::floats, Out::same},
          [](auto x) { return sin(x); }),
    entry(UnaryDef{"cos", Category::unary_math, DTypes::floats, Out::same},
          [](auto x) { return cos(x); }),
    entry(UnaryDef{"floor", Category::unary_math, DTypes::floats, Out::same},
          [](auto x) { return floor(x); }),
    entry(UnaryDef{"ceil", Category::unary_math, DTypes::floats, Out::same},
          [](auto x) { return ceil(x); }),
    entry(UnaryDef{"round", Category::unary_math, DTypes::floats, Out::same},
          [](auto x) { return round(x); }),
    entry(UnaryDef{"trunc", Category::unary_math, DTypes::floats, Out::same},
          [](auto x) { return trunc(x); }),
    entry(UnaryDef{"erf", Category::unary_math, DTypes::floats, Out::same},
          [](auto x) { return erf(x); }),
    entry(UnaryDef{"log1p", Category::unary_math, DTypes::floats, Out::same},
          [](auto x) { return log1p(x); }),
    entry(UnaryDef{"expm1", Category::unary_math, DTypes::floats, Out::same},
          [](auto x) { return expm1(x); }),
    entry(UnaryDef{"relu", Category::activation, DTypes::floats, Out::same}, math::relu),
    entry(UnaryDef{"gelu", Category::activation, DTypes::floats, Out::same}, math::gelu),
    entry(UnaryDef{"silu", Category::activation, DTypes::floats, Out::same}, math::silu),
    entry(UnaryDef{"sigmoid", Category::activation, DTypes::floats, Out::same}, math::sigmoid),
    entry(UnaryDef{"tanh", Category::activation, DTypes::floats, Out::same},
          [](auto x) { return tanh(x); }),
    entry(UnaryDef{"hardswish", Category::activation, DTypes::floats, Out::same},
          [](auto x) { return x * min(max(x + 3.0, 0.0), 6.0) / 6.0; }),
    entry(UnaryDef{"hardsigmoid", Category::activation, DTypes::floats, Out::same},
          [](auto x) { return min(max(x + 3.0, 0.0), 6.0) / 6.0; }),
    entry(UnaryDef{"mish", Category::activation, DTypes::floats, Out::same},
          [](auto x) { return x * tanh(math::softplus1(x)); }),
    entry(UnaryDef{"selu", Category::activation, DTypes::floats, Out::same},
          [](auto x) {
            constexpr double alpha = 1.6732632423543772848170429916717;
            constexpr double scale = 1.0507009873554804934193349852946;
            return scale * select(x > 0.0, x, alpha * expm1(x));
          }),
    entry(UnaryDef{"logical_not", Category::logical, DTypes::all, Out::boolean},
          [](auto x) { return x == 0.0; }),
    entry(UnaryDef{"bitwise_not", Category::bitwise, DTypes::integral, Out::same},
          [](auto x) { return bits([](auto v) { return ~v; }, x); }),
    entry(UnaryDef{"isnan", Category::special_elementwise, DTypes::floats, Out::boolean},
          [](auto x) { return isnan(x); }),
    entry(UnaryDef{"isinf", Category::special_elementwise, DTypes::floats, Out::boolean},
          [](auto x) { return isinf(x); }),
    entry(UnaryDef{"isfinite", Category::special_elementwise, DTypes::floats, Out::boolean},
          [](auto x) { return isfinite(x); }));

// ----------------------------------------------------------- binary (21)

inline constexpr auto kBinaryOps = hana::make_tuple(
    entry(BinaryDef{"add", Category::binary_arith, DTypes::numeric, Out::same},
          [](auto a, auto b) { return a + b; }),
    entry(BinaryDef{"sub", Category::binary_arith, DTypes::numeric, Out::same},
          [](auto a, auto b) { return a - b; }),
    entry(BinaryDef{"mul", Category::binary_arith, DTypes::numeric, Out::same},
          [](auto a, auto b) { return a * b; }),
    entry(BinaryDef{"div", Category::binary_arith, DTypes::floats, Out::same},
          [](auto a, auto b) { return a / b; }),
    // Python's %: the result takes the divisor's sign.
    entry(BinaryDef{"remainder", Category::binary_arith, DTypes::floats, Out::same},
          math::remainder),
    entry(BinaryDef{"pow", Category::binary_arith, DTypes::floats, Out::same},
          [](auto a, auto b) { return pow(a, b); }),
    entry(BinaryDef{"floor_divide", Category::binary_arith, DTypes::floats, Out::same},
          math::floor_divide),
    // torch.lerp(start, end, 0.5): halfway, the binary form of the seed's table.
    entry(BinaryDef{"lerp", Category::binary_arith, DTypes::floats, Out::same},
          [](auto a, auto b) { return a + 0.5 * (b - a); }),
    entry(BinaryDef{"maximum", Category::binary_arith, DTypes::numeric, Out::same},
          [](auto a, auto b) { return max(a, b); }),
    entry(BinaryDef{"minimum", Category::binary_arith, DTypes::numeric, Out::same},
          [](auto a, auto b) { return min(a, b); }),
    entry(BinaryDef{"eq", Category::comparison, DTypes::all, Out::boolean},
          [](auto a, auto b) { return a == b; }),
    entry(BinaryDef{"ne", Category::comparison, DTypes::all, Out::boolean},
          [](auto a, auto b) { return a != b; }),
    entry(BinaryDef{"gt", Category::comparison, DTypes::all, Out::boolean},
          [](auto a, auto b) { return a > b; }),
    entry(BinaryDef{"lt", Category::comparison, DTypes::all, Out::boolean},
          [](auto a, auto b) { return a < b; }),
    entry(BinaryDef{"ge", Category::comparison, DTypes::all, Out::boolean},
          [](auto a, auto b) { return a >= b; }),
    entry(BinaryDef{"le", Category::comparison, DTypes::all, Out::boolean},
          [](auto a, auto b) { return a <= b; }),
    entry(BinaryDef{"logical_and", Category::logical, DTypes::all, Out::boolean},
          [](auto a, auto b) { return (a != 0.0) && (b != 0.0); }),
    entry(BinaryDef{"logical_or", Category::logical, DTypes::all, Out::boolean},
          [](auto a, auto b) { return (a != 0.0) || (b != 0.0); }),
    entry(BinaryDef{"bitwise_and", Category::bitwise, DTypes::integral, Out::same},
          [](auto a, auto b) { return bits([](auto x, auto y) { return x & y; }, a, b); }),
    entry(BinaryDef{"bitwise_or", Category::bitwise, DTypes::integral, Out::same},
          [](auto a, auto b) { return bits([](auto x, auto y) { return x | y; }, a, b); }),
    entry(BinaryDef{"bitwise_xor", Category::bitwise, DTypes::integral, Out::same},
          [](auto a, auto b) { return bits([](auto x, auto y) { return x ^ y; }, a, b); }));

// ------------------------------------------------------- fused gated (3)
//
// (M, 2N) -> (M, N): out[m, n] = act(x[m, n]) * x[m, N + n] (gate first, as vLLM).

inline constexpr auto kGatedOps = hana::make_tuple(
    entry(UnaryDef{"silu_and_mul", Category::fused_gated_activation, DTypes::floats, Out::same},
          math::silu),
    entry(UnaryDef{"gelu_and_mul", Category::fused_gated_activation, DTypes::floats, Out::same},
          math::gelu),
    entry(
        UnaryDef{"gelu_tanh_and_mul", Category::fused_gated_activation, DTypes::floats, Out::same},
        math::gelu_tanh));

// ------------------------------------------------------- independent (11)
//
// Their own signatures. An elementwise one takes its inputs, then its scalar
// parameters, then the dtype it computes in (the tensor's dtype in the
// reference, the kernel's compute dtype in the kernel; only masked_fill uses
// it). alibi and sinusoidal read no tensor: their lambdas take the output
// coordinates (integers) and the op's parameters.

inline constexpr auto kIndependentOps = hana::make_tuple(
    entry(IndependentDef<1, 1>{"leaky_relu", Category::activation, DTypes::floats, Out::same},
          [](auto x, auto slope, DType) { return select(x > 0.0, x, x * slope); }),
    entry(IndependentDef<1, 1>{"elu", Category::activation, DTypes::floats, Out::same},
          [](auto x, auto alpha, DType) { return select(x > 0.0, x, alpha * expm1(x)); }),
    // min / max propagate NaN, so NaN stays NaN (as torch).
    entry(IndependentDef<1, 2>{"hardtanh", Category::activation, DTypes::floats, Out::same},
          [](auto x, auto lo, auto hi, DType) { return min(max(x, lo), hi); }),
    // Linear past the threshold, where log1p(exp(beta x)) / beta equals x in floating point.
    entry(IndependentDef<1, 2>{"softplus", Category::activation, DTypes::floats, Out::same},
          [](auto x, auto beta, auto threshold, DType) {
            return select(x * beta > threshold, x, log1p(exp(x * beta)) / beta);
          }),
    // The weight is broadcast along dimension 1 (channels) by ops.cpp.
    entry(IndependentDef<2, 0>{"prelu", Category::activation, DTypes::floats, Out::same},
          [](auto x, auto weight, DType) { return select(x > 0.0, x, weight * x); }),
    entry(IndependentDef<3, 0>{"where", Category::special_elementwise, DTypes::all, Out::same},
          [](auto cond, auto a, auto b, DType) { return select(cond, a, b); }),
    entry(IndependentDef<1, 2>{"clamp", Category::special_elementwise, DTypes::numeric, Out::same},
          [](auto x, auto lo, auto hi, DType) { return min(max(x, lo), hi); }),
    // The fill value rounded to the tensor's dtype first (3.5 into int32 is 3, as torch).
    entry(
        IndependentDef<2, 1>{"masked_fill", Category::special_elementwise, DTypes::all, Out::same},
        [](auto x, auto mask, auto value, DType t) { return select(mask, cast(value, t), x); }),
    entry(IndependentDef<1, 3>{"nan_to_num", Category::special_elementwise, DTypes::floats,
                               Out::same},
          [](auto x, auto nan, auto posinf, auto neginf, DType) {
            return select(isnan(x), nan, select(isinf(x), select(x > 0.0, posinf, neginf), x));
          }),
    entry(IndependentDef<0, 2>{"alibi", Category::alibi, DTypes::floats, Out::same},
          math::alibi_bias),
    entry(IndependentDef<0, 2>{"sinusoidal", Category::sinusoidal, DTypes::floats, Out::same},
          math::sinusoidal_pe));

// ------------------------------------------------ rope (5) and dropout (1)
//
// Their own signatures and kernels (tx/ops/rope.hpp, tx/ops/dropout.hpp); the
// table holds their metadata. rope: positions, q, k, cos_sin_cache; the
// parameters head_size, rotary_dim, is_neox, inverse. llama31 / yarn /
// longrope are the neox rotation over the caches of those scalings
// (rope_cache_llama31 / _yarn / _longrope). dropout: x; p, seed, offset.
struct SpecialDef {
  std::string_view name;
  Category category;
  DTypes dtypes;
  Out out;
  int inputs;
  int params;
};
inline constexpr auto kNoElementwiseForm = [] {};

inline constexpr auto kRopeOps = hana::make_tuple(
    entry(SpecialDef{"rope_neox", Category::rope, DTypes::wide_floats, Out::same, 4, 4},
          kNoElementwiseForm),
    entry(SpecialDef{"rope_non_neox", Category::rope, DTypes::wide_floats, Out::same, 4, 4},
          kNoElementwiseForm),
    entry(SpecialDef{"rope_llama31", Category::rope, DTypes::wide_floats, Out::same, 4, 4},
          kNoElementwiseForm),
    entry(SpecialDef{"rope_yarn", Category::rope, DTypes::wide_floats, Out::same, 4, 4},
          kNoElementwiseForm),
    entry(SpecialDef{"rope_longrope", Category::rope, DTypes::wide_floats, Out::same, 4, 4},
          kNoElementwiseForm));
inline constexpr auto kDropoutOps = hana::make_tuple(entry(
    SpecialDef{"dropout", Category::dropout, DTypes::floats, Out::same, 1, 3}, kNoElementwiseForm));

// Calls f(entry) for every op of every template, at compile time.
template <class F>
void for_each_op(F&& f) {
  hana::for_each(kUnaryOps, f);
  hana::for_each(kBinaryOps, f);
  hana::for_each(kGatedOps, f);
  hana::for_each(kIndependentOps, f);
  hana::for_each(kRopeOps, f);
  hana::for_each(kDropoutOps, f);
}

}  // namespace tx::optable
