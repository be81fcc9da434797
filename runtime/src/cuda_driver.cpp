// The CUDA driver API through dlopen("libcuda.so.1"). cuda.h #defines many
// entry points to versioned symbols (cuMemAlloc -> cuMemAlloc_v2); the
// two-level TX_STR expansion makes dlsym ask for the versioned name, and
// decltype(&cuX) gives the matching prototype.
#include "tx/runtime/cuda_driver.hpp"

#include <cuda.h>
#include <dlfcn.h>

#include <cstdlib>
#include <mutex>

#include "tx/error.hpp"

#define TX_STR2(x) #x
#define TX_STR(x) TX_STR2(x)

namespace tx::runtime {

namespace {

struct Driver {
  void* handle = nullptr;
  std::string error;  // why the driver is unusable
#define TX_CU_FNS(X)                                                                               \
  X(cuInit) X(cuDeviceGetCount) X(cuDeviceGet) X(cuDeviceGetName) X(cuDeviceGetAttribute)          \
  X(cuDeviceTotalMem) X(cuDevicePrimaryCtxRetain) X(cuCtxSetCurrent) X(cuCtxGetCurrent)            \
  X(cuCtxSynchronize) X(cuModuleLoadData) X(cuModuleUnload) X(cuModuleGetFunction)                 \
  X(cuFuncSetAttribute) X(cuLaunchKernel) X(cuMemAlloc) X(cuMemFree) X(cuMemcpyHtoD)                \
  X(cuMemcpyDtoH) X(cuMemcpyDtoD) X(cuMemsetD8) X(cuGetErrorName) X(cuGetErrorString)              \
  X(cuEventCreate) X(cuEventDestroy) X(cuEventRecord) X(cuEventSynchronize) X(cuEventElapsedTime)
#define TX_DECL(name) decltype(&name) p_##name = nullptr;
  TX_CU_FNS(TX_DECL)
#undef TX_DECL
};

const Driver& driver() {
  static Driver* d = [] {
    auto* drv = new Driver();
    drv->handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!drv->handle) {
      const char* e = dlerror();
      drv->error = std::string("libcuda.so.1 not found: ") + (e ? e : "?") +
                   " (no NVIDIA driver on this machine)";
      return drv;
    }
#define TX_LOAD(name)                                                                     \
  drv->p_##name = reinterpret_cast<decltype(&name)>(dlsym(drv->handle, TX_STR(name)));   \
  if (!drv->p_##name && drv->error.empty()) drv->error = "libcuda.so.1 lacks " TX_STR(name);
    TX_CU_FNS(TX_LOAD)
#undef TX_LOAD
    if (!drv->error.empty()) return drv;
    CUresult r = drv->p_cuInit(0);
    if (r != CUDA_SUCCESS) {
      const char* name = nullptr;
      drv->p_cuGetErrorName(r, &name);
      drv->error = std::string("cuInit failed: ") + (name ? name : "?");
      return drv;
    }
    int count = 0;
    if (drv->p_cuDeviceGetCount(&count) != CUDA_SUCCESS || count == 0) {
      drv->error = "the driver reports no CUDA device";
      return drv;
    }
    return drv;
  }();
  return *d;
}

const Driver& need() {
  const Driver& d = driver();
  if (!d.error.empty()) fail("cuda", "", {}, d.error);
  return d;
}

bool sticky(CUresult r) {
  return r == CUDA_ERROR_ILLEGAL_ADDRESS || r == CUDA_ERROR_LAUNCH_FAILED ||
         r == CUDA_ERROR_HARDWARE_STACK_ERROR || r == CUDA_ERROR_ILLEGAL_INSTRUCTION ||
         r == CUDA_ERROR_MISALIGNED_ADDRESS || r == CUDA_ERROR_INVALID_ADDRESS_SPACE ||
         r == CUDA_ERROR_INVALID_PC || r == CUDA_ERROR_ASSERT;
}

void check(CUresult r, const char* call, const std::string& what) {
  if (r == CUDA_SUCCESS) return;
  const Driver& d = driver();
  const char* name = nullptr;
  const char* str = nullptr;
  d.p_cuGetErrorName(r, &name);
  d.p_cuGetErrorString(r, &str);
  std::string reason = std::string(call) + " failed: " + (name ? name : "?") + ": " + (str ? str : "");
  if (sticky(r)) reason += " (the CUDA context is no longer usable; restart the process)";
  fail("cuda", what, {}, reason);
}

int device_ordinal() {
  const char* v = std::getenv("TX_CUDA_DEVICE");
  return v ? std::atoi(v) : 0;
}

// Makes the primary context current on the calling thread.
void make_current() {
  const Driver& d = need();
  static CUcontext ctx = [&] {
    CUdevice dev = 0;
    check(d.p_cuDeviceGet(&dev, device_ordinal()), "cuDeviceGet", "device");
    CUcontext c = nullptr;
    check(d.p_cuDevicePrimaryCtxRetain(&c, dev), "cuDevicePrimaryCtxRetain", "device");
    return c;
  }();
  CUcontext cur = nullptr;
  d.p_cuCtxGetCurrent(&cur);
  if (cur != ctx) check(d.p_cuCtxSetCurrent(ctx), "cuCtxSetCurrent", "device");
}

}  // namespace

bool cuda_available(std::string* why) {
  const Driver& d = driver();
  if (!d.error.empty() && why) *why = d.error;
  return d.error.empty();
}

std::string DeviceInfo::arch() const {
  std::string a = "sm_" + std::to_string(cc_major) + std::to_string(cc_minor);
  if (cc_major == 9 && cc_minor == 0) a += "a";  // wgmma/setmaxnreg need the arch-specific target
  return a;
}

const DeviceInfo& current_device() {
  make_current();
  static DeviceInfo info = [] {
    const Driver& d = need();
    DeviceInfo i;
    i.ordinal = device_ordinal();
    CUdevice dev = 0;
    check(d.p_cuDeviceGet(&dev, i.ordinal), "cuDeviceGet", "device");
    char name[256] = {};
    d.p_cuDeviceGetName(name, sizeof name, dev);
    i.name = name;
    auto attr = [&](CUdevice_attribute a) {
      int v = 0;
      check(d.p_cuDeviceGetAttribute(&v, a, dev), "cuDeviceGetAttribute", "device");
      return v;
    };
    i.cc_major = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
    i.cc_minor = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
    i.sm_count = attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
    i.max_threads_per_block = attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
    i.max_shared_per_block = attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK);
    i.max_shared_per_block_optin = attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
    i.l2_bytes = attr(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE);
    std::size_t mem = 0;
    check(d.p_cuDeviceTotalMem(&mem, dev), "cuDeviceTotalMem", "device");
    i.total_memory = mem;
    return i;
  }();
  return info;
}

