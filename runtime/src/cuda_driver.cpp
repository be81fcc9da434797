// The CUDA driver API through dlopen("libcuda.so.1"), so that libtx loads on
// machines without an NVIDIA driver. cuda.h provides the prototypes only.
//
// cuda.h #defines many entry points to versioned symbols (cuMemAlloc ->
// cuMemAlloc_v2). The two-level TX_CU_STR expands the macro before
// stringizing, so dlsym asks for the versioned symbol whose ABI matches
// decltype(&cuMemAlloc); asking for the plain name would get the legacy
// 32-bit entry point.
#include "tx/runtime/cuda_driver.hpp"

#include <cuda.h>
#include <dlfcn.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "loader_leaks.hpp"
#include "tx/error.hpp"

#define TX_CU_STR2(x) #x
#define TX_CU_STR(x) TX_CU_STR2(x)

namespace tx::runtime {

namespace {

// Looked up under the (versioned) names cuda.h maps them to; every driver
// since CUDA 11 has all of them, so any one missing means the driver is unusable.
#define TX_CU_REQUIRED(X)     \
  X(cuInit)                   \
  X(cuDriverGetVersion)       \
  X(cuGetErrorName)           \
  X(cuGetErrorString)         \
  X(cuDeviceGetCount)         \
  X(cuDeviceGet)              \
  X(cuDeviceGetName)          \
  X(cuDeviceGetAttribute)     \
  X(cuDeviceTotalMem)         \
  X(cuDevicePrimaryCtxRetain) \
  X(cuCtxSetCurrent)          \
  X(cuCtxGetCurrent)          \
  X(cuCtxSynchronize)         \
  X(cuModuleLoadData)         \
  X(cuModuleUnload)           \
  X(cuModuleGetFunction)      \
  X(cuFuncSetAttribute)       \
  X(cuLaunchKernel)           \
  X(cuMemAlloc)               \
  X(cuMemFree)                \
  X(cuMemcpyHtoD)             \
  X(cuMemcpyDtoH)             \
  X(cuMemcpyDtoD)             \
  X(cuMemsetD8)               \
  X(cuEventCreate)            \
  X(cuEventDestroy)           \
  X(cuEventRecord)            \
  X(cuEventSynchronize)       \
  X(cuEventQuery)             \
  X(cuStreamCreate)           \
  X(cuStreamDestroy)          \
  X(cuStreamSynchronize)      \
  X(cuStreamWaitEvent)        \
  X(cuMemcpyHtoDAsync)        \
  X(cuMemcpyDtoHAsync)        \
  X(cuMemcpyDtoDAsync)        \
  X(cuMemsetD8Async)          \
  X(cuMemHostAlloc)           \
  X(cuMemFreeHost)            \
  X(cuPointerGetAttribute)

// Stream-ordered allocation (CUDA 11.2+): optional; without it tensors fall
// back to cuMemAlloc / cuMemFree. Stream capture and graphs (CUDA 12 names):
// optional; without them tx::Graph is a tx error and nothing is capturing.
// Peer access and IPC (tx::dist): every driver has them; looked up as
// optional all the same, so that one missing fails only tx::dist.
#define TX_CU_OPTIONAL(X)      \
  X(cuMemAllocAsync)           \
  X(cuMemFreeAsync)            \
  X(cuDeviceGetDefaultMemPool) \
  X(cuMemPoolSetAttribute)     \
  X(cuMemPoolGetAttribute)     \
  X(cuMemPoolTrimTo)           \
  X(cuTensorMapEncodeTiled)    \
  X(cuStreamIsCapturing)       \
  X(cuStreamBeginCapture)      \
  X(cuStreamEndCapture)        \
  X(cuGraphInstantiate)        \
  X(cuGraphLaunch)             \
  X(cuGraphGetNodes)           \
  X(cuGraphExecDestroy)        \
  X(cuGraphDestroy)            \
  X(cuDeviceCanAccessPeer)     \
  X(cuCtxEnablePeerAccess)     \
  X(cuIpcGetMemHandle)         \
  X(cuIpcOpenMemHandle)        \
  X(cuIpcCloseMemHandle)       \
  X(cuMemcpyAsync)             \
  X(cuStreamWaitValue32)       \
  X(cuStreamWriteValue32)

struct Driver {
  void* handle = nullptr;
  std::string error;  // why no GPU can be used; empty when one can
  int version = 0;    // cuDriverGetVersion, e.g. 12040
  int device_count = 0;
#define TX_CU_MEMBER(name) decltype(&name) p_##name = nullptr;
  TX_CU_REQUIRED(TX_CU_MEMBER)
  TX_CU_OPTIONAL(TX_CU_MEMBER)
  TX_CU_MEMBER(cuEventElapsedTime)
#undef TX_CU_MEMBER
};

std::string result_text(const Driver& d, CUresult r) {
  const char* name = nullptr;
  const char* str = nullptr;
  if (d.p_cuGetErrorName) d.p_cuGetErrorName(r, &name);
  if (d.p_cuGetErrorString) d.p_cuGetErrorString(r, &str);
  std::string s = name ? name : "CUresult " + std::to_string(static_cast<int>(r));
  if (str) s += std::string(": ") + str;
  return s;
}

Driver* open_driver() {
  auto* d = new Driver();
  TX_IGNORE_LOADER_LEAKS;  // a failed dlopen leaves dlerror's buffer behind
  d->handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!d->handle) {
    const char* e = dlerror();
    d->error = std::string("libcuda.so.1 not found: ") + (e ? e : "dlopen failed") +
               " (no NVIDIA driver is installed on this machine)";
    return d;
  }
  std::string missing;
#define TX_CU_LOAD(name)                                                              \
  d->p_##name = reinterpret_cast<decltype(&name)>(dlsym(d->handle, TX_CU_STR(name))); \
  if (!d->p_##name) missing += std::string(missing.empty() ? "" : ", ") + TX_CU_STR(name);
  TX_CU_REQUIRED(TX_CU_LOAD)
#undef TX_CU_LOAD
#define TX_CU_LOAD_OPTIONAL(name) \
  d->p_##name = reinterpret_cast<decltype(&name)>(dlsym(d->handle, TX_CU_STR(name)));
  TX_CU_OPTIONAL(TX_CU_LOAD_OPTIONAL)
#undef TX_CU_LOAD_OPTIONAL
  // CUDA 12.8 headers map cuEventElapsedTime to _v2; older drivers only have
  // the original, whose prototype is the same.
  d->p_cuEventElapsedTime = reinterpret_cast<decltype(&cuEventElapsedTime)>(
      dlsym(d->handle, TX_CU_STR(cuEventElapsedTime)));
  if (!d->p_cuEventElapsedTime)
    d->p_cuEventElapsedTime =
        reinterpret_cast<decltype(&cuEventElapsedTime)>(dlsym(d->handle, "cuEventElapsedTime"));
  if (!d->p_cuEventElapsedTime)
    missing += (missing.empty() ? "" : ", ") + std::string("cuEventElapsedTime");
  if (!missing.empty()) {
    d->error = "libcuda.so.1 lacks " + missing + " (the NVIDIA driver is too old for tx)";
    return d;
  }
  if (CUresult r = d->p_cuInit(0); r != CUDA_SUCCESS) {
    d->error = "cuInit failed: " + result_text(*d, r);
    return d;
  }
  d->p_cuDriverGetVersion(&d->version);
  if (CUresult r = d->p_cuDeviceGetCount(&d->device_count); r != CUDA_SUCCESS) {
    d->error = "cuDeviceGetCount failed: " + result_text(*d, r);
    return d;
  }
  if (d->device_count == 0) d->error = "the NVIDIA driver reports no CUDA device";
  return d;
}

// Opened once, thread-safely (a function-local static), and never closed:
// modules and allocations may outlive any static destructor order.
const Driver& driver() {
  static const Driver* d = open_driver();
  return *d;
}

const Driver& need() {
  const Driver& d = driver();
  if (!d.error.empty()) fail("tx.cuda", "", {}, "no usable GPU: " + d.error);
  return d;
}

// After these the process's GPU state is poisoned: every later driver call
// returns the same error (a reset primary context or a new context too).
bool sticky(CUresult r) {
  switch (r) {
    case CUDA_ERROR_ILLEGAL_ADDRESS:
    case CUDA_ERROR_LAUNCH_FAILED:
    case CUDA_ERROR_LAUNCH_TIMEOUT:
    case CUDA_ERROR_HARDWARE_STACK_ERROR:
    case CUDA_ERROR_ILLEGAL_INSTRUCTION:
    case CUDA_ERROR_MISALIGNED_ADDRESS:
    case CUDA_ERROR_INVALID_ADDRESS_SPACE:
    case CUDA_ERROR_INVALID_PC:
    case CUDA_ERROR_ASSERT:
    case CUDA_ERROR_ECC_UNCORRECTABLE:
      return true;
    default:
      return false;
  }
}

std::atomic<bool> g_lost{false};
std::mutex g_lost_mu;
std::string g_lost_reason;  // the first sticky error, under g_lost_mu

// The errors of a call that stream capture (a CUDA graph being recorded)
// does not allow.
bool capture_error(CUresult r) {
  switch (r) {
    case CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED:
    case CUDA_ERROR_STREAM_CAPTURE_INVALIDATED:
    case CUDA_ERROR_STREAM_CAPTURE_MERGE:
    case CUDA_ERROR_STREAM_CAPTURE_UNMATCHED:
    case CUDA_ERROR_STREAM_CAPTURE_UNJOINED:
    case CUDA_ERROR_STREAM_CAPTURE_ISOLATION:
    case CUDA_ERROR_STREAM_CAPTURE_IMPLICIT:
    case CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD:
      return true;
    default:
      return false;
  }
}

void check(CUresult r, const char* call, const std::string& what, const std::string& detail = {}) {
  if (r == CUDA_SUCCESS) return;
  std::string reason = std::string(call) + " failed: " + result_text(driver(), r);
  if (capture_error(r))
    reason +=
        " (a CUDA graph is being captured: a synchronization, a synchronous copy, a host read or "
        "an allocation without a stream-ordered pool is not allowed then; allocate tensors and "
        "run each op once before capturing, so that its first-use setup happens outside the "
        "graph)";
  if (sticky(r)) {
    {
      std::lock_guard<std::mutex> lock(g_lost_mu);
      if (g_lost_reason.empty()) g_lost_reason = reason + " (in " + what + ")";
    }
    g_lost.store(true, std::memory_order_release);
    reason +=
        " (a kernel fault: the GPU is unusable in this process from now on -- every later GPU "
        "call fails, the driver allows no reset -- restart the process; host kernels still run)";
  }
  fail("tx.cuda", what, {}, reason, detail);
}

// TX_CUDA_DEVICE, validated once against the device count: the device of
// tx's defaults in every thread that has not set its own.
int process_ordinal() {
  static const int ordinal = [] {
    const Driver& d = need();
    const char* v = std::getenv("TX_CUDA_DEVICE");
    if (!v || !*v) return 0;
    char* end = nullptr;
    errno = 0;
    long n = std::strtol(v, &end, 10);
    if (*end != '\0' || errno != 0 || n < 0 || n >= d.device_count)
      fail("tx.cuda", "TX_CUDA_DEVICE=" + std::string(v), {},
           "not a device ordinal: this machine has " + std::to_string(d.device_count) +
               " CUDA device(s), numbered from 0");
    return static_cast<int>(n);
  }();
  return ordinal;
}

// set_thread_device's ordinal for this thread (-1: none).
thread_local int t_device = -1;

// The calling thread's device: its own (set_thread_device), else TX_CUDA_DEVICE.
int device_ordinal() { return t_device >= 0 ? t_device : process_ordinal(); }

// Per device: the CUdevice, its primary context, its stream-ordered memory
// pool. Made on first use of the ordinal, never destroyed (modules and
// allocations may outlive any static destructor order).
struct DeviceState {
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  CUmemoryPool pool = nullptr;  // null: no stream-ordered allocation
};

constexpr int kMaxDevices = 64;

DeviceState& device_state(int ordinal) {
  static std::mutex mu;
  // Set once per device, read on every launch and allocation: an atomic
  // read there, the lock only for the first use.
  static std::atomic<DeviceState*> states[kMaxDevices] = {};
  if (ordinal >= 0 && ordinal < kMaxDevices)
    if (DeviceState* s = states[ordinal].load(std::memory_order_acquire)) return *s;
  const Driver& d = need();
  if (ordinal < 0 || ordinal >= d.device_count || ordinal >= kMaxDevices)
    fail("tx.cuda", "cuda:" + std::to_string(ordinal), {},
         "no such device: this machine has " + std::to_string(d.device_count) +
             " CUDA device(s), numbered from 0");
  std::lock_guard<std::mutex> lock(mu);
  if (!states[ordinal].load(std::memory_order_relaxed)) {
    auto* s = new DeviceState();
    check(d.p_cuDeviceGet(&s->dev, ordinal), "cuDeviceGet", "device");
    check(d.p_cuDevicePrimaryCtxRetain(&s->ctx, s->dev), "cuDevicePrimaryCtxRetain", "device");
    // The device's default pool keeps what tensors free, up to a release
    // threshold, so a freed temporary's memory is reused by the next one on
    // its stream without a trip to the driver's allocator or a device sync.
    // Above the threshold the driver gives memory back at synchronization
    // points: a process that once peaked at tens of GiB does not keep them
    // from other processes (TX_POOL_KEEP_BYTES, default 1 GiB).
    if (d.p_cuMemAllocAsync && d.p_cuDeviceGetDefaultMemPool &&
        d.p_cuDeviceGetDefaultMemPool(&s->pool, s->dev) == CUDA_SUCCESS) {
      cuuint64_t keep = cuuint64_t{1} << 30;
      if (const char* v = std::getenv("TX_POOL_KEEP_BYTES"); v && *v)
        keep = static_cast<cuuint64_t>(std::strtoull(v, nullptr, 10));
      d.p_cuMemPoolSetAttribute(s->pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep);
    } else {
      s->pool = nullptr;
    }
    states[ordinal].store(s, std::memory_order_release);
  }
  return *states[ordinal].load(std::memory_order_relaxed);
}

// Any thread may call into tx: make the device's primary context current on
// this one. cuCtxGetCurrent is a thread-local read, cheap enough per call.
const Driver& make_current(int ordinal) {
  const Driver& d = need();
  if (g_lost.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> lock(g_lost_mu);
    fail("tx.cuda", "", {},
         "the GPU is unusable in this process since an earlier kernel fault: " + g_lost_reason,
         "a kernel fault is sticky for the whole process in the CUDA driver; restart the process "
         "to use the GPU again (kernels compiled for Device::host() still run)");
  }
  CUcontext ctx = device_state(ordinal).ctx;
  CUcontext cur = nullptr;
  if (d.p_cuCtxGetCurrent(&cur) != CUDA_SUCCESS || cur != ctx)
    check(d.p_cuCtxSetCurrent(ctx), "cuCtxSetCurrent", "device");
  return d;
}

const Driver& make_current() { return make_current(device_ordinal()); }

// For destructors: release resources if the driver works, never throw.
bool make_current_noexcept(int ordinal = -1) noexcept {
  try {
    // After a fault the driver refuses everything, frees included.
    if (!driver().error.empty() || context_lost()) return false;
    make_current(ordinal < 0 ? device_ordinal() : ordinal);
    return true;
  } catch (...) {
    return false;
  }
}

std::string version_str(int v) {
  return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
}

std::string dim_str(Dim3 d) {
  return std::to_string(d.x) + "x" + std::to_string(d.y) + "x" + std::to_string(d.z);
}

CUdeviceptr cu(DevicePtr p) { return static_cast<CUdeviceptr>(p); }

}  // namespace

bool context_lost() noexcept { return g_lost.load(std::memory_order_acquire); }

bool cuda_available(std::string* why) {
  const Driver& d = driver();
  if (!d.error.empty() && why) *why = d.error;
  return d.error.empty();
}

int cuda_driver_version() {
  const Driver& d = driver();
  return d.error.empty() ? d.version : 0;
}

std::string DeviceInfo::arch() const {
  std::string a = "sm_" + std::to_string(cc_major) + std::to_string(cc_minor);
  // wgmma and setmaxnreg exist only in the arch-specific sm_90a target.
  if (cc_major == 9 && cc_minor == 0) a += "a";
  return a;
}

int device_count() {
  const Driver& d = driver();
  return d.error.empty() ? d.device_count : 0;
}

int default_ordinal() { return device_ordinal(); }

int set_thread_device(int ordinal) {
  const int previous = t_device;
  if (ordinal < 0) {
    t_device = -1;
    return previous;
  }
  make_current(ordinal);  // validates the ordinal
  t_device = ordinal;
  return previous;
}

const DeviceInfo& device_info(int ordinal) {
  make_current(ordinal);
  static std::mutex mu;
  static DeviceInfo* infos[kMaxDevices] = {};
  std::lock_guard<std::mutex> lock(mu);
  if (!infos[ordinal]) {
    const Driver& d = need();
    auto* i = new DeviceInfo();
    i->ordinal = ordinal;
    CUdevice dev = device_state(ordinal).dev;
    char name[256] = {};
    check(d.p_cuDeviceGetName(name, sizeof name, dev), "cuDeviceGetName", "device");
    i->name = name;
    auto attr = [&](CUdevice_attribute a) {
      int v = 0;
      check(d.p_cuDeviceGetAttribute(&v, a, dev), "cuDeviceGetAttribute", "device");
      return v;
    };
    i->cc_major = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
    i->cc_minor = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
    i->sm_count = attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
    i->max_threads_per_block = attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
    i->max_shared_per_block = attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK);
    i->max_shared_per_block_optin = attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
    i->l2_bytes = attr(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE);
    std::size_t mem = 0;
    check(d.p_cuDeviceTotalMem(&mem, dev), "cuDeviceTotalMem", "device");
    i->total_memory = mem;
    infos[ordinal] = i;
  }
  return *infos[ordinal];
}

