// C++ element types <-> tx dtypes, as one compile-time Boost.Hana map.
//
//   tx::dtype_of<float>()            // f32
//   tx::has_dtype<std::uint8_t>      // true
//   Tensor::from_vector(std::vector<int>{...}, {4})   // i32, checked at compile time
//
// f16, bf16 and fp8 have no portable C++ type; use Tensor::from_doubles.
#pragma once

#include <boost/hana.hpp>
#include <cstdint>

#include "tx/dtype.hpp"
#include "tx/error.hpp"

namespace tx {

namespace hana = boost::hana;

inline constexpr auto kCppDTypes = hana::make_map(hana::make_pair(hana::type_c<float>, f32),
                                                  hana::make_pair(hana::type_c<double>, f64),
                                                  hana::make_pair(hana::type_c<std::int8_t>, i8),
                                                  hana::make_pair(hana::type_c<std::int16_t>, i16),
                                                  hana::make_pair(hana::type_c<std::int32_t>, i32),
                                                  hana::make_pair(hana::type_c<std::int64_t>, i64),
                                                  hana::make_pair(hana::type_c<std::uint8_t>, u8),
                                                  hana::make_pair(hana::type_c<std::uint16_t>, u16),
                                                  hana::make_pair(hana::type_c<std::uint32_t>, u32),
                                                  hana::make_pair(hana::type_c<std::uint64_t>, u64),
                                                  hana::make_pair(hana::type_c<bool>, boolean));

template <class T>
inline constexpr bool has_dtype = hana::contains(kCppDTypes, hana::type_c<T>);

// A type without a dtype is a runtime tx error rather than a static_assert:
// a failed instantiation would poison a clang-repl session (DESIGN.md s. 8).
template <class T>
constexpr DType dtype_of() {
  if constexpr (has_dtype<T>)
    return kCppDTypes[hana::type_c<T>];
  else
    fail("tx.dtype_of", "", {}, "this C++ type has no tx dtype (use Tensor::from_doubles)");
}

}  // namespace tx
