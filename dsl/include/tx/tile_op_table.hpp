// Every tile op, defined once: one row of TX_TILE_OP_TABLE per op. From the
// row come
//
//   - its builders Tx::<scope>::<op>(...), one per execution scope
//     (builder.hpp expands the table; the signature column says their
//     parameters);
//   - make_tile_call's validation: the op exists, runs at the call's scope,
//     gets its operands in their roles (a tile, a scalar, either), and takes
//     only attributes it accepts where the builder can tell (partial=,
//     transpose_b=);
//   - the checks its variants make from it (scale/bias, axes/accum, dtype
//     rule, commutativity) and, for an elementwise op, the math the
//     elementwise variants emit for one element;
//   - the dispatch registry's candidates: the variants registered for its
//     family (or for its name);
//   - the fuzzers' op lists and properties (fuzz/*.hpp);
//   - its line in the docs index (docs/tile_ops.md, made by
//     tile_op_index_markdown() and held to it by a test).
//
// Adding an op is one row here, its variants if its family has none that
// fit (lowering/src/variants/, registered for the family), and its tests.
// An op of an existing family needs no variant: an elementwise op is lowered
// by elementwise/reg and elementwise/smem from its MATH column.
//
// The columns:
//   NAME     the builder's name and the op's ("sqrt")
//   FAMILY   the variant family dispatch looks up: copy, copy_async, gemm,
//            elementwise, reduction (a string in TileOpDef)
//   SIG      the builder's parameters and the operands' roles (TileSig):
//              dst_src    (TileOperand dst, TileOperand src)
//              dst        (TileOperand dst)
//              dst_value  (TileOperand dst, Value value)
//              dst_2      (TileOperand dst, TileOrScalar a, TileOrScalar b)
//              dst_3      (TileOperand dst, TileOrScalar a, TileOrScalar b, TileOrScalar c)
//              d_a_b      (TileOperand d, TileOperand a, TileOperand b)
//            the first operand is the one written.
//   SCOPES   the execution scopes it runs at (TX_SCOPES_ALL, or TX_SCOPE(warp) | ...)
//   ATTRS    the TileAttrs fields it takes beyond variant= (TX_ATTR(scale_bias) | ...; 0)
//   DTYPE    the dtype rule (DTypeRule): same, float_only, converts, bits, gemm
//   FLAGS    TX_FLAG(commutative): a scalar left operand may swap to the right;
//            TX_FLAG(global): its tiles may be in global memory;
//            TX_FLAG(fuzz): the builder-call fuzzer calls it with random operands
//   DOC      its page under docs/ (the variants that lower it)
//   SUMMARY  one line for the docs index
//   MATH     elementwise: TX_MATH(expression of `x`, the inputs as Exprs in the
//            compute dtype); else TX_NO_MATH
//   COMBINE  reductions: TX_COMBINE(Add) (the BinOp that folds two values); else TX_NO_COMBINE
//
// How the attention work adds, say, a masked select (dst = cond ? a : b):
//   X(select, elementwise, dst_3, TX_SCOPES_ALL, 0, same, TX_FLAG(fuzz),
//     "variants/elementwise_reg.md", "cond ? a : b, elementwise",
//     TX_MATH(make_select(x[0], x[1], x[2])), TX_NO_COMBINE)
// and tests; Tx::warp::select(...) & co. then exist, dispatch and are fuzzed.
// A new signature (operand roles) is one TX_TILE_SIG_<name> builder macro
// below and a case of tile_sig_operands (tile_op_table.cpp).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "tx/ir.hpp"

