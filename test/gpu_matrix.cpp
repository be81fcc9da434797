// The tile-primitive matrix on the GPU (skipped, visibly, without one).
#define TX_MATRIX_DEVICE tx::Device::cuda()
#include "matrix_cases.hpp"
