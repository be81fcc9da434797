#include <cuda.h>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <fstream>
#include <iterator>
#include <cstring>
static std::vector<char> cubin;
#define P(x) do { CUresult r = (x); const char* n=nullptr; cuGetErrorName(r,&n); printf("  %-60s -> %s\n", #x, n); } while(0)
CUresult R(CUresult r){return r;}
bool run_good(const char* tag) {
  CUmodule m; CUfunction f; CUdeviceptr d;
  CUresult r = cuModuleLoadData(&m, cubin.data());
  const char* n; cuGetErrorName(r,&n); printf("  [%s] load: %s\n", tag, n); if (r) return false;
  cuModuleGetFunction(&f, m, "good");
  r = cuMemAlloc(&d, 128); cuGetErrorName(r,&n); printf("  [%s] alloc: %s\n", tag, n); if (r) return false;
  void* a[] = {&d};
  r = cuLaunchKernel(f,1,1,1,32,1,1,0,nullptr,a,nullptr); cuGetErrorName(r,&n); printf("  [%s] launch: %s\n", tag, n);
  r = cuCtxSynchronize(); cuGetErrorName(r,&n); printf("  [%s] sync: %s\n", tag, n);
  int h[32]; r = cuMemcpyDtoH(h, d, 128); cuGetErrorName(r,&n); printf("  [%s] copy: %s h[5]=%d\n", tag, n, h[5]);
  return r == 0 && h[5] == 15;
}
void fault(const char* tag) {
  CUmodule m; CUfunction f; CUdeviceptr d = 0;
  cuModuleLoadData(&m, cubin.data());
  cuModuleGetFunction(&f, m, "bad");
  void* a[] = {&d};
  cuLaunchKernel(f,1,1,1,1,1,1,0,nullptr,a,nullptr);
  CUresult r = cuCtxSynchronize(); const char* n; cuGetErrorName(r,&n); printf("  [%s] fault sync: %s\n", tag, n);
}
int main(int argc, char** argv) {
  std::ifstream in("k.cubin", std::ios::binary); cubin.assign(std::istreambuf_iterator<char>(in), {});
  cuInit(0); CUdevice dev; cuDeviceGet(&dev, 0);
  int mode = atoi(argv[1]);
  CUcontext c;
  if (mode == 0) {  // primary reset then retain
    P(cuDevicePrimaryCtxRetain(&c, dev)); P(cuCtxSetCurrent(c));
    run_good("before"); fault("A");
    P(cuDevicePrimaryCtxReset(dev));
    P(cuDevicePrimaryCtxRetain(&c, dev)); P(cuCtxSetCurrent(c));
    printf("mode0 recovered: %d\n", run_good("after"));
  } else if (mode == 1) {  // set null current, reset, retain
    P(cuDevicePrimaryCtxRetain(&c, dev)); P(cuCtxSetCurrent(c));
    run_good("before"); fault("B");
    P(cuCtxSetCurrent(nullptr));
    P(cuDevicePrimaryCtxRelease(dev));
    P(cuDevicePrimaryCtxReset(dev));
    P(cuDevicePrimaryCtxRetain(&c, dev)); P(cuCtxSetCurrent(c));
    printf("mode1 recovered: %d\n", run_good("after"));
  } else if (mode == 2) {  // own context destroy/create
    P(cuCtxCreate(&c, nullptr, 0, dev));
    run_good("before"); fault("C");
    P(cuCtxDestroy(c));
    P(cuCtxCreate(&c, nullptr, 0, dev));
    printf("mode2 recovered: %d\n", run_good("after"));
  } else if (mode == 3) {  // primary: reset without set current first, then retain & setcurrent, twice
    P(cuDevicePrimaryCtxRetain(&c, dev)); P(cuCtxSetCurrent(c));
    run_good("before"); fault("D");
    P(cuCtxSetCurrent(nullptr));
    P(cuDevicePrimaryCtxReset(dev));
    P(cuDevicePrimaryCtxRetain(&c, dev)); P(cuCtxSetCurrent(c));
    printf("mode3 recovered: %d\n", run_good("after"));
  }
}
