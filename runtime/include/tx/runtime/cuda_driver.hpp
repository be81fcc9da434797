// The CUDA driver API, opened with dlopen("libcuda.so.1") on first use.
// Nothing here links against libcuda, so libtx loads on machines without an
// NVIDIA driver; cuda_available() says whether a GPU can be used.
//
// Every failing call throws tx::Error naming the driver call, the kernel (if
// any) and the CUDA error name and string. Errors that leave the context
// unusable (a trap in a kernel) are reported as such.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tx::runtime {

using DevicePtr = std::uint64_t;

// Whether the driver loads, initializes, and has at least one device. The
// answer is computed once; `why` explains a false.
bool cuda_available(std::string* why = nullptr);

// The CUDA version the driver supports (cuDriverGetVersion, e.g. 12040 for
// 12.4); 0 when cuda_available() is false. Binaries from a newer NVRTC need
// a driver at least as new.
int cuda_driver_version();

struct DeviceInfo {
  int ordinal = 0;
  std::string name;
  int cc_major = 0, cc_minor = 0;
  int sm_count = 0;
  std::size_t total_memory = 0;
  int max_threads_per_block = 0;
  int max_shared_per_block = 0;        // default limit (48 KiB)
  int max_shared_per_block_optin = 0;  // with cuFuncSetAttribute
  int l2_bytes = 0;
  // "sm_90a" for compute capability 9.0 (H100/H200), otherwise "sm_XY".
  std::string arch() const;
};

// Device TX_CUDA_DEVICE (default 0); makes its primary context current on
// the calling thread. Throws tx::Error when no GPU is usable.
const DeviceInfo& current_device();

// True after a kernel fault (an illegal address, a trap, ...). Such an error
// is sticky for the whole process: the driver refuses every later call, even
// in a fresh or reset context (measured: driver 580 / CUDA 13 on H200; see
// docs/reliability.md). tx then fails every GPU call at once with a tx::Error
// that names the fault, frees nothing more, and host kernels still run.
bool context_lost() noexcept;

// A loaded cubin. Unloaded on destruction.
class Module {
 public:
  static std::shared_ptr<Module> load(const std::vector<char>& cubin, const std::string& name);
  ~Module();
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  // The CUfunction of an extern "C" kernel, as an opaque pointer.
  void* function(const std::string& kernel_name) const;

 private:
  Module() = default;
  void* module_ = nullptr;
  std::string name_;
};

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
};

// cuLaunchKernel on the default stream; raises the function's dynamic
// shared-memory limit first when shared_bytes > 48 KiB.
void launch(void* function, Dim3 grid, Dim3 block, std::size_t shared_bytes, void** args,
            const std::string& kernel_name);
// cuCtxSynchronize; `what` names the kernel or operation for the error message.
void synchronize(const std::string& what);

DevicePtr device_alloc(std::size_t bytes);
void device_free(DevicePtr p) noexcept;
void copy_to_device(DevicePtr dst, const void* src, std::size_t bytes);
void copy_to_host(void* dst, DevicePtr src, std::size_t bytes);
void copy_device_to_device(DevicePtr dst, DevicePtr src, std::size_t bytes);
void memset_device(DevicePtr dst, unsigned char value, std::size_t bytes);

// CUDA-event timing on the default stream.
class EventTimer {
 public:
  EventTimer();
  ~EventTimer();
  EventTimer(const EventTimer&) = delete;
  EventTimer& operator=(const EventTimer&) = delete;
  void start();
  void stop();
  float elapsed_ms();  // synchronizes on the stop event

 private:
  void* start_ = nullptr;
  void* stop_ = nullptr;
};

}  // namespace tx::runtime
