// Tensor-core tile primitives on the GPU (skipped, visibly, without one).
#define TX_GEMM_DEVICE tx::Device::cuda()
#include "gemm_cases.hpp"
