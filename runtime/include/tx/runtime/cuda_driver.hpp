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

// The calling thread's device (see set_thread_device; else TX_CUDA_DEVICE,
// default 0); makes its primary context current on the calling thread.
// Throws tx::Error when no GPU is usable.
const DeviceInfo& current_device();
// Any device by ordinal (a tx::Error naming the count when there is none).
const DeviceInfo& device_info(int ordinal);
int device_count();     // 0 without a usable GPU
int default_ordinal();  // the calling thread's device: set_thread_device's, else TX_CUDA_DEVICE
// Makes `ordinal` the calling thread's device -- the one current_device(),
// the copies and the other calls without an ordinal use -- and its primary
// context current (tx::dist's rank threads: one GPU each). -1 goes back to
// TX_CUDA_DEVICE. Returns the thread's previous setting (-1: none).
int set_thread_device(int ordinal);

// Opaque driver handles (CUstream, CUevent); a null stream is the legacy
// default stream.
using StreamHandle = void*;
using EventHandle = void*;

// True after a kernel fault (an illegal address, a trap, ...). Such an error
// is sticky for the whole process: the driver refuses every later call, even
// in a fresh or reset context (measured: driver 580 / CUDA 13 on H200; see
// docs/reliability.md). tx then fails every GPU call at once with a tx::Error
// that names the fault, frees nothing more, and host kernels still run.
bool context_lost() noexcept;

// A loaded cubin. Unloaded on destruction.
class Module {
 public:
  // Loads into device `ordinal`'s context (-1: the default device).
  static std::shared_ptr<Module> load(const std::vector<char>& cubin, const std::string& name,
                                      int ordinal = -1);
  ~Module();
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  // The CUfunction of an extern "C" kernel, as an opaque pointer.
  void* function(const std::string& kernel_name) const;

 private:
  Module() = default;
  void* module_ = nullptr;
  std::string name_;
  int ordinal_ = 0;
};

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
};

// cuLaunchKernel on `stream` of device `ordinal` (-1: the default device);
// raises the function's dynamic shared-memory limit first when
// shared_bytes > 48 KiB.
void launch(void* function, Dim3 grid, Dim3 block, std::size_t shared_bytes, void** args,
            const std::string& kernel_name, int ordinal = -1, StreamHandle stream = nullptr);
// A TMA tensor map's description, innermost dimension first (the driver's
// order): element count per dimension, byte strides of dimensions 1.., the
// box, the swizzle (0, 32, 64, 128 bytes).
struct TensorMapSpec {
  DevicePtr address = 0;
  int element_bytes = 2;
  // What the elements are, for the TMA's reductions (cp.reduce.async.bulk
  // adds as the map's data type: float32 bits added as integers are
  // garbage). Copies move bits and do not care. Integers and fp8: by size.
  enum class Floating { none, f16, bf16, f32, f64 } floating = Floating::none;
  int rank = 0;
  std::uint64_t dims[5] = {};
  std::uint64_t strides[4] = {};
  std::uint32_t box[5] = {};
  int swizzle_bytes = 0;
  bool operator==(const TensorMapSpec& o) const {
    if (address != o.address || element_bytes != o.element_bytes || floating != o.floating ||
        rank != o.rank || swizzle_bytes != o.swizzle_bytes)
      return false;
    for (int i = 0; i < rank; ++i)
      if (dims[i] != o.dims[i] || box[i] != o.box[i] ||
          (i + 1 < rank && strides[i] != o.strides[i]))
        return false;
    return true;
  }
  std::string describe() const;
};
// cuTensorMapEncodeTiled into `out` (128 bytes, 64-byte aligned); out-of-bounds
// elements of a box read as zero. `what` names the kernel for errors.
void encode_tensor_map(void* out, const TensorMapSpec& spec, const std::string& what);

// CUDA graphs. Whether `stream` of device `ordinal` is being captured into a
// graph (cuStreamIsCapturing; false where the driver has no capture). Work
// queued on a capturing stream is recorded, not run: it must not
// synchronize, read device memory back, or allocate outside the stream's
// order.
bool stream_capturing(int ordinal, StreamHandle stream);
using GraphHandle = void*;      // CUgraph
using GraphExecHandle = void*;  // CUgraphExec
// Capture in thread-local mode (calls capture forbids fail in this thread).
void begin_capture(int ordinal, StreamHandle stream, const std::string& what);
GraphHandle end_capture(int ordinal, StreamHandle stream, const std::string& what);
GraphExecHandle graph_instantiate(int ordinal, GraphHandle graph, const std::string& what);
std::size_t graph_node_count(GraphHandle graph);
void graph_launch(int ordinal, GraphExecHandle exec, StreamHandle stream, const std::string& what);
void graph_destroy(int ordinal, GraphHandle graph, GraphExecHandle exec) noexcept;

// cuCtxSynchronize; `what` names the kernel or operation for the error message.
void synchronize(const std::string& what);
void synchronize_device(int ordinal, const std::string& what);

// Device memory: from the device's stream-ordered pool (cuMemAllocAsync /
// cuMemFreeAsync on `stream`) where the driver has one, so that freeing a
// temporary never synchronizes the device; cuMemAlloc / cuMemFree otherwise.
DevicePtr device_alloc(std::size_t bytes, int ordinal = -1, StreamHandle stream = nullptr);
void device_free(DevicePtr p, int ordinal = -1, StreamHandle stream = nullptr) noexcept;
// The same with a host-side free list in front (tensors use these): with
// `cache`, blocks up to 1 MiB freed on `stream` are kept and handed to the
// next allocation of that rounded size on that same stream, without a driver
// call. Only for streams whose lifetime tx controls (the legacy default
// stream, the streams tx creates). A cached block is freed with its size.
DevicePtr device_alloc_cached(std::size_t bytes, int ordinal, StreamHandle stream, bool cache);
void device_free_cached(DevicePtr p, std::size_t bytes, int ordinal, StreamHandle stream,
                        bool cache) noexcept;
