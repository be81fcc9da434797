// PyTorch's type promotion for the op library (docs/ops.md, "Type promotion"):
// torch.promote_types, torch.result_type and torch.can_cast, with the same
// answers and the same refusals, so that a program moved between PyTorch and
// tx computes in the same dtype.
//
//   ops::add(f32_tensor, bf16_tensor)      // float32: the wider float
//   ops::add(f16_tensor, bf16_tensor)      // float32: neither holds the other
//   ops::mul(i32_tensor, 2.5)              // float32: a scalar raises the category
//   ops::mul(bf16_tensor, 2.5)             // bfloat16: ... and only the category
//   ops::add(i8_tensor, i64_zero_dim)      // int8: a 0-dim tensor ranks below
//                                          //   tensors with dimensions
//
// The kernels load each operand in its own dtype and convert it in registers
// (no copy of a converted input is made).
#pragma once

#include <concepts>
#include <cstdint>
#include <string>
#include <vector>

#include "tx/dtype.hpp"
#include "tx/runtime/tensor.hpp"

namespace tx::ops {

// A number where an op takes a tensor (a Python scalar in PyTorch:
// `x * 0.5`). Its kind, not its value, takes part in promotion: a bool, an
// integer or a floating-point number.
struct Scalar {
  enum class Kind { boolean, integer, floating };
  Kind kind = Kind::floating;
  double f = 0;        // the value when floating
  std::int64_t i = 0;  // the value when integer or bool

  Scalar(bool v) : kind(Kind::boolean), i(v ? 1 : 0) {}  // NOLINT: implicit by design
  template <std::integral I>
  requires(!std::same_as<I, bool>) Scalar(I v)
      : kind(Kind::integer), i(static_cast<std::int64_t>(v)) {}  // NOLINT
  template <std::floating_point F>
  Scalar(F v) : kind(Kind::floating), f(static_cast<double>(v)) {}  // NOLINT
  double as_double() const { return kind == Kind::floating ? f : static_cast<double>(i); }
  // The dtype PyTorch wraps it in before promotion: float32 (the default
  // dtype) for a float, int64 for an integer, bool.
  DType wrapped_dtype() const;
  std::string str() const;
};

// One operand of a promotion: a tensor with dimensions, a 0-dim tensor, or
// a scalar. The three rank in that order (torch.result_type's rule).
struct PromotionOperand {
  enum class Kind { tensor, zero_dim, scalar };
  DType dtype;
  Kind kind = Kind::tensor;
  static PromotionOperand of(const Tensor& t) {
    return {t.dtype(), t.shape().empty() ? Kind::zero_dim : Kind::tensor};
  }
  static PromotionOperand of(const Scalar& s) { return {s.wrapped_dtype(), Kind::scalar}; }
};

// torch.promote_types: the smallest dtype both convert to without losing
// their category (bool < integer < floating): the wider of two integers or
// floats, int16 for uint8 and int8, float32 for float16 and bfloat16.
// Throws tx::Error for the pairs PyTorch refuses: a float8 type with any
// other dtype, and uint16 / uint32 / uint64 with any other integer or bool.
DType promote_types(DType a, DType b);

// torch.result_type: tensors with dimensions promote among themselves; a
// 0-dim tensor or a scalar (each group promoted among itself, scalars as
// float32 / int64 / bool) changes the result only when it is of a higher
// category -- then the result is of its category (a scalar: at the default
// width float32 or int64; a 0-dim tensor: promoted with the others).
DType result_type(const std::vector<PromotionOperand>& operands);
DType result_type(const Tensor& a, const Tensor& b);
DType result_type(const Tensor& a, const Scalar& b);

// torch.can_cast: whether a result of dtype `from` may be stored in a
// tensor of dtype `to` (out=): anything but floating into integer or bool,
// and anything but bool into bool.
bool can_cast(DType from, DType to);

namespace detail {
// result_type whose refusals are errors of `op` ("tx.ops.add") naming the
// operand at fault (names[i] for operands[i]).
DType result_type(const std::vector<PromotionOperand>& operands,
                  const std::vector<std::string>& names, const std::string& op);
}  // namespace detail

}  // namespace tx::ops
