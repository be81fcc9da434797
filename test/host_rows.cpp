// The row kernels on the host JIT (skipped, visibly, without LLVM).
#define TX_ROWS_DEVICE tx::Device::host()
#include "rows_cases.hpp"
