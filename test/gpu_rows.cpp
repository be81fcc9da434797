// The row kernels on the GPU (skipped, visibly, without one).
#define TX_ROWS_DEVICE tx::Device::cuda()
#include "rows_cases.hpp"
