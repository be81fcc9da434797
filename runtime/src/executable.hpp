// What runs a bound launch: one Executable per target, siblings behind one
// interface, each owning its state and its cache.
//
//   CudaExecutable  (cuda_executable.cpp)  the GPU binary (NVRTC, the disk
//                   and ahead-of-time caches, the process's modules), its
//                   CUfunction per device, the TMA tensor maps it encodes,
//                   cuLaunchKernel on the launch's stream
//   HostExecutable  (host_executable.cpp)  the host JIT's compiled function
//                   (runtime::host_compile, cached by the host form's
//                   structural hash), run on the calling thread
//
// Kernel::launch is bind (bind.hpp) then run. A new target (another GPU
// generation's binary format, another CPU back end) is a new Executable next
// to these, made by make_executable for its Target.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bind.hpp"
#include "tx/lowering/lower.hpp"
#include "tx/runtime/kernel.hpp"

namespace tx::runtime {

struct ProfileSink;

class Executable {
 public:
  virtual ~Executable();
  // Runs `b` on its device: on a GPU, queued on `stream` (null: the device's
  // current stream) and returning at once; on the host, to completion.
  virtual void run(const BoundLaunch& b, const Stream* stream) const = 0;
  // Builds (or finds in its caches) what a launch on `device` runs; returns
  // where it came from ("memory", "aot", "prebuilt", "disk", "nvrtc", "jit").
  virtual std::string prepare(Device device, SourceLoc loc) const = 0;
};

// What an Executable is made from. The kernel's IR and CUDA may be made on
// first need (a prebuilt kernel has only its launch description and binary):
// `full` gives the complete kernel's lowered form and CUDA then.
struct ExecutableSource {
  std::string kernel_name;
  Device device;     // the kernel's (compile-time) device
  std::string arch;  // CompileOptions::arch; empty: each device's own
  bool checked = false;
  const lowering::LoweredKernel* info = nullptr;  // launch description (always there)
  std::vector<char> prebuilt_cubin;               // a prebuilt kernel's binary
  struct Full {
    const lowering::LoweredKernel* info;
    const std::string* cuda;
  };
  std::function<Full()> full;
  // Profiled kernels: where each launch's profile goes.
  std::shared_ptr<ProfileSink> profile{};
};

std::unique_ptr<Executable> make_cuda_executable(ExecutableSource src);
std::unique_ptr<Executable> make_host_executable(ExecutableSource src);

// TX_SYNC=1: synchronize after every GPU launch (errors name the kernel).
bool sync_after_launch();

}  // namespace tx::runtime