// clang-format off
#define TX_TILE_OP_TABLE(X)                                                                         \
  X(copy, copy, dst_src, TX_SCOPES_ALL, TX_ATTR(partial) | TX_ATTR(where), bits, TX_FLAG(global) | TX_FLAG(fuzz),   \
    "variants/copy_reg.md", "copies a tile between any two memories (registers, shared, global)", \
    TX_NO_MATH, TX_NO_COMBINE)                                                                      \
  X(copy_async, copy_async, dst_src, TX_SCOPES_ALL, TX_ATTR(partial) | TX_ATTR(barrier), bits,      \
    TX_FLAG(global), "variants/copy_async_tma.md",                                                  \
    "an asynchronous copy (cp.async, TMA) completing on wait groups or an mbarrier",               \
    TX_NO_MATH, TX_NO_COMBINE)                                                                      \
  X(atomic_add, atomic, dst_src, TX_SCOPES_ALL, TX_ATTR(partial) | TX_ATTR(where), same,           \
    TX_FLAG(global), "variants/atomic_reg.md",                                                      \
    "dst += src by atomics (a register or shared tile into float32 global / shared memory)",       \
    TX_NO_MATH, TX_NO_COMBINE)                                                                      \
  X(gemm, gemm, d_a_b, TX_SCOPES_ALL,                                                               \
    TX_ATTR(accum) | TX_ATTR(pending) | TX_ATTR(transpose_b), gemm, TX_FLAG(global),               \
    "variants/gemm_wgmma.md", "D = A B (or D += A B), on tensor cores where a variant applies",    \
    TX_NO_MATH, TX_NO_COMBINE)                                                                      \
  X(zero, elementwise, dst, TX_SCOPES_ALL, TX_ATTR(where), converts, TX_FLAG(fuzz),                              \
    "variants/elementwise_reg.md", "dst = 0", TX_MATH(Expr()), TX_NO_COMBINE)                      \
  X(fill, elementwise, dst_value, TX_SCOPES_ALL, TX_ATTR(where), converts, TX_FLAG(fuzz),                        \
    "variants/elementwise_reg.md", "dst = value", TX_MATH(x[0]), TX_NO_COMBINE)                    \
  X(cast, elementwise, dst_src, TX_SCOPES_ALL, TX_ATTR(where), converts, TX_FLAG(fuzz),                          \
    "variants/elementwise_reg.md", "dst = src converted to dst's dtype", TX_MATH(x[0]),            \
    TX_NO_COMBINE)                                                                                  \
  X(sqrt, elementwise, dst_src, TX_SCOPES_ALL, TX_ATTR(scale_bias) | TX_ATTR(where), float_only, TX_FLAG(fuzz),      \
    "variants/elementwise_reg.md", "sqrt(x * scale + bias)",                                       \
    TX_MATH(make_call(Intrinsic::sqrt, {x[0]})), TX_NO_COMBINE)                                    \
  X(exp, elementwise, dst_src, TX_SCOPES_ALL, TX_ATTR(scale_bias) | TX_ATTR(where), float_only, TX_FLAG(fuzz),       \
    "variants/elementwise_reg.md", "exp(x * scale + bias)",                                        \
    TX_MATH(make_call(Intrinsic::exp, {x[0]})), TX_NO_COMBINE)                                     \
  X(silu, elementwise, dst_src, TX_SCOPES_ALL, TX_ATTR(scale_bias) | TX_ATTR(where), float_only, TX_FLAG(fuzz),      \
    "variants/elementwise_reg.md", "x / (1 + exp(-x)) of x * scale + bias",                        \
    TX_MATH(make_binary(BinOp::Div, x[0], make_binary(BinOp::Add, tile_math::one_like(x[0]),       \
            make_call(Intrinsic::exp, {make_unary(UnOp::Neg, x[0])})))), TX_NO_COMBINE)           \
  X(add, elementwise, dst_2, TX_SCOPES_ALL, TX_ATTR(where), same, TX_FLAG(commutative) | TX_FLAG(fuzz),          \
    "variants/elementwise_reg.md", "a + b (NumPy broadcasting)",                                   \
    TX_MATH(make_binary(BinOp::Add, x[0], x[1])), TX_NO_COMBINE)                                   \
  X(mul, elementwise, dst_2, TX_SCOPES_ALL, TX_ATTR(where), same, TX_FLAG(commutative) | TX_FLAG(fuzz),          \
    "variants/elementwise_reg.md", "a * b (NumPy broadcasting)",                                   \
    TX_MATH(make_binary(BinOp::Mul, x[0], x[1])), TX_NO_COMBINE)                                   \
  X(fdiv, elementwise, dst_2, TX_SCOPES_ALL, TX_ATTR(where), float_only, TX_FLAG(fuzz),                          \
    "variants/elementwise_reg.md", "a / b in floating point",                                      \
    TX_MATH(make_binary(BinOp::Div, x[0], x[1])), TX_NO_COMBINE)                                   \
  X(maximum, elementwise, dst_2, TX_SCOPES_ALL, TX_ATTR(where), same, TX_FLAG(commutative) | TX_FLAG(fuzz),      \
    "variants/elementwise_reg.md", "max(a, b), NaN propagating",                                   \
    TX_MATH(make_binary(BinOp::Max, x[0], x[1])), TX_NO_COMBINE)                                   \
  X(fma, elementwise, dst_3, TX_SCOPES_ALL, TX_ATTR(where), same, TX_FLAG(fuzz),                                 \
    "variants/elementwise_reg.md", "a * b + c (fused for floats)",                                 \
    TX_MATH(x[0].dtype().is_float() ? make_call(Intrinsic::fma, {x[0], x[1], x[2]})                \
            : make_binary(BinOp::Add, make_binary(BinOp::Mul, x[0], x[1]), x[2])), TX_NO_COMBINE)  \
  X(sum, reduction, dst_src, TX_SCOPES_ALL, TX_ATTR(accum) | TX_ATTR(axes), same, TX_FLAG(fuzz),    \
    "variants/reduction_local.md", "the sum over axes of src", TX_NO_MATH, TX_COMBINE(Add))        \
  X(max, reduction, dst_src, TX_SCOPES_ALL, TX_ATTR(accum) | TX_ATTR(axes), same, TX_FLAG(fuzz),    \
    "variants/reduction_local.md", "the maximum over axes of src", TX_NO_MATH, TX_COMBINE(Max))    \
  X(min, reduction, dst_src, TX_SCOPES_ALL, TX_ATTR(accum) | TX_ATTR(axes), same, TX_FLAG(fuzz),    \
    "variants/reduction_local.md", "the minimum over axes of src", TX_NO_MATH, TX_COMBINE(Min))    \
  X(reciprocal, elementwise, dst_src, TX_SCOPES_ALL, TX_ATTR(scale_bias) | TX_ATTR(where), float_only,               \
    TX_FLAG(fuzz), "variants/elementwise_reg.md", "1 / (x * scale + bias)",                        \
    TX_MATH(make_binary(BinOp::Div, tile_math::one_like(x[0]), x[0])), TX_NO_COMBINE)              \
  X(log, elementwise, dst_src, TX_SCOPES_ALL, TX_ATTR(scale_bias) | TX_ATTR(where), float_only,   \
    TX_FLAG(fuzz), "variants/elementwise_reg.md", "ln(x * scale + bias)",                          \
    TX_MATH(make_call(Intrinsic::log, {x[0]})), TX_NO_COMBINE)                                     \
  X(log2, elementwise, dst_src, TX_SCOPES_ALL, TX_ATTR(scale_bias) | TX_ATTR(where), float_only,  \
    TX_FLAG(fuzz), "variants/elementwise_reg.md", "log2(x * scale + bias)",                        \
    TX_MATH(make_call(Intrinsic::log2, {x[0]})), TX_NO_COMBINE)                                    \
  X(exp2, elementwise, dst_src, TX_SCOPES_ALL, TX_ATTR(scale_bias) | TX_ATTR(where), float_only, TX_FLAG(fuzz),      \
    "variants/elementwise_reg.md", "2^(x * scale + bias)",                                         \
    TX_MATH(make_call(Intrinsic::exp2, {x[0]})), TX_NO_COMBINE)                                    \
  X(sub, elementwise, dst_2, TX_SCOPES_ALL, TX_ATTR(where), same, TX_FLAG(fuzz),                                 \
    "variants/elementwise_reg.md", "a - b (NumPy broadcasting)",                                   \
    TX_MATH(make_binary(BinOp::Sub, x[0], x[1])), TX_NO_COMBINE)                                   \
  X(minimum, elementwise, dst_2, TX_SCOPES_ALL, TX_ATTR(where), same, TX_FLAG(commutative) | TX_FLAG(fuzz),      \
    "variants/elementwise_reg.md", "min(a, b), NaN propagating",                                   \
    TX_MATH(make_binary(BinOp::Min, x[0], x[1])), TX_NO_COMBINE)