std::shared_ptr<Module> Module::load(const std::vector<char>& cubin, const std::string& name) {
  make_current();
  const Driver& d = need();
  std::shared_ptr<Module> m(new Module());
  CUmodule mod = nullptr;
  check(d.p_cuModuleLoadData(&mod, cubin.data()), "cuModuleLoadData", name);
  m->module_ = mod;
  m->name_ = name;
  return m;
}

Module::~Module() {
  if (module_ && driver().error.empty()) driver().p_cuModuleUnload(static_cast<CUmodule>(module_));
}

void* Module::function(const std::string& kernel_name) const {
  const Driver& d = need();
  CUfunction f = nullptr;
  check(d.p_cuModuleGetFunction(&f, static_cast<CUmodule>(module_), kernel_name.c_str()),
        "cuModuleGetFunction", kernel_name);
  return f;
}

void launch(void* function, Dim3 grid, Dim3 block, std::size_t shared_bytes, void** args,
            const std::string& kernel_name) {
  make_current();
  const Driver& d = need();
  auto f = static_cast<CUfunction>(function);
  if (shared_bytes > 48 * 1024)
    check(d.p_cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                 static_cast<int>(shared_bytes)),
          "cuFuncSetAttribute", kernel_name);
  check(d.p_cuLaunchKernel(f, grid.x, grid.y, grid.z, block.x, block.y, block.z,
                           static_cast<unsigned>(shared_bytes), nullptr, args, nullptr),
        "cuLaunchKernel", kernel_name);
}

void synchronize(const std::string& what) {
  make_current();
  check(need().p_cuCtxSynchronize(), "cuCtxSynchronize", what);
}

DevicePtr device_alloc(std::size_t bytes) {
  make_current();
  CUdeviceptr p = 0;
  check(need().p_cuMemAlloc(&p, bytes == 0 ? 1 : bytes), "cuMemAlloc",
        std::to_string(bytes) + " bytes");
  return static_cast<DevicePtr>(p);
}

void device_free(DevicePtr p) noexcept {
  if (p && driver().error.empty()) driver().p_cuMemFree(static_cast<CUdeviceptr>(p));
}

void copy_to_device(DevicePtr dst, const void* src, std::size_t bytes) {
  make_current();
  check(need().p_cuMemcpyHtoD(static_cast<CUdeviceptr>(dst), src, bytes), "cuMemcpyHtoD", "tensor");
}

void copy_to_host(void* dst, DevicePtr src, std::size_t bytes) {
  make_current();
  check(need().p_cuMemcpyDtoH(dst, static_cast<CUdeviceptr>(src), bytes), "cuMemcpyDtoH", "tensor");
}

void copy_device_to_device(DevicePtr dst, DevicePtr src, std::size_t bytes) {
  make_current();
  check(need().p_cuMemcpyDtoD(static_cast<CUdeviceptr>(dst), static_cast<CUdeviceptr>(src), bytes),
        "cuMemcpyDtoD", "tensor");
}

void memset_device(DevicePtr dst, unsigned char value, std::size_t bytes) {
  make_current();
  check(need().p_cuMemsetD8(static_cast<CUdeviceptr>(dst), value, bytes), "cuMemsetD8", "tensor");
}

EventTimer::EventTimer() {
  make_current();
  const Driver& d = need();
  CUevent a = nullptr, b = nullptr;
  check(d.p_cuEventCreate(&a, CU_EVENT_DEFAULT), "cuEventCreate", "timer");
  check(d.p_cuEventCreate(&b, CU_EVENT_DEFAULT), "cuEventCreate", "timer");
  start_ = a;
  stop_ = b;
}

EventTimer::~EventTimer() {
  if (driver().error.empty()) {
    if (start_) driver().p_cuEventDestroy(static_cast<CUevent>(start_));
    if (stop_) driver().p_cuEventDestroy(static_cast<CUevent>(stop_));
  }
}

void EventTimer::start() { check(need().p_cuEventRecord(static_cast<CUevent>(start_), nullptr), "cuEventRecord", "timer"); }
void EventTimer::stop() { check(need().p_cuEventRecord(static_cast<CUevent>(stop_), nullptr), "cuEventRecord", "timer"); }

float EventTimer::elapsed_ms() {
  const Driver& d = need();
  check(d.p_cuEventSynchronize(static_cast<CUevent>(stop_)), "cuEventSynchronize", "timer");
  float ms = 0;
  check(d.p_cuEventElapsedTime(&ms, static_cast<CUevent>(start_), static_cast<CUevent>(stop_)),
        "cuEventElapsedTime", "timer");
  return ms;
}

}  // namespace tx::runtime