const DeviceInfo& current_device() { return device_info(device_ordinal()); }

std::shared_ptr<Module> Module::load(const std::vector<char>& cubin, const std::string& name,
                                     int ordinal) {
  if (ordinal < 0) ordinal = device_ordinal();
  const Driver& d = make_current(ordinal);
  if (cubin.empty()) fail("tx.cuda", name, {}, "cuModuleLoadData: the binary is empty");
  CUmodule mod = nullptr;
  CUresult r = d.p_cuModuleLoadData(&mod, cubin.data());
  if (r != CUDA_SUCCESS) {
    // The usual cause is a binary from an NVRTC newer than the driver.
    std::string hint = "the driver supports CUDA " + version_str(d.version) +
                       "; a cubin or PTX from a newer toolkit needs a newer driver";
    check(r, "cuModuleLoadData", name, hint);
  }
  std::shared_ptr<Module> m(new Module());
  m->module_ = mod;
  m->name_ = name;
  m->ordinal_ = ordinal;
  return m;
}

Module::~Module() {
  if (module_ && make_current_noexcept(ordinal_))
    driver().p_cuModuleUnload(static_cast<CUmodule>(module_));
}

void* Module::function(const std::string& kernel_name) const {
  const Driver& d = make_current(ordinal_);
  CUfunction f = nullptr;
  check(d.p_cuModuleGetFunction(&f, static_cast<CUmodule>(module_), kernel_name.c_str()),
        "cuModuleGetFunction", kernel_name, "module " + name_);
  return f;
}

