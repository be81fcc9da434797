// The operator library on the GPU (skipped, visibly, without one).
#define TX_OPS_DEVICE tx::Device::cuda()
#include "ops_cases.hpp"
