// rope and dropout on the host JIT (skipped, visibly, without LLVM).
#define TX_RD_DEVICE tx::Device::host()
#include "rope_dropout_cases.hpp"