void launch(void* function, Dim3 grid, Dim3 block, std::size_t shared_bytes, void** args,
            const std::string& kernel_name, int ordinal, StreamHandle stream) {
  const Driver& d = make_current(ordinal < 0 ? device_ordinal() : ordinal);
  if (!function) fail("tx.cuda", kernel_name, {}, "launch: no CUfunction (module not loaded?)");
  // The configuration text is built only for an error message: launches are hot.
  auto config = [&] {
    return "grid " + dim_str(grid) + ", block " + dim_str(block) + ", " +
           std::to_string(shared_bytes) + " bytes of dynamic shared memory";
  };
  auto f = static_cast<CUfunction>(function);
  // Beyond 48 KiB of dynamic shared memory the kernel must opt in.
  if (shared_bytes > 48 * 1024) {
    CUresult r = d.p_cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                        static_cast<int>(shared_bytes));
    if (r != CUDA_SUCCESS) check(r, "cuFuncSetAttribute", kernel_name, config());
  }
  CUresult r = d.p_cuLaunchKernel(f, grid.x, grid.y, grid.z, block.x, block.y, block.z,
                                  static_cast<unsigned>(shared_bytes),
                                  static_cast<CUstream>(stream), args, nullptr);
  if (r != CUDA_SUCCESS) check(r, "cuLaunchKernel", kernel_name, config());
}