// clang-format on

// The column helpers.
#define TX_SCOPE(S) (1u << static_cast<unsigned>(::tx::ExecScope::S))
#define TX_SCOPES_ALL (TX_SCOPE(thread) | TX_SCOPE(warp) | TX_SCOPE(warpgroup) | TX_SCOPE(cta))
#define TX_ATTR(A) static_cast<unsigned>(::tx::TileAttr::A)
#define TX_FLAG(F) static_cast<unsigned>(::tx::TileOpFlag::F)
#define TX_MATH(...)                                   \
  [](const std::vector<::tx::Expr>& x) -> ::tx::Expr { \
    (void)x;                                           \
    return __VA_ARGS__;                                \
  }
#define TX_NO_MATH nullptr
#define TX_COMBINE(OP) ::std::optional<::tx::BinOp>(::tx::BinOp::OP)
#define TX_NO_COMBINE ::std::nullopt

// One row as a TileOpDef (for add_tile_ops and the built-in table).
#define TX_TILE_OP_DEF(NAME, FAMILY, SIG, SCOPES, ATTRS, DTYPE, FLAGS, DOC, SUMMARY, MATH, \
                       COMBINE)                                                            \
  ::tx::TileOpDef{#NAME,    #FAMILY, ::tx::TileSig::SIG,                                   \
                  (SCOPES), (ATTRS), ::tx::DTypeRule::DTYPE,                               \
                  (FLAGS),  DOC,     SUMMARY,                                              \
                  MATH,     COMBINE},

