// The CUDA Executable (executable.hpp): a kernel's GPU binary and its launch.
//
// The binary comes from, in order: the process's modules (one per source,
// options and device), a prebuilt kernel's own cubin, the ahead-of-time
// folder, the disk cache, NVRTC. Each device a kernel launches on gets its
// own module (kernels are compiled per architecture; a module belongs to one
// context); its CUfunction is published once, with an atomic store, so a
// launch reads it without a lock.
//
// A launch never synchronizes, allocates or reads device memory on the
// host: it can be captured into a CUDA graph (stream capture). TX_SYNC=1's
// synchronization after each launch is skipped on a capturing stream, where
// it is not allowed.
#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>

#include "executable.hpp"
#include "profile_sink.hpp"
#include "tx/runtime/cubin_cache.hpp"
#include "tx/runtime/cuda_driver.hpp"
#include "tx/runtime/disk_cache.hpp"
#include "tx/runtime/nvrtc.hpp"
#include "tx/runtime/stream.hpp"

namespace tx::runtime {

Executable::~Executable() = default;

bool sync_after_launch() {
  static const bool sync = [] {
    const char* v = std::getenv("TX_SYNC");
    return v && *v && std::string(v) != "0";
  }();
  return sync;
}

namespace {

// GPU modules by cache key and device, shared by every kernel of the process.
struct ModuleCache {
  std::mutex mu;
  std::map<std::string, std::shared_ptr<Module>> modules;
};
ModuleCache& module_cache() {
  static ModuleCache* c = new ModuleCache();
  return *c;
}

std::string shape_str(const std::vector<std::int64_t>& s) {
  std::string r = "(";
  for (std::size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + (s.size() == 1 ? ",)" : ")");
}

// The devices a kernel can be loaded on.
constexpr int kMaxDevices = 16;

class CudaExecutable final : public Executable {
 public:
  explicit CudaExecutable(ExecutableSource src) : src_(std::move(src)) {}

  void run(const BoundLaunch& b, const Stream* stream) const override;
  std::string prepare(Device device, SourceLoc loc) const override;

 private:
  // One device's module and function; `function` is set last (release).
  struct DeviceSlot {
    // Loading, per device: ranks of a group (threads, one GPU each) load a
    // shared kernel at once, and a module load may wait for its device to
    // go idle (the driver's lazy loading) -- a device whose streams wait for
    // another rank's progress. One lock for every device made that rank
    // wait for this one's load: a deadlock (matmul_reduce_scatter's first
    // call, 2 GPUs).
    std::mutex mu;
    std::shared_ptr<Module> module;
    std::atomic<void*> function{nullptr};
  };
  // An encoded TMA tensor map (128 bytes, 64-byte aligned).
  struct alignas(64) MapBlob {
    unsigned char bytes[128];
  };

  void* function_for(Device device, SourceLoc loc) const;
  std::string load(DeviceSlot& slot, int ordinal) const;
  std::string load_compiled(DeviceSlot& slot, int ordinal, const std::string& cuda) const;
  void check_limits(int ordinal, SourceLoc loc) const;
  void encode_maps(const BoundLaunch& b, MapBlob* blobs) const;
  const MapBlob& tensor_map(const TensorMapSpec& spec) const;

  ExecutableSource src_;
  mutable std::array<DeviceSlot, kMaxDevices> slots_;
  // Encoded tensor maps by their description (pointer, shape, box,
  // swizzle): a launch on the same tensors reuses them. Bounded: the oldest
  // entry goes first.
  mutable std::mutex maps_mu_;
  mutable std::vector<std::pair<TensorMapSpec, MapBlob>> maps_;
};

void* CudaExecutable::function_for(Device device, SourceLoc loc) const {
  const int ordinal = device.index;
  if (ordinal >= 0 && ordinal < kMaxDevices)
    if (void* f =
            slots_[static_cast<std::size_t>(ordinal)].function.load(std::memory_order_acquire))
      return f;
  prepare(device, loc);
  return slots_[static_cast<std::size_t>(ordinal)].function.load(std::memory_order_acquire);
}

std::string CudaExecutable::prepare(Device device, SourceLoc loc) const {
  const int ordinal = device.index;
  if (!device.is_cuda() || ordinal < 0 || ordinal >= kMaxDevices)
    fail("launch " + src_.kernel_name, device.str(), loc,
         "a CUDA kernel launches on cuda:0 .. cuda:" + std::to_string(kMaxDevices - 1));
  DeviceSlot& slot = slots_[static_cast<std::size_t>(ordinal)];
  std::lock_guard<std::mutex> lock(slot.mu);
  if (slot.function.load(std::memory_order_acquire)) return "memory";
  std::string origin = load(slot, ordinal);
  void* function = slot.module->function(src_.kernel_name);
  check_limits(ordinal, loc);
  slot.function.store(function, std::memory_order_release);
  return origin;
}

// The device's limits, checked once per device before its first launch.
void CudaExecutable::check_limits(int ordinal, SourceLoc loc) const {
  const lowering::LoweredKernel& info = *src_.info;
  const DeviceInfo& dev = device_info(ordinal);
  const std::string op = "launch " + src_.kernel_name;
  if (info.launch.block > dev.max_threads_per_block)
    fail(op, "", loc,
         "block of " + std::to_string(info.launch.block) + " threads exceeds the device's " +
             std::to_string(dev.max_threads_per_block));
  if (info.shared_bytes > dev.max_shared_per_block_optin)
    fail(op, "", loc,
         "needs " + std::to_string(info.shared_bytes) + " bytes of shared memory; " + dev.name +
             " allows " + std::to_string(dev.max_shared_per_block_optin) + " per CTA");
}

std::string CudaExecutable::load(DeviceSlot& slot, int ordinal) const {
  if (!src_.prebuilt_cubin.empty()) {
    // Its own binary; a driver that refuses it gets the kernel built.
    try {
      slot.module = Module::load(src_.prebuilt_cubin, src_.kernel_name, ordinal);
      return "prebuilt";
    } catch (const Error& e) {
      warn("the prebuilt binary of " + src_.kernel_name + " does not load on this GPU (" +
           e.reason() + "); building it");
    }
  }
  const std::string* cuda = src_.full ? src_.full().cuda : nullptr;
  if (!cuda) fail("launch " + src_.kernel_name, "", {}, "the kernel has no CUDA source");
  return load_compiled(slot, ordinal, *cuda);
}

std::string CudaExecutable::load_compiled(DeviceSlot& slot, int ordinal,
                                          const std::string& cuda) const {
  const std::string arch = src_.arch.empty() ? device_info(ordinal).arch() : src_.arch;
  // The modules of this process, by source, options and GPU. Not by NVRTC
  // version (one per process): asking NVRTC for it loads libnvrtc (10-15 ms),
  // which a kernel built ahead of time never needs.
  const std::string key = kernel_cache_key(cuda, nvrtc_default_options(arch), arch, "module") +
                          "@" + std::to_string(ordinal);  // modules are per context
  ModuleCache& mc = module_cache();
  {
    std::lock_guard<std::mutex> lock(mc.mu);
    auto it = mc.modules.find(key);
    if (it != mc.modules.end()) {
      slot.module = it->second;
      return "memory";
    }
  }
  std::string origin;
  // A kernel compiled when tx was built (the op library's generic ones).
  if (std::optional<std::vector<char>> aot = aot_cubin(cuda, arch)) {
    try {
      slot.module = Module::load(*aot, src_.kernel_name, ordinal);
      origin = "aot";
    } catch (const Error& e) {
      warn("the prebuilt binary of " + src_.kernel_name + " does not load on this GPU (" +
           e.reason() + "); compiling it");
    }
  }
  if (!slot.module) {
    CachedCubin bin = cubin_for(cuda, src_.kernel_name, arch);
    origin = bin.from_disk ? "disk" : "nvrtc";
    try {
      slot.module = Module::load(bin.cubin, src_.kernel_name, ordinal);
    } catch (const Error& e) {
      // A cached binary the driver refuses (made for another GPU, or by a
      // toolchain this driver cannot read) is never fatal: recompile it.
      if (!bin.from_disk) throw;
      warn("kernel cache: the cached binary of " + src_.kernel_name +
           " does not load on this GPU (" + e.reason() + "); recompiling");
      bin = cubin_for(cuda, src_.kernel_name, arch, DiskCache::instance(), /*skip_disk=*/true);
      origin = "nvrtc";
      slot.module = Module::load(bin.cubin, src_.kernel_name, ordinal);
    }
  }
  std::lock_guard<std::mutex> lock(mc.mu);
  mc.modules[key] = slot.module;
  return origin;
}

const CudaExecutable::MapBlob& CudaExecutable::tensor_map(const TensorMapSpec& spec) const {
  // Called with maps_mu_ held.
  auto it =
      std::find_if(maps_.begin(), maps_.end(), [&](const auto& e) { return e.first == spec; });
  if (it != maps_.end()) return it->second;
  if (maps_.size() >= 64) maps_.erase(maps_.begin());
  MapBlob blob;
  encode_tensor_map(blob.bytes, spec, "launch " + src_.kernel_name);
  maps_.emplace_back(spec, blob);
  return maps_.back().second;
}

// TMA tensor maps, after the extents: encoded for these tensors (or found in
// the cache of them). Host work only: nothing here touches the device.
void CudaExecutable::encode_maps(const BoundLaunch& b, MapBlob* blobs) const {
  const auto& tmaps = src_.info->tensor_maps;
  for (std::size_t k = 0; k < tmaps.size(); ++k) {
    const auto& tm = tmaps[k];
    const auto pi = static_cast<std::size_t>(tm.param);
    const Tensor& t = *b.args[pi].tensor();
    const std::string& pname = src_.info->params[pi].name;
    TensorMapSpec spec;
    spec.address = static_cast<DevicePtr>(reinterpret_cast<std::uintptr_t>(b.ptrs[pi]));
    spec.element_bytes = t.dtype().bytes();
    using F = TensorMapSpec::Floating;
    const DType dt = t.dtype();
    spec.floating = dt == f16    ? F::f16
                    : dt == bf16 ? F::bf16
                    : dt == f32  ? F::f32
                    : dt == f64  ? F::f64
                                 : F::none;
    spec.rank = static_cast<int>(t.shape().size());
    spec.swizzle_bytes = tm.map.swizzle_bytes;
    std::uint64_t pitch = static_cast<std::uint64_t>(spec.element_bytes);
    for (int i = 0; i < spec.rank; ++i) {
      const auto d = static_cast<std::size_t>(spec.rank - 1 - i);
      spec.dims[i] = static_cast<std::uint64_t>(t.shape()[d]);
      spec.box[i] = static_cast<std::uint32_t>(tm.map.box[d]);
      if (i > 0) spec.strides[i - 1] = pitch;
      pitch *= spec.dims[i];
    }
    auto bad = [&](const std::string& reason) {
      fail("launch " + src_.kernel_name, pname + " (argument " + std::to_string(pi) + ")", b.loc,
           reason);
    };
    if (spec.address % 16 != 0)
      bad("tensor data is not 16-byte aligned, which the kernel's TMA copies need");
    for (int i = 0; i + 1 < spec.rank; ++i)
      if (spec.strides[i] % 16 != 0)
        bad("a row pitch of " + std::to_string(spec.strides[i]) + " bytes (shape " +
            shape_str(t.shape()) + "): the kernel's TMA copies need multiples of 16");
    std::lock_guard<std::mutex> lock(maps_mu_);
    blobs[k] = tensor_map(spec);
  }
}

void CudaExecutable::run(const BoundLaunch& b, const Stream* stream) const {
  void* function = function_for(b.device, b.loc);
  const lowering::LoweredKernel& info = *src_.info;
  const std::size_t maps = info.tensor_maps.size();
  // CUDA takes a pointer to each argument's value: the device address of a
  // buffer, the value slot of a scalar or extent, a tensor map's bytes.
  constexpr std::size_t kInline = BoundLaunch::kInline;
  std::array<DevicePtr, kInline> dsmall{};
  std::array<void*, kInline> ksmall{};
  std::vector<DevicePtr> dbig;
  std::vector<void*> kbig;
  std::vector<MapBlob> blobs(maps);
  DevicePtr* dptrs = dsmall.data();
  void** kargs = ksmall.data();
  // Profiled: the per-warp record buffer, the kernel's last parameter.
  const bool profiled = src_.profile && !info.profile_regions.empty();
  const std::size_t extra = profiled ? 1 : 0;
  if (b.slots + maps + extra > kInline) {
    dbig.resize(b.slots + maps + extra);
    kbig.resize(b.slots + maps + extra);
    dptrs = dbig.data();
    kargs = kbig.data();
  }
  if (maps) encode_maps(b, blobs.data());
  // Slots past the values are the symmetric buffers' tables (device addresses).
  const std::size_t values_end = b.params + info.dims.size() + info.derived.size();
  for (std::size_t i = 0; i < b.slots; ++i) {
    if ((i < b.params && !info.params[i].is_scalar) || i >= values_end) {
      dptrs[i] = static_cast<DevicePtr>(reinterpret_cast<std::uintptr_t>(b.ptrs[i]));
      kargs[i] = &dptrs[i];
    } else {
      kargs[i] = b.ptrs[i];
    }
  }
  for (std::size_t k = 0; k < maps; ++k) kargs[b.slots + k] = blobs[k].bytes;
  const std::int64_t ctas = b.grid[0] * b.grid[1] * b.grid[2];
  Tensor records;
  DevicePtr records_ptr = 0;
  if (profiled) {
    records = Tensor::empty({profile_buffer_words(info, ctas)}, u64, b.device);
    records.fill_bits(0);
    records_ptr = static_cast<DevicePtr>(reinterpret_cast<std::uintptr_t>(records.data_ptr()));
    kargs[b.slots + maps] = &records_ptr;
  }
  const StreamHandle handle = stream ? stream->handle() : current_stream(b.device).handle();
  launch(function,
         {static_cast<unsigned>(b.grid[0]), static_cast<unsigned>(b.grid[1]),
          static_cast<unsigned>(b.grid[2])},
         {static_cast<unsigned>(info.launch.block), 1, 1},
         static_cast<std::size_t>(info.shared_bytes), kargs, src_.kernel_name, b.device.index,
         handle);
  if (profiled) {
    // The records come back now: a profiled launch completes before it returns.
    if (stream_capturing(b.device.index, handle))
      fail("launch " + src_.kernel_name, "", b.loc,
           "a profiled kernel (CompileOptions::profile, TX_PROFILE=1) cannot be captured in a CUDA "
           "graph: each launch reads its records back");
    synchronize_device(b.device.index, src_.kernel_name);
    src_.profile->publish(
        profile_from_gpu(info, src_.kernel_name, ctas, records.to_vector<std::uint64_t>()));
    return;
  }
  if (sync_after_launch() && !stream_capturing(b.device.index, handle))
    synchronize_device(b.device.index, src_.kernel_name);
}

}  // namespace

std::unique_ptr<Executable> make_cuda_executable(ExecutableSource src) {
  return std::make_unique<CudaExecutable>(std::move(src));
}

}  // namespace tx::runtime