void encode_tensor_map(void* out, const TensorMapSpec& m, const std::string& what) {
  const Driver& d = make_current();
  if (!d.p_cuTensorMapEncodeTiled)
    fail(what, "", {},
         "the driver has no cuTensorMapEncodeTiled (TMA copies need CUDA 12 and an sm_90 GPU)");
  CUtensorMapDataType t;
  switch (m.element_bytes) {
    case 1:
      t = CU_TENSOR_MAP_DATA_TYPE_UINT8;
      break;
    case 2:
      t = CU_TENSOR_MAP_DATA_TYPE_UINT16;
      break;
    case 4:
      t = CU_TENSOR_MAP_DATA_TYPE_UINT32;
      break;
    default:
      t = CU_TENSOR_MAP_DATA_TYPE_UINT64;
      break;
  }
  switch (m.floating) {
    case TensorMapSpec::Floating::f16:
      t = CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
      break;
    case TensorMapSpec::Floating::bf16:
      t = CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
      break;
    case TensorMapSpec::Floating::f32:
      t = CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
      break;
    case TensorMapSpec::Floating::f64:
      t = CU_TENSOR_MAP_DATA_TYPE_FLOAT64;
      break;
    case TensorMapSpec::Floating::none:
      break;
  }
  CUtensorMapSwizzle sw = m.swizzle_bytes == 128  ? CU_TENSOR_MAP_SWIZZLE_128B
                          : m.swizzle_bytes == 64 ? CU_TENSOR_MAP_SWIZZLE_64B
                          : m.swizzle_bytes == 32 ? CU_TENSOR_MAP_SWIZZLE_32B
                                                  : CU_TENSOR_MAP_SWIZZLE_NONE;
  cuuint64_t dims[5], strides[4];
  cuuint32_t box[5], elem_strides[5];
  for (int i = 0; i < m.rank; ++i) {
    dims[i] = m.dims[i];
    box[i] = m.box[i];
    elem_strides[i] = 1;
    if (i + 1 < m.rank) strides[i] = m.strides[i];
  }
  static_assert(sizeof(CUtensorMap) == 128);
  CUresult r = d.p_cuTensorMapEncodeTiled(
      static_cast<CUtensorMap*>(out), t, static_cast<cuuint32_t>(m.rank),
      reinterpret_cast<void*>(static_cast<std::uintptr_t>(m.address)), dims, strides, box,
      elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, sw, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) check(r, "cuTensorMapEncodeTiled", what, m.describe());
}

