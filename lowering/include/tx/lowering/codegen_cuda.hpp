// The CUDA code generator (lowering/src/codegen/cuda.cpp; its sibling for
// the host is codegen/llvm.cpp). CUDA source from a lowered kernel: one extern "C" __global__
// function, self-contained (no #include: NVRTC needs no include path), with a small prelude of
// conversion helpers for f16/bf16/fp8 storage types.
//
// The source names the user's buffers and loop variables, marks each
// lowered tile call with a comment naming the call, the variant and the
// user's source line, and launches with the CTA size the kernel declared
// (__launch_bounds__). Dynamic shared memory holds every shared buffer at a
// 16-byte aligned offset.
#pragma once

#include <string>

#include "tx/lowering/identifier.hpp"
#include "tx/lowering/lower.hpp"

namespace tx::lowering {

struct CudaOptions {
  std::string kernel_name{};  // default: the PrimFunc's name, sanitized
  // f32 exp, exp2, log, division and erfc through the hardware approximations
  // (__expf, ex2.approx.ftz, __logf, __fdividef, a 1.2e-7-accurate erfc); sin, cos and pow
  // stay exact (their fast forms break on large or special arguments). Only for kernels whose
  // results are rounded to 16 bits or fewer, where the approximation error (~1e-6 relative) is far
  // below the output's rounding (~5e-4 for f16).
  bool approx_math = false;
  // > 0: __launch_bounds__(threads, min_ctas_per_sm) (tx::CompileOptions).
  int min_ctas_per_sm = 0;
};

std::string codegen_cuda(const LoweredKernel& k, const CudaOptions& opt = {});

}  // namespace tx::lowering
