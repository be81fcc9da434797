// PyTorch's promotion rules (c10/core/ScalarType.cpp promoteTypes and
// canCast, aten/src/ATen/native/TypeProperties.cpp result_type), written
// from their definitions for tx's dtypes (no complex types).
#include "tx/ops/promotion.hpp"

#include <cstdio>
#include <optional>

#include "tx/error.hpp"

namespace tx::ops {

DType Scalar::wrapped_dtype() const {
  switch (kind) {
    case Kind::boolean:
      return boolean;
    case Kind::integer:
      return i64;
    case Kind::floating:
      return f32;  // torch.get_default_dtype()
  }
  return f32;
}

std::string Scalar::str() const {
  switch (kind) {
    case Kind::boolean:
      return i ? "true" : "false";
    case Kind::integer:
      return std::to_string(i);
    case Kind::floating: {
      char b[40];
      std::snprintf(b, sizeof b, "%.17g", f);
      return b;
    }
  }
  return "?";
}

namespace {

// uint16 / uint32 / uint64: PyTorch's "barebones" unsigned types, which
// promote with floating types only.
bool barebones_unsigned(DType t) { return t == u16 || t == u32 || t == u64; }

// The reason promote_types refuses a pair, or "" when it does not.
std::string refusal(DType a, DType b) {
  if (a == b) return "";
  if (a.is_fp8() || b.is_fp8())
    return "PyTorch does not promote float8 types (" + a.name() + " and " + b.name() +
           "); convert one with tx::ops::cast first";
  if ((barebones_unsigned(a) && !b.is_float()) || (barebones_unsigned(b) && !a.is_float()))
    return "PyTorch does not promote uint16, uint32 or uint64 with other integer types (" +
           a.name() + " and " + b.name() + "); convert one with tx::ops::cast first";
  return "";
}

DType promote_unchecked(DType a, DType b) {
  if (a == b) return a;
  if (barebones_unsigned(a)) return b;  // b is floating (refusal() holds the rest)
  if (barebones_unsigned(b)) return a;
  if (a.is_bool()) return b;
  if (b.is_bool()) return a;
  if (a.is_float() != b.is_float()) return a.is_float() ? a : b;
  if (a.is_float()) {
    // f16, bf16, f32, f64: neither 16-bit type holds the other.
    if (a.bits == b.bits) return f32;
    return a.bits > b.bits ? a : b;
  }
  // Integers: uint8 with a signed type needs the next wider signed type.
  if (a == u8 || b == u8) {
    const DType s = a == u8 ? b : a;
    return s.bits > 8 ? s : i16;
  }
  return a.bits > b.bits ? a : b;
}

// A group's running promotion (tensors, 0-dim tensors or scalars): its
// dtype and the operand that set it, for messages.
struct Group {
  std::optional<DType> dtype;
  std::size_t first = 0;
};

[[noreturn]] void refuse(const std::string& op, const std::string& operand,
                         const std::string& reason) {
  fail(op, operand, {}, reason);
}

}  // namespace

DType promote_types(DType a, DType b) {
  if (std::string why = refusal(a, b); !why.empty()) refuse("tx.ops.promote_types", "", why);
  return promote_unchecked(a, b);
}

bool can_cast(DType from, DType to) {
  if (from.is_float() && (to.is_integer() || to.is_bool())) return false;
  if (!from.is_bool() && to.is_bool()) return false;
  return true;
}

namespace detail {

DType result_type(const std::vector<PromotionOperand>& operands,
                  const std::vector<std::string>& names, const std::string& op) {
  auto name = [&](std::size_t i) {
    return i < names.size() ? names[i] : "input " + std::to_string(i);
  };
  Group groups[3];  // tensors with dimensions, 0-dim tensors, scalars
  for (std::size_t i = 0; i < operands.size(); ++i) {
    Group& g = groups[static_cast<int>(operands[i].kind)];
    const DType t = operands[i].dtype;
    if (!g.dtype) {
      g.dtype = t;
      g.first = i;
      continue;
    }
    if (std::string why = refusal(*g.dtype, t); !why.empty()) refuse(op, name(i), why);
    g.dtype = promote_unchecked(*g.dtype, t);
  }
  // torch's combine_categories(higher, lower): the higher group's dtype
  // unless the lower one's category is above it (a float under integers or
  // bool, an integer under bool), then the two promoted.
  auto combine = [&](const Group& higher, const Group& lower) -> Group {
    if (!higher.dtype) return lower;
    if (!lower.dtype) return higher;
    const DType h = *higher.dtype, l = *lower.dtype;
    if (h.is_float()) return higher;
    if (h.is_bool() || l.is_float()) {
      if (std::string why = refusal(h, l); !why.empty()) refuse(op, name(lower.first), why);
      return {promote_unchecked(h, l), higher.first};
    }
    return higher;
  };
  const Group r = combine(groups[0], combine(groups[1], groups[2]));
  if (!r.dtype) fail(op, "", {}, "no operands to promote");
  return *r.dtype;
}

}  // namespace detail

DType result_type(const std::vector<PromotionOperand>& operands) {
  return detail::result_type(operands, {}, "tx.ops.result_type");
}

DType result_type(const Tensor& a, const Tensor& b) {
  return result_type({PromotionOperand::of(a), PromotionOperand::of(b)});
}

DType result_type(const Tensor& a, const Scalar& b) {
  return result_type({PromotionOperand::of(a), PromotionOperand::of(b)});
}

}  // namespace tx::ops
