// The arithmetic of the checked mode's model of sm_90's asynchronous
// instructions (fibers.cpp runs them; the checker orders them): where a TMA
// box and a wgmma operand put each element in shared memory, and the
// 16- and 8-bit floats the MMA reads. The formulas are the ones lowering
// checks layouts against (variants/copy_async_tma.cpp, variants/gemm_wgmma.cpp),
// so that the model reads and writes the bytes the GPU would.
#pragma once

#include <cstdint>

namespace tx::runtime::host {

// The TMA's and wgmma's swizzle of a byte offset (relative to a buffer
// aligned to the swizzle's period): bits 4.. of the 16-byte chunk XORed
// with the 128-byte row's bits 7.. (128-byte mode: 3 bits, 64: 2, 32: 1).
std::int64_t swizzle_byte(std::int64_t byte, int swizzle_bytes);

// A wgmma shared operand: the descriptor's fields as lowering set them.
struct WgmmaDesc {
  std::int64_t offset = 0;  // element offset of the block's first element (pre-swizzle)
  std::int64_t lbo = 0, sbo = 0;
  int swizzle_bytes = 128;
  bool mn_major = false;
  int elem_bytes = 2;
};
// The byte (relative to the buffer) of the operand's element (u, v): u along
// M (A) or N (B), v along K.
std::int64_t wgmma_operand_byte(const WgmmaDesc& d, std::int64_t u, std::int64_t v);

// An element of type code `type` (lowering::FiberType: f16, bf16, e4m3, e5m2) as float.
float element_as_float(const void* p, std::int64_t type);
int element_bytes(std::int64_t type);

}  // namespace tx::runtime::host
