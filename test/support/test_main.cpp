// doctest main shared by every suite. GPU suites (built with TX_GPU_SUITE)
// exit 77 with the reason when no CUDA device is usable; ctest shows them as
// Skipped.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <string>

#include "tx/runtime/cuda_driver.hpp"
#include "tx/runtime/kernel.hpp"

int main(int argc, char** argv) {
#ifdef TX_GPU_SUITE
  std::string why;
  if (!tx::runtime::cuda_available(&why)) {
    std::printf("SKIPPED: this GPU suite needs a CUDA device: %s\n", why.c_str());
    return 77;
  }
#endif
#ifdef TX_HOST_SUITE
  std::string why_host;
  if (!tx::runtime::host_jit_available(&why_host)) {
    std::printf("SKIPPED: this host suite needs the LLVM host JIT: %s\n", why_host.c_str());
    return 77;
  }
#endif
  doctest::Context ctx(argc, argv);
  return ctx.run();
}
