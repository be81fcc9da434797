// What the GPU suites share.
#pragma once

#include <doctest/doctest.h>

#include "tx/runtime/cuda_driver.hpp"

namespace tx::test {

// Whether the GPU is sm_90 (H100 / H200); on another one, a message saying
// that `what` does not run (visible in the output, never a quiet pass).
inline bool hopper_gpu(const char* what) {
  const runtime::DeviceInfo& d = runtime::current_device();
  if (d.cc_major == 9) return true;
  MESSAGE("not run: " << what << " needs an sm_90 GPU; this one is " << d.name << " (" << d.arch()
                      << ")");
  return false;
}

}  // namespace tx::test
