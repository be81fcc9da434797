// Tensor-core tile primitives on the host JIT: the portable variants
// (copy/reg, copy_async/sync, gemm/fallback) run the same kernels.
#define TX_GEMM_DEVICE tx::Device::host()
#include "gemm_cases.hpp"
