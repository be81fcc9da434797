#include "tx/dtype.hpp"

#include <array>
#include <utility>

#include "tx/error.hpp"

namespace tx {

namespace {
struct Spelling {
  DType type;
  const char* name;
  const char* short_name;
};
constexpr std::array<Spelling, 17> kSpellings{{
    {f16, "float16", "f16"},
    {f32, "float32", "f32"},
    {f64, "float64", "f64"},
    {bf16, "bfloat16", "bf16"},
    {f8e4m3, "float8_e4m3fn", "f8e4m3"},
    {f8e5m2, "float8_e5m2", "f8e5m2"},
    {i8, "int8", "i8"},
    {i16, "int16", "i16"},
    {i32, "int32", "i32"},
    {i64, "int64", "i64"},
    {u8, "uint8", "u8"},
    {u16, "uint16", "u16"},
    {u32, "uint32", "u32"},
    {u64, "uint64", "u64"},
    {boolean, "bool", "bool"},
    {handle_t, "handle", "handle"},
    {void_t, "void", "void"},
}};
}  // namespace

std::string DType::name() const {
  for (const auto& s : kSpellings)
    if (s.type == *this) return s.name;
  return "unknown";
}

std::string DType::short_name() const {
  for (const auto& s : kSpellings)
    if (s.type == *this) return s.short_name;
  return "unknown";
}

DType dtype_from_string(std::string_view name) {
  for (const auto& s : kSpellings)
    if (name == s.name || name == s.short_name) return s.type;
  if (name == "float8_e4m3") return f8e4m3;
  fail("tx.dtype", std::string(name), {}, "unknown dtype name");
}

double dtype_max_finite(DType t) {
  switch (t.code) {
    case TypeCode::Float:
      return t.bits == 16 ? 65504.0 : t.bits == 32 ? 3.4028234663852886e38 : 1.7976931348623157e308;
    case TypeCode::BFloat:
      return 3.3895313892515355e38;
    case TypeCode::Float8E4M3:
      return 448.0;
    case TypeCode::Float8E5M2:
      return 57344.0;
    default:
      fail("tx.dtype_max_finite", t.name(), {}, "not a float dtype");
  }
}

}  // namespace tx