std::string TensorMapSpec::describe() const {
  std::string s = "tensor map: rank " + std::to_string(rank) + ", dims (innermost first) [";
  for (int i = 0; i < rank; ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  s += "], box [";
  for (int i = 0; i < rank; ++i) s += (i ? ", " : "") + std::to_string(box[i]);
  s += "], swizzle " + std::to_string(swizzle_bytes) + " bytes";
  return s;
}

// ------------------------------------------------------- CUDA graphs

bool stream_capturing(int ordinal, StreamHandle stream) {
  const Driver& d = driver();
  if (!d.error.empty() || !d.p_cuStreamIsCapturing) return false;
  make_current(ordinal < 0 ? device_ordinal() : ordinal);
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  CUresult r = d.p_cuStreamIsCapturing(static_cast<CUstream>(stream), &status);
  // The legacy stream while another stream captures in global mode answers
  // CAPTURE_IMPLICIT: work there would break that capture as well.
  if (r == CUDA_ERROR_STREAM_CAPTURE_IMPLICIT) return true;
  return r == CUDA_SUCCESS && status != CU_STREAM_CAPTURE_STATUS_NONE;
}

namespace {
const Driver& need_graphs(const std::string& what) {
  const Driver& d = need();
  if (!d.p_cuStreamBeginCapture || !d.p_cuStreamEndCapture || !d.p_cuGraphInstantiate ||
      !d.p_cuGraphLaunch || !d.p_cuGraphExecDestroy || !d.p_cuGraphDestroy || !d.p_cuGraphGetNodes)
    fail("tx.cuda", what, {}, "the driver has no CUDA graph API (CUDA 12 or newer is needed)");
  return d;
}
}  // namespace

void begin_capture(int ordinal, StreamHandle stream, const std::string& what) {
  const Driver& d = need_graphs(what);
  make_current(ordinal);
  if (!stream)
    fail("tx.cuda", what, {}, "the legacy default stream cannot be captured into a graph");
  // Thread-local: calls that capture forbids are refused in this thread
  // only; other threads of the process go on using the GPU.
  check(
      d.p_cuStreamBeginCapture(static_cast<CUstream>(stream), CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
      "cuStreamBeginCapture", what);
}

GraphHandle end_capture(int ordinal, StreamHandle stream, const std::string& what) {
  const Driver& d = need_graphs(what);
  make_current(ordinal);
  CUgraph g = nullptr;
  check(d.p_cuStreamEndCapture(static_cast<CUstream>(stream), &g), "cuStreamEndCapture", what);
  return g;
}

GraphExecHandle graph_instantiate(int ordinal, GraphHandle graph, const std::string& what) {
  const Driver& d = need_graphs(what);
  make_current(ordinal);
  CUgraphExec e = nullptr;
  check(d.p_cuGraphInstantiate(&e, static_cast<CUgraph>(graph), 0), "cuGraphInstantiate", what);
  return e;
}

std::size_t graph_node_count(GraphHandle graph) {
  const Driver& d = need_graphs("graph");
  std::size_t n = 0;
  check(d.p_cuGraphGetNodes(static_cast<CUgraph>(graph), nullptr, &n), "cuGraphGetNodes", "graph");
  return n;
}

void graph_launch(int ordinal, GraphExecHandle exec, StreamHandle stream, const std::string& what) {
  const Driver& d = make_current(ordinal);
  check(d.p_cuGraphLaunch(static_cast<CUgraphExec>(exec), static_cast<CUstream>(stream)),
        "cuGraphLaunch", what);
}

void graph_destroy(int ordinal, GraphHandle graph, GraphExecHandle exec) noexcept {
  if (!make_current_noexcept(ordinal)) return;
  const Driver& d = driver();
  if (exec && d.p_cuGraphExecDestroy) d.p_cuGraphExecDestroy(static_cast<CUgraphExec>(exec));
  if (graph && d.p_cuGraphDestroy) d.p_cuGraphDestroy(static_cast<CUgraph>(graph));
}

void synchronize(const std::string& what) {
  const Driver& d = make_current();
  check(d.p_cuCtxSynchronize(), "cuCtxSynchronize", what);
}

void synchronize_device(int ordinal, const std::string& what) {
  const Driver& d = make_current(ordinal);
  check(d.p_cuCtxSynchronize(), "cuCtxSynchronize", what);
}

// ------------------------------------------------------------- memory

bool stream_ordered_allocation(int ordinal) { return device_state(ordinal).pool != nullptr; }

namespace {
// A host-side cache of freed small blocks in front of the driver's pool, as
// PyTorch's caching allocator keeps one: cuMemAllocAsync + cuMemFreeAsync
// cost about a microsecond per temporary, a free list a few tens of
// nanoseconds -- the difference between an op call at PyTorch's host cost
// and one at half of it. A block is cached under the stream it was freed on
// and reused only by an allocation on that same stream: the stream's order
// already places the new user after the old one, no event is needed. Only
// streams whose lifetime tx knows take part (the legacy default stream and
// the streams tx creates, whose blocks are released before the stream is
// destroyed); a caller's stream goes straight to the driver's pool.
constexpr std::size_t kCachedBlockMax = 1u << 20;  // larger blocks: the driver's pool
constexpr std::size_t kCacheKeepMax = 256u << 20;  // cached bytes per device at most
constexpr std::size_t kGranule = 512;

struct BlockKey {
  StreamHandle stream;
  std::size_t bytes;
  bool operator==(const BlockKey&) const = default;
};
struct BlockKeyHash {
  std::size_t operator()(const BlockKey& k) const noexcept {
    return std::hash<const void*>()(k.stream) ^ (k.bytes * 0x9e3779b97f4a7c15ull);
  }
};
struct BlockCache {
  std::mutex mu;
  std::unordered_map<BlockKey, std::vector<CUdeviceptr>, BlockKeyHash> free;
  std::size_t cached_bytes = 0;
};
BlockCache& block_cache(int ordinal) {
  static BlockCache caches[kMaxDevices];
  return caches[ordinal];
}
std::size_t rounded_block(std::size_t bytes) {
  return (std::max<std::size_t>(bytes, 1) + kGranule - 1) / kGranule * kGranule;
}

// Hands every cached block of `ordinal` (of one stream, or all) back to the
// driver's pool, each freed on its own stream. Returns the bytes released.
std::size_t release_blocks(int ordinal, const StreamHandle* only) noexcept {
  BlockCache& c = block_cache(ordinal);
  std::vector<std::pair<CUdeviceptr, StreamHandle>> out;
  std::size_t bytes = 0;
  {
    std::lock_guard<std::mutex> lock(c.mu);
    for (auto it = c.free.begin(); it != c.free.end();) {
      if (only && it->first.stream != *only) {
        ++it;
        continue;
      }
      for (CUdeviceptr p : it->second) out.push_back({p, it->first.stream});
      bytes += it->first.bytes * it->second.size();
      c.cached_bytes -= it->first.bytes * it->second.size();
      it = c.free.erase(it);
    }
  }
  if (out.empty() || !make_current_noexcept(ordinal)) return 0;
  for (auto [p, st] : out) driver().p_cuMemFreeAsync(p, static_cast<CUstream>(st));
  return bytes;
}
}  // namespace

DevicePtr device_alloc(std::size_t bytes, int ordinal, StreamHandle stream) {
  return device_alloc_cached(bytes, ordinal, stream, /*cache=*/false);
}

DevicePtr device_alloc_cached(std::size_t bytes, int ordinal, StreamHandle stream, bool cache) {
  if (ordinal < 0) ordinal = device_ordinal();
  const Driver& d = make_current(ordinal);
  CUdeviceptr p = 0;
  // A zero-byte request still gets a distinct, aligned address.
  std::size_t n = bytes == 0 ? 1 : bytes;
  // The message is built only on failure: allocation is on every op's path.
  auto what = [bytes] { return "device_alloc(" + std::to_string(bytes) + " bytes)"; };
  if (DeviceState& ds = device_state(ordinal); ds.pool) {
    if (cache && n <= kCachedBlockMax) n = rounded_block(n);
    // A stream being captured into a CUDA graph records the allocation (a
    // graph node): a block from the host-side free list would be memory the
    // graph does not own. (The legacy stream is never captured.)
    if (cache && stream && stream_capturing(ordinal, stream)) cache = false;
    if (cache && n <= kCachedBlockMax) {
      BlockCache& c = block_cache(ordinal);
      std::lock_guard<std::mutex> lock(c.mu);
      auto it = c.free.find({stream, n});
      if (it != c.free.end() && !it->second.empty()) {
        p = it->second.back();
        it->second.pop_back();
        c.cached_bytes -= n;
        return static_cast<DevicePtr>(p);
      }
    }
    CUresult r = d.p_cuMemAllocAsync(&p, n, static_cast<CUstream>(stream));
    if (r == CUDA_ERROR_OUT_OF_MEMORY) {
      // Memory the caches keep for reuse may be what is missing (freed on
      // another stream, or in blocks of other sizes): give it back to the
      // driver and try once more, as PyTorch's allocator does.
      release_blocks(ordinal, nullptr);
      check(d.p_cuCtxSynchronize(), "cuCtxSynchronize", what());
      check(d.p_cuMemPoolTrimTo(ds.pool, 0), "cuMemPoolTrimTo", what());
      r = d.p_cuMemAllocAsync(&p, n, static_cast<CUstream>(stream));
    }
    check(r, "cuMemAllocAsync", what());
  } else
    check(d.p_cuMemAlloc(&p, n), "cuMemAlloc", what());
  return static_cast<DevicePtr>(p);
}

void device_free(DevicePtr p, int ordinal, StreamHandle stream) noexcept {
  device_free_cached(p, 0, ordinal, stream, /*cache=*/false);
}

void device_free_cached(DevicePtr p, std::size_t bytes, int ordinal, StreamHandle stream,
                        bool cache) noexcept {
  if (ordinal < 0) {
    try {
      ordinal = device_ordinal();
    } catch (...) {
      return;
    }
  }
  if (!p || !make_current_noexcept(ordinal)) return;
  // Stream-ordered: the block returns to the pool once the stream's earlier
  // work is done, and the next allocation on that stream may take it at
  // once -- no device-wide synchronization, unlike cuMemFree.
  if (device_state(ordinal).pool) {
    const std::size_t n = rounded_block(bytes);
    bool capturing = false;
    if (cache && stream) {
      try {
        capturing = stream_capturing(ordinal, stream);
      } catch (...) {
      }
    }
    if (cache && !capturing && n <= kCachedBlockMax) {
      BlockCache& c = block_cache(ordinal);
      std::lock_guard<std::mutex> lock(c.mu);
      if (c.cached_bytes + n <= kCacheKeepMax) {
        try {
          c.free[{stream, n}].push_back(cu(p));
          c.cached_bytes += n;
          return;
        } catch (...) {  // no memory for the list: give the block to the driver
        }
      }
    }
    driver().p_cuMemFreeAsync(cu(p), static_cast<CUstream>(stream));
  } else
    driver().p_cuMemFree(cu(p));
}

std::size_t cached_block_bytes(int ordinal) {
  BlockCache& c = block_cache(ordinal);
  std::lock_guard<std::mutex> lock(c.mu);
  return c.cached_bytes;
}

PoolStats pool_stats(int ordinal) {
  PoolStats st;
  DeviceState& ds = device_state(ordinal);
  if (!ds.pool) return st;
  const Driver& d = make_current(ordinal);
  cuuint64_t v = 0;
  if (d.p_cuMemPoolGetAttribute(ds.pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &v) == CUDA_SUCCESS)
    st.reserved_bytes = v;
  if (d.p_cuMemPoolGetAttribute(ds.pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &v) == CUDA_SUCCESS)
    st.used_bytes = v;
  if (d.p_cuMemPoolGetAttribute(ds.pool, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, &v) == CUDA_SUCCESS)
    st.peak_reserved_bytes = v;
  st.stream_ordered = true;
  return st;
}

void pool_trim(int ordinal) {
  DeviceState& ds = device_state(ordinal);
  if (!ds.pool) return;
  release_blocks(ordinal, nullptr);
  const Driver& d = make_current(ordinal);
  check(d.p_cuCtxSynchronize(), "cuCtxSynchronize", "empty_cache");
  check(d.p_cuMemPoolTrimTo(ds.pool, 0), "cuMemPoolTrimTo", "empty_cache");
}

void* host_alloc_pinned(std::size_t bytes) {
  const Driver& d = make_current();
  void* p = nullptr;
  check(d.p_cuMemHostAlloc(&p, bytes == 0 ? 1 : bytes, CU_MEMHOSTALLOC_PORTABLE), "cuMemHostAlloc",
        "pinned host memory (" + std::to_string(bytes) + " bytes)");
  return p;
}

void host_free_pinned(void* p) noexcept {
  if (p && make_current_noexcept()) driver().p_cuMemFreeHost(p);
}

int pointer_device(DevicePtr p) {
  const Driver& d = make_current();
  int ordinal = -1;
  if (d.p_cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, cu(p)) !=
      CUDA_SUCCESS)
    return -1;
  return ordinal;
}

void copy_to_device(DevicePtr dst, const void* src, std::size_t bytes, StreamHandle stream) {
  if (bytes == 0) return;
  const Driver& d = make_current();
  const std::string what = "copy_to_device(" + std::to_string(bytes) + " bytes)";
  if (!stream) {
    check(d.p_cuMemcpyHtoD(cu(dst), src, bytes), "cuMemcpyHtoD", what);
    return;
  }
  check(d.p_cuMemcpyHtoDAsync(cu(dst), src, bytes, static_cast<CUstream>(stream)),
        "cuMemcpyHtoDAsync", what);
}

void copy_to_host(void* dst, DevicePtr src, std::size_t bytes, StreamHandle stream) {
  if (bytes == 0) return;
  const Driver& d = make_current();
  const std::string what = "copy_to_host(" + std::to_string(bytes) + " bytes)";
  if (!stream) {
    check(d.p_cuMemcpyDtoH(dst, cu(src), bytes), "cuMemcpyDtoH", what);
    return;
  }
  check(d.p_cuMemcpyDtoHAsync(dst, cu(src), bytes, static_cast<CUstream>(stream)),
        "cuMemcpyDtoHAsync", what);
}

void copy_device_to_device(DevicePtr dst, DevicePtr src, std::size_t bytes, StreamHandle stream) {
  if (bytes == 0) return;
  const Driver& d = make_current();
  const std::string what = "copy_device_to_device(" + std::to_string(bytes) + " bytes)";
  if (!stream) {
    check(d.p_cuMemcpyDtoD(cu(dst), cu(src), bytes), "cuMemcpyDtoD", what);
    return;
  }
  check(d.p_cuMemcpyDtoDAsync(cu(dst), cu(src), bytes, static_cast<CUstream>(stream)),
        "cuMemcpyDtoDAsync", what);
}

void memset_device(DevicePtr dst, unsigned char value, std::size_t bytes, StreamHandle stream) {
  if (bytes == 0) return;
  const Driver& d = make_current();
  const std::string what = "memset_device(" + std::to_string(bytes) + " bytes)";
  if (!stream) {
    check(d.p_cuMemsetD8(cu(dst), value, bytes), "cuMemsetD8", what);
    return;
  }
  check(d.p_cuMemsetD8Async(cu(dst), value, bytes, static_cast<CUstream>(stream)),
        "cuMemsetD8Async", what);
}

// ------------------------------------------------- several GPUs (tx::dist)

namespace {
// A driver entry point tx::dist needs, or a tx error saying it is missing.
template <class F>
F need_entry(F f, const char* name) {
  if (!f)
    fail(
        "tx.cuda", "", {},
        std::string("libcuda.so.1 lacks ") + name + " (the NVIDIA driver is too old for tx::dist)");
  return f;
}
}  // namespace

void copy_peer_async(int ordinal, DevicePtr dst, DevicePtr src, std::size_t bytes,
                     StreamHandle stream) {
  if (bytes == 0) return;
  const Driver& d = make_current(ordinal);
  auto f = need_entry(d.p_cuMemcpyAsync, "cuMemcpyAsync");
  check(f(cu(dst), cu(src), bytes, static_cast<CUstream>(stream)), "cuMemcpyAsync",
        "copy_peer_async(" + std::to_string(bytes) + " bytes)");
}

void stream_wait_value32(int ordinal, StreamHandle stream, DevicePtr flag, std::uint32_t value) {
  const Driver& d = make_current(ordinal);
  auto f = need_entry(d.p_cuStreamWaitValue32, "cuStreamWaitValue32");
  check(f(static_cast<CUstream>(stream), cu(flag), value, CU_STREAM_WAIT_VALUE_GEQ),
        "cuStreamWaitValue32", "stream_wait_value32(>= " + std::to_string(value) + ")");
}

void stream_write_value32(int ordinal, StreamHandle stream, DevicePtr flag, std::uint32_t value) {
  const Driver& d = make_current(ordinal);
  auto f = need_entry(d.p_cuStreamWriteValue32, "cuStreamWriteValue32");
  // The default flags: a system-wide fence before the write, so what the
  // stream did before it is visible to whoever observes the value.
  check(f(static_cast<CUstream>(stream), cu(flag), value, CU_STREAM_WRITE_VALUE_DEFAULT),
        "cuStreamWriteValue32", "stream_write_value32(" + std::to_string(value) + ")");
}

bool can_access_peer(int ordinal, int peer) {
  if (ordinal == peer) return true;
  const Driver& d = make_current(ordinal);
  auto f = need_entry(d.p_cuDeviceCanAccessPeer, "cuDeviceCanAccessPeer");
  int can = 0;
  check(f(&can, device_state(ordinal).dev, device_state(peer).dev), "cuDeviceCanAccessPeer",
        "cuda:" + std::to_string(ordinal) + " -> cuda:" + std::to_string(peer));
  return can != 0;
}

void enable_peer_access(int ordinal, int peer) {
  if (ordinal == peer) return;
  CUcontext peer_ctx = device_state(peer).ctx;
  const Driver& d = make_current(ordinal);
  auto f = need_entry(d.p_cuCtxEnablePeerAccess, "cuCtxEnablePeerAccess");
  CUresult r = f(peer_ctx, 0);
  if (r == CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED) return;
  check(r, "cuCtxEnablePeerAccess",
        "peer access cuda:" + std::to_string(ordinal) + " -> cuda:" + std::to_string(peer));
}

DevicePtr device_alloc_unpooled(std::size_t bytes, int ordinal) {
  const Driver& d = make_current(ordinal);
  CUdeviceptr p = 0;
  check(d.p_cuMemAlloc(&p, bytes == 0 ? 1 : bytes), "cuMemAlloc",
        "device_alloc_unpooled(" + std::to_string(bytes) +
            " bytes on cuda:" + std::to_string(ordinal) + ")");
  return static_cast<DevicePtr>(p);
}

void device_free_unpooled(DevicePtr p, int ordinal) noexcept {
  if (p && make_current_noexcept(ordinal)) driver().p_cuMemFree(cu(p));
}

void copy_to_device_sync(int ordinal, DevicePtr dst, const void* src, std::size_t bytes) {
  if (bytes == 0) return;
  const Driver& d = make_current(ordinal);
  const std::string what = "copy_to_device_sync(" + std::to_string(bytes) + " bytes)";
  check(d.p_cuMemcpyHtoD(cu(dst), src, bytes), "cuMemcpyHtoD", what);
  // From pageable memory the copy may return before the DMA is done.
  check(d.p_cuCtxSynchronize(), "cuCtxSynchronize", what);
}

void memset_device_sync(int ordinal, DevicePtr dst, unsigned char value, std::size_t bytes) {
  if (bytes == 0) return;
  const Driver& d = make_current(ordinal);
  const std::string what = "memset_device_sync(" + std::to_string(bytes) + " bytes)";
  check(d.p_cuMemsetD8(cu(dst), value, bytes), "cuMemsetD8", what);
  // cuMemsetD8 on device memory is asynchronous with respect to the host.
  check(d.p_cuCtxSynchronize(), "cuCtxSynchronize", what);
}

IpcMemHandle ipc_get_mem_handle(DevicePtr p, int ordinal) {
  static_assert(sizeof(CUipcMemHandle) == sizeof(IpcMemHandle::bytes));
  const Driver& d = make_current(ordinal);
  auto f = need_entry(d.p_cuIpcGetMemHandle, "cuIpcGetMemHandle");
  CUipcMemHandle h{};
  check(f(&h, cu(p)), "cuIpcGetMemHandle", "symmetric memory on cuda:" + std::to_string(ordinal));
  IpcMemHandle out;
  std::memcpy(out.bytes, &h, sizeof out.bytes);
  return out;
}

DevicePtr ipc_open_mem_handle(const IpcMemHandle& handle, int ordinal) {
  const Driver& d = make_current(ordinal);
  auto f = need_entry(d.p_cuIpcOpenMemHandle, "cuIpcOpenMemHandle");
  CUipcMemHandle h{};
  std::memcpy(&h, handle.bytes, sizeof handle.bytes);
  CUdeviceptr p = 0;
  check(f(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS), "cuIpcOpenMemHandle",
        "a peer's symmetric memory, opened on cuda:" + std::to_string(ordinal));
  return static_cast<DevicePtr>(p);
}

void ipc_close_mem_handle(DevicePtr p, int ordinal) noexcept {
  if (p && make_current_noexcept(ordinal) && driver().p_cuIpcCloseMemHandle)
    driver().p_cuIpcCloseMemHandle(cu(p));
}

// ------------------------------------------------------ streams, events

StreamHandle stream_create(int ordinal) {
  const Driver& d = make_current(ordinal);
  CUstream s = nullptr;
  // Non-blocking: no implicit synchronization with the legacy default stream,
  // so work on two tx streams (or a caller's) overlaps.
  check(d.p_cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), "cuStreamCreate", "Stream");
  return s;
}

