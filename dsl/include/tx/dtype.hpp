// Element types of tx buffers and expressions.
//
// A DType is a small value type (code + bits). The named constants below are
// the whole set tx supports; f16/bf16/fp8 are storage types whose arithmetic
// is carried out in f32 (see lowering/legalize_low_precision).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace tx {

enum class TypeCode : std::uint8_t {
  Int,
  UInt,
  Float,
  BFloat,
  Float8E4M3,  // e4m3fn: no infinities, saturates to +-448
  Float8E5M2,  // e5m2: keeps Inf and NaN
  Bool,
  Handle,
  Void,
};

struct DType {
  TypeCode code = TypeCode::Void;
  std::uint8_t bits = 0;

  constexpr DType() = default;
  constexpr DType(TypeCode c, std::uint8_t b) : code(c), bits(b) {}

  constexpr int bytes() const { return code == TypeCode::Bool ? 1 : (bits + 7) / 8; }
  constexpr bool is_float() const {
    return code == TypeCode::Float || code == TypeCode::BFloat || code == TypeCode::Float8E4M3 ||
           code == TypeCode::Float8E5M2;
  }
  constexpr bool is_int() const { return code == TypeCode::Int; }
  constexpr bool is_uint() const { return code == TypeCode::UInt; }
  constexpr bool is_integer() const { return is_int() || is_uint(); }
  constexpr bool is_bool() const { return code == TypeCode::Bool; }
  constexpr bool is_handle() const { return code == TypeCode::Handle; }
  constexpr bool is_void() const { return code == TypeCode::Void; }
  // A float type without native arithmetic in tx: computed in f32, rounded on store.
  constexpr bool is_low_precision_float() const {
    return is_float() && !(code == TypeCode::Float && (bits == 32 || bits == 64));
  }
  constexpr bool is_fp8() const {
    return code == TypeCode::Float8E4M3 || code == TypeCode::Float8E5M2;
  }
  constexpr bool operator==(const DType&) const = default;

  // "float32", "bfloat16", "float8_e4m3fn", ... (the spelling of the seeds' scripts).
  std::string name() const;
  // "f32", "bf16", "f8e4m3", ... (the spelling of the C++ constants).
  std::string short_name() const;
};

inline constexpr DType f16{TypeCode::Float, 16};
inline constexpr DType f32{TypeCode::Float, 32};
inline constexpr DType f64{TypeCode::Float, 64};
inline constexpr DType bf16{TypeCode::BFloat, 16};
inline constexpr DType f8e4m3{TypeCode::Float8E4M3, 8};
inline constexpr DType f8e5m2{TypeCode::Float8E5M2, 8};
inline constexpr DType i8{TypeCode::Int, 8};
inline constexpr DType i16{TypeCode::Int, 16};
inline constexpr DType i32{TypeCode::Int, 32};
inline constexpr DType i64{TypeCode::Int, 64};
inline constexpr DType u8{TypeCode::UInt, 8};
inline constexpr DType u16{TypeCode::UInt, 16};
inline constexpr DType u32{TypeCode::UInt, 32};
inline constexpr DType u64{TypeCode::UInt, 64};
inline constexpr DType boolean{TypeCode::Bool, 8};
inline constexpr DType handle_t{TypeCode::Handle, 64};
inline constexpr DType void_t{TypeCode::Void, 0};

// Parses either spelling ("float16" or "f16"); throws tx::Error on an unknown name.
DType dtype_from_string(std::string_view name);

// Largest and smallest finite values of a float dtype (as double).
double dtype_max_finite(DType t);

}  // namespace tx
