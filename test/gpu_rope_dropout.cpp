// rope and dropout on the GPU (skipped, visibly, without one). The dropout
// masks are checked bit for bit against the same C++ Philox reference as on
// the host (host_rope_dropout.cpp): the GPU and the host agree bit for bit.
#define TX_RD_DEVICE tx::Device::cuda()
#include "rope_dropout_cases.hpp"