void stream_destroy(int ordinal, StreamHandle s) noexcept {
  // Blocks cached under this stream go back to the pool first: a stream
  // created later may get the same handle, and must not take them unordered.
  if (s) release_blocks(ordinal, &s);
  if (s && make_current_noexcept(ordinal)) driver().p_cuStreamDestroy(static_cast<CUstream>(s));
}

void stream_synchronize(int ordinal, StreamHandle s, const std::string& what) {
  const Driver& d = make_current(ordinal);
  check(d.p_cuStreamSynchronize(static_cast<CUstream>(s)), "cuStreamSynchronize", what);
}

void stream_wait_event(int ordinal, StreamHandle s, EventHandle e) {
  const Driver& d = make_current(ordinal);
  check(d.p_cuStreamWaitEvent(static_cast<CUstream>(s), static_cast<CUevent>(e), 0),
        "cuStreamWaitEvent", "Stream.wait");
}

EventHandle event_create(int ordinal, bool timing) {
  const Driver& d = make_current(ordinal);
  CUevent e = nullptr;
  check(d.p_cuEventCreate(&e, timing ? CU_EVENT_DEFAULT : CU_EVENT_DISABLE_TIMING), "cuEventCreate",
        "Event");
  return e;
}

void event_destroy(int ordinal, EventHandle e) noexcept {
  if (e && make_current_noexcept(ordinal)) driver().p_cuEventDestroy(static_cast<CUevent>(e));
}

