// doctest main shared by every suite. GPU suites (built with TX_GPU_SUITE)
// exit 77 with the reason when no CUDA device is usable; ctest shows them as
// Skipped.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <string>

#include "tx/runtime/cuda_driver.hpp"

int main(int argc, char** argv) {
#ifdef TX_GPU_SUITE
  std::string why;
  if (!tx::runtime::cuda_available(&why)) {
    std::printf("SKIPPED: this GPU suite needs a CUDA device: %s\n", why.c_str());
    return 77;
  }
#endif
  doctest::Context ctx(argc, argv);
  return ctx.run();
}
