// The tile-primitive matrix on the host JIT (skipped, visibly, in a build
// without LLVM).
#define TX_MATRIX_DEVICE tx::Device::host()
#include "matrix_cases.hpp"
