// The operator library on the host JIT (skipped, visibly, without LLVM).
#define TX_OPS_DEVICE tx::Device::host()
#include "ops_cases.hpp"