namespace tx {

enum class TileSig : std::uint8_t { dst_src, dst, dst_value, dst_2, dst_3, d_a_b };

// What an operand of a tile op is.
enum class OperandRole : std::uint8_t {
  tile,            // a buffer region (a whole buffer is one)
  tile_or_scalar,  // a region, or a scalar expression
  scalar,          // a scalar expression
};
struct OperandDef {
  const char* name;
  OperandRole role;
  bool written;
};
// The operands a signature gives, destination first.
const std::vector<OperandDef>& tile_sig_operands(TileSig s);
const char* tile_sig_name(TileSig s);

// TileAttrs fields an op may take (variant= and dtype every op takes).
enum class TileAttr : unsigned {
  scale_bias = 1u << 0,   // .scale / .bias: op(x * scale + bias)
  accum = 1u << 1,        // fold into the destination's old value
  axes = 1u << 2,         // reduce these source axes
  barrier = 1u << 3,      // complete on an mbarrier
  pending = 1u << 4,      // wgmma groups left in flight
  transpose_b = 1u << 5,  // B given as (N, K)
  partial = 1u << 6,      // regions may reach past a tensor's end
  where = 1u << 7,        // write only where a condition on the coordinates holds
};
const char* tile_attr_name(TileAttr a);  // "scale_bias", ...

enum class TileOpFlag : unsigned {
  commutative = 1u << 0,  // a scalar left operand may be swapped to the right
  global = 1u << 1,       // its tiles may live in global memory
  fuzz = 1u << 2,         // the builder-call fuzzer calls it with random operands
};

// How the operands' dtypes relate.
enum class DTypeRule : std::uint8_t {
  same,        // the destination's (float tiles may mix: the math in the widest)
  float_only,  // as same, for float dtypes only
  converts,    // the destination's dtype may differ from the inputs' (cast, fill, zero)
  bits,        // moves bits: every tile of one dtype (copies)
  gemm,        // A and B of one dtype, D the accumulator's (the variants say which)
};
const char* dtype_rule_name(DTypeRule r);

struct TileOpDef {
  std::string name;
  std::string family;
  TileSig sig = TileSig::dst_src;
  unsigned scopes = 0;
  unsigned attrs = 0;
  DTypeRule dtype = DTypeRule::same;
  unsigned flags = 0;
  std::string doc;
  std::string summary;
  // Elementwise: the value of one element from its inputs (already in the
  // compute dtype). Null for other families.
  std::function<Expr(const std::vector<Expr>&)> math;
  // Reductions: how two values fold.
  std::optional<BinOp> combine;

  const std::vector<OperandDef>& operands() const { return tile_sig_operands(sig); }
  int inputs() const { return static_cast<int>(operands().size()) - 1; }
  bool accepts(TileAttr a) const { return (attrs & static_cast<unsigned>(a)) != 0; }
  bool runs_at(ExecScope s) const { return (scopes >> static_cast<unsigned>(s)) & 1u; }
  bool has(TileOpFlag f) const { return (flags & static_cast<unsigned>(f)) != 0; }
  bool commutative() const { return has(TileOpFlag::commutative); }
  bool float_only() const { return dtype == DTypeRule::float_only; }
  bool converts() const { return dtype == DTypeRule::converts; }
};

// The table: tx's tile ops in TX_TILE_OP_TABLE's order, then those added.
std::vector<const TileOpDef*> tile_ops();
// nullptr for a name no row has.
const TileOpDef* find_tile_op(const std::string& name);
// Adds ops defined by rows of the same form (a library of tile ops built on
// tx, a test's toy op): TX_DEFINE_TILE_BUILDERS(TABLE) gives their builders,
// add_tile_ops({TABLE(TX_TILE_OP_DEF)}) the rest. A name already in the
// table is a tx error.
void add_tile_ops(std::vector<TileOpDef> defs);
// The ops that accept `a`, in table order, as "copy and copy_async".
std::string ops_accepting(TileAttr a);
// docs/tile_ops.md: one row per op (name, family, operands, scopes,
// attributes, dtype rule, summary, page).
std::string tile_op_index_markdown();

// Helpers the MATH column uses.
namespace tile_math {
Expr one_like(const Expr& x);  // 1 in x's dtype
}

}  // namespace tx
