// tx::ops::attention on an sm_90 GPU against float64 (the cases of
// attention_op_cases.hpp; gpu_attention.cpp runs the sample's kernel).
#define TX_ATTN_DEVICE tx::Device::cuda()
#include "attention_op_cases.hpp"
