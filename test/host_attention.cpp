// tx::ops::attention on the host JIT: the library's attention kernel (the
// sample's, shape-generic) as fibers, against float64.
#define TX_ATTN_DEVICE tx::Device::host()
#include "attention_op_cases.hpp"
#include "attention_backward_cases.hpp"
