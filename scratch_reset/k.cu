extern "C" __global__ void bad(int* p) { *(volatile int*)0x10 = 1; }
extern "C" __global__ void good(int* p) { p[threadIdx.x] = threadIdx.x * 3; }
