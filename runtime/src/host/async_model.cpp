// See async_model.hpp.
#include "async_model.hpp"

#include <cmath>
#include <cstring>

namespace tx::runtime::host {

std::int64_t swizzle_byte(std::int64_t byte, int swizzle_bytes) {
  const int bits = swizzle_bytes == 128 ? 3 : swizzle_bytes == 64 ? 2 : swizzle_bytes == 32 ? 1 : 0;
  if (bits == 0) return byte;
  return byte ^ (((byte >> 7) & ((1 << bits) - 1)) << 4);
}

std::int64_t wgmma_operand_byte(const WgmmaDesc& d, std::int64_t u, std::int64_t v) {
  const std::int64_t W = d.swizzle_bytes, e = d.elem_bytes;
  std::int64_t model;
  if (!d.mn_major) {
    // K-major: 8-row groups SBO apart, rows of W bytes, K contiguous.
    model = (u / 8) * d.sbo + (u % 8) * W + v * e;
  } else {
    // MN-major: W-byte runs of M (N) LBO apart, K rows of W bytes, 8-row groups SBO apart.
    const std::int64_t T = W / e;
    model = (u / T) * d.lbo + (u % T) * e + (v % 8) * W + (v / 8) * d.sbo;
  }
  return swizzle_byte(d.offset * e + model, d.swizzle_bytes);
}

int element_bytes(std::int64_t type) { return type >= 2 ? 1 : 2; }

namespace {
float from_bits(std::uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}
float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = (h >> 15) & 1, exp = (h >> 10) & 31, man = h & 1023;
  float v;
  if (exp == 0)
    v = std::ldexp(static_cast<float>(man), -24);
  else if (exp == 31)
    v = man ? std::nanf("") : INFINITY;
  else
    v = std::ldexp(static_cast<float>(man | 1024), static_cast<int>(exp) - 25);
  return sign ? -v : v;
}
float e4m3_to_float(std::uint8_t x) {
  const std::uint32_t sign = x >> 7, exp = (x >> 3) & 15, man = x & 7;
  float v;
  if (exp == 15 && man == 7)
    v = std::nanf("");
  else if (exp == 0)
    v = std::ldexp(static_cast<float>(man), -9);
  else
    v = std::ldexp(static_cast<float>(man | 8), static_cast<int>(exp) - 10);
  return sign ? -v : v;
}
}  // namespace

float element_as_float(const void* p, std::int64_t type) {
  switch (type) {
    case 0: {
      std::uint16_t h;
      std::memcpy(&h, p, 2);
      return half_to_float(h);
    }
    case 1: {
      std::uint16_t h;
      std::memcpy(&h, p, 2);
      return from_bits(std::uint32_t{h} << 16);
    }
    case 2:
      return e4m3_to_float(*static_cast<const std::uint8_t*>(p));
    default:  // e5m2: the upper byte of an f16
      return half_to_float(static_cast<std::uint16_t>(*static_cast<const std::uint8_t*>(p) << 8));
  }
}

}  // namespace tx::runtime::host