// Bytes held on the host-side free lists of `ordinal`.
std::size_t cached_block_bytes(int ordinal);
bool stream_ordered_allocation(int ordinal);
struct PoolStats {
  bool stream_ordered = false;
  std::uint64_t reserved_bytes = 0;  // held by the pool (in use + cached)
  std::uint64_t used_bytes = 0;      // in use by tensors
  std::uint64_t peak_reserved_bytes = 0;
};
PoolStats pool_stats(int ordinal);
// Returns the free lists' and the pool's cached memory to the driver (after
// a device sync).
void pool_trim(int ordinal);
void* host_alloc_pinned(std::size_t bytes);
void host_free_pinned(void* p) noexcept;
// The device a device address belongs to (-1: not a device address tx's driver knows).
int pointer_device(DevicePtr p);

// Several GPUs (tx::dist). Whether `ordinal`'s kernels can address `peer`'s
// memory (cuDeviceCanAccessPeer; true for ordinal == peer).
bool can_access_peer(int ordinal, int peer);
// Lets `ordinal`'s context address `peer`'s memory (cuCtxEnablePeerAccess;
// already enabled is not an error; nothing for ordinal == peer).
void enable_peer_access(int ordinal, int peer);
// Plain cuMemAlloc / cuMemFree on `ordinal`, outside the stream-ordered
// pool: the memory CUDA IPC can export (cuIpcGetMemHandle refuses pool
// memory). cuMemFree waits for the device.
DevicePtr device_alloc_unpooled(std::size_t bytes, int ordinal);
void device_free_unpooled(DevicePtr p, int ordinal) noexcept;
// With `ordinal`'s context current; they return once the bytes are in
// device memory (the copy or set, then cuCtxSynchronize), so that work on
// any stream, or another GPU, sees them.
void copy_to_device_sync(int ordinal, DevicePtr dst, const void* src, std::size_t bytes);
void memset_device_sync(int ordinal, DevicePtr dst, unsigned char value, std::size_t bytes);
// CUDA IPC: a handle to memory from device_alloc_unpooled that another
// process opens into its own address space (on its device `ordinal`, peer
// access enabled lazily), and closes when done.
struct IpcMemHandle {
  unsigned char bytes[64] = {};  // CU_IPC_HANDLE_SIZE
};
IpcMemHandle ipc_get_mem_handle(DevicePtr p, int ordinal);
DevicePtr ipc_open_mem_handle(const IpcMemHandle& handle, int ordinal);
void ipc_close_mem_handle(DevicePtr p, int ordinal) noexcept;

// Copies; with a stream they are asynchronous on it (host memory pinned for
// true asynchrony), without one synchronous.
void copy_to_device(DevicePtr dst, const void* src, std::size_t bytes,
                    StreamHandle stream = nullptr);
void copy_to_host(void* dst, DevicePtr src, std::size_t bytes, StreamHandle stream = nullptr);
void copy_device_to_device(DevicePtr dst, DevicePtr src, std::size_t bytes,
                           StreamHandle stream = nullptr);
void memset_device(DevicePtr dst, unsigned char value, std::size_t bytes,
                   StreamHandle stream = nullptr);

// Several GPUs (tx::dist): a copy between any two device addresses this
// process can reach (another GPU's memory through peer access or CUDA IPC:
// the copy engines move it over NVLink), asynchronous on `stream` of
// `ordinal`; a stream that waits until the u32 at `flag` is >= `value`
// (unsigned); a stream write of `value` to the u32 at `flag` (a peer's
// memory too), after a system-wide fence, so that whatever the stream did
// before is visible to whoever sees the value.
void copy_peer_async(int ordinal, DevicePtr dst, DevicePtr src, std::size_t bytes,
                     StreamHandle stream);
void stream_wait_value32(int ordinal, StreamHandle stream, DevicePtr flag, std::uint32_t value);
void stream_write_value32(int ordinal, StreamHandle stream, DevicePtr flag, std::uint32_t value);

StreamHandle stream_create(int ordinal);
void stream_destroy(int ordinal, StreamHandle s) noexcept;
void stream_synchronize(int ordinal, StreamHandle s, const std::string& what);
void stream_wait_event(int ordinal, StreamHandle s, EventHandle e);
EventHandle event_create(int ordinal, bool timing);
void event_destroy(int ordinal, EventHandle e) noexcept;
void event_record(int ordinal, EventHandle e, StreamHandle s);
void event_synchronize(int ordinal, EventHandle e);
bool event_query(int ordinal, EventHandle e);
float event_elapsed_ms(int ordinal, EventHandle start, EventHandle stop);

// CUDA-event timing on a stream (default: the legacy default stream).
class EventTimer {
 public:
  explicit EventTimer(StreamHandle stream = nullptr);
  ~EventTimer();
  EventTimer(const EventTimer&) = delete;
  EventTimer& operator=(const EventTimer&) = delete;
  void start();
  void stop();
  float elapsed_ms();  // synchronizes on the stop event

 private:
  void* start_ = nullptr;
  void* stop_ = nullptr;
  StreamHandle stream_ = nullptr;
};

}  // namespace tx::runtime