void event_record(int ordinal, EventHandle e, StreamHandle s) {
  const Driver& d = make_current(ordinal);
  check(d.p_cuEventRecord(static_cast<CUevent>(e), static_cast<CUstream>(s)), "cuEventRecord",
        "Event.record");
}

void event_synchronize(int ordinal, EventHandle e) {
  const Driver& d = make_current(ordinal);
  check(d.p_cuEventSynchronize(static_cast<CUevent>(e)), "cuEventSynchronize", "Event.synchronize");
}

bool event_query(int ordinal, EventHandle e) {
  const Driver& d = make_current(ordinal);
  CUresult r = d.p_cuEventQuery(static_cast<CUevent>(e));
  if (r == CUDA_ERROR_NOT_READY) return false;
  check(r, "cuEventQuery", "Event.query");
  return true;
}

float event_elapsed_ms(int ordinal, EventHandle start, EventHandle stop) {
  const Driver& d = make_current(ordinal);
  float ms = 0;
  check(d.p_cuEventElapsedTime(&ms, static_cast<CUevent>(start), static_cast<CUevent>(stop)),
        "cuEventElapsedTime", "Event.elapsed_ms");
  return ms;
}

// ---------------------------------------------------------- EventTimer

EventTimer::EventTimer(StreamHandle stream) : stream_(stream) {
  const Driver& d = make_current();
  CUevent a = nullptr, b = nullptr;
  check(d.p_cuEventCreate(&a, CU_EVENT_DEFAULT), "cuEventCreate", "EventTimer");
  if (CUresult r = d.p_cuEventCreate(&b, CU_EVENT_DEFAULT); r != CUDA_SUCCESS) {
    d.p_cuEventDestroy(a);
    check(r, "cuEventCreate", "EventTimer");
  }
  start_ = a;
  stop_ = b;
}

EventTimer::~EventTimer() {
  if (!make_current_noexcept()) return;
  driver().p_cuEventDestroy(static_cast<CUevent>(start_));
  driver().p_cuEventDestroy(static_cast<CUevent>(stop_));
}

void EventTimer::start() {
  const Driver& d = make_current();
  check(d.p_cuEventRecord(static_cast<CUevent>(start_), static_cast<CUstream>(stream_)),
        "cuEventRecord", "EventTimer.start");
}

void EventTimer::stop() {
  const Driver& d = make_current();
  check(d.p_cuEventRecord(static_cast<CUevent>(stop_), static_cast<CUstream>(stream_)),
        "cuEventRecord", "EventTimer.stop");
}

float EventTimer::elapsed_ms() {
  const Driver& d = make_current();
  check(d.p_cuEventSynchronize(static_cast<CUevent>(stop_)), "cuEventSynchronize",
        "EventTimer.elapsed_ms");
  float ms = 0;
  check(d.p_cuEventElapsedTime(&ms, static_cast<CUevent>(start_), static_cast<CUevent>(stop_)),
        "cuEventElapsedTime", "EventTimer.elapsed_ms");
  return ms;
}

}  // namespace tx::runtime
