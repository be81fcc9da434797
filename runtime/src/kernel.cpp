// compile(): lowering + CUDA codegen up front; the GPU binary and the host
// JIT are built on first launch. The GPU binary comes from, in order, the
// process's memory cache, the disk cache, NVRTC.
#include "tx/runtime/kernel.hpp"

#include <array>
#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>
#include <sstream>

#include "tx/lowering/codegen_cuda.hpp"
#include "tx/printer.hpp"
#include "tx/runtime/cubin_cache.hpp"
#include "tx/runtime/cuda_driver.hpp"
#include "tx/runtime/disk_cache.hpp"
#include "tx/runtime/nvrtc.hpp"

namespace tx {

struct Kernel::State {
  lowering::LoweredKernel info;
  std::string cuda;
  std::string kernel_name;
  Device device;
  std::string arch;
  bool checked = false;
  mutable std::mutex mu;
  mutable std::shared_ptr<runtime::Module> module;
  mutable void* function = nullptr;
  mutable std::atomic<bool> ready{false};  // GPU binary loaded and limits checked
  mutable std::shared_ptr<runtime::HostKernel> host;
};

namespace {

// GPU modules by cache key, shared by every Kernel of the process.
struct ModuleCache {
  std::mutex mu;
  std::map<std::string, std::shared_ptr<runtime::Module>> modules;
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

}  // namespace

Kernel compile(const PrimFunc& f, const CompileOptions& opt) {
  if (!f) fail("tx.compile", "", {}, "empty PrimFunc");
  auto st = std::make_shared<Kernel::State>();
  st->device = opt.device ? *opt.device : default_device();
  // The checked mode is a mode of the host fallback: asked for explicitly, a
  // kernel with no device named runs on the host; TX_CHECK=1 checks every
  // kernel that runs there.
  if (opt.checked.value_or(false)) {
    if (opt.device && opt.device->is_cuda())
      fail("tx.compile", f->name, f->loc,
           "the checked mode runs kernels on the host, but .device is " + opt.device->str() +
               " (leave the device unset, or use Device::host())");
    st->device = Device::host();
  }
  st->checked = opt.checked ? *opt.checked : !st->device.is_cuda() && runtime::check_from_env();
  lowering::LowerOptions lo;
  lo.debug = opt.debug_ir;
  lo.check_indices = st->checked;
  // Limits are checked when compiling: the named arch's, the GPU's the
  // kernel is for, else the largest of any GPU (a host kernel must also be
  // one a GPU can run).
  lo.arch = opt.arch;
  if (lo.arch.empty() && st->device.is_cuda() && runtime::cuda_available())
    lo.arch = runtime::current_device().arch();
  st->info = lowering::lower(f, lo);
  st->kernel_name = lowering::sanitize_identifier(f->name);
  st->cuda = lowering::codegen_cuda(st->info, {st->kernel_name, opt.approx_math});
  st->arch = opt.arch;
  Kernel k;
  k.state_ = st;
  return k;
}

namespace {
// The state of a compiled kernel; a default-constructed Kernel has none.
const Kernel::State& state_of(const std::shared_ptr<Kernel::State>& st, const char* method) {
  if (!st)
    fail(std::string("tx.Kernel.") + method, "", {},
         "the Kernel is empty (default-constructed); make one with tx::compile");
  return *st;
}
}  // namespace

const std::string& Kernel::name() const { return state_of(state_, "name").kernel_name; }
Device Kernel::device() const { return state_of(state_, "device").device; }
const PrimFunc& Kernel::source() const { return state_of(state_, "source").info.source; }
const PrimFunc& Kernel::lowered() const { return state_of(state_, "lowered").info.lowered; }
const lowering::LoweredKernel& Kernel::info() const { return state_of(state_, "info").info; }
std::string Kernel::tirx() const { return to_string(state_of(state_, "tirx").info.source); }
std::string Kernel::lowered_ir() const {
  return to_string(state_of(state_, "lowered_ir").info.lowered);
}
std::string Kernel::cuda_source() const { return state_of(state_, "cuda_source").cuda; }
bool Kernel::checked() const { return state_of(state_, "checked").checked; }

std::string Kernel::ptx(const std::string& arch) const {
  const State& s = state_of(state_, "ptx");
  return runtime::nvrtc_compile(s.cuda, s.kernel_name + ".cu", arch, runtime::NvrtcTarget::ptx).ptx;
}

std::string Kernel::prepare_gpu() const {
  state_of(state_, "prepare_gpu");
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.function) return "memory";
  const runtime::DeviceInfo& dev = runtime::current_device();
  std::string arch = s.arch.empty() ? dev.arch() : s.arch;
  std::string key = runtime::kernel_cache_key(s.cuda, runtime::nvrtc_default_options(arch), arch,
                                              runtime::nvrtc_version_string());
  std::string origin = "memory";
  {
    ModuleCache& mc = module_cache();
    std::lock_guard<std::mutex> l2(mc.mu);
    auto it = mc.modules.find(key);
    if (it != mc.modules.end()) s.module = it->second;
  }
  if (!s.module) {
    runtime::CachedCubin bin = runtime::cubin_for(s.cuda, s.kernel_name, arch);
    origin = bin.from_disk ? "disk" : "nvrtc";
    try {
      s.module = runtime::Module::load(bin.cubin, s.kernel_name);
    } catch (const Error& e) {
      // A cached binary the driver refuses (made for another GPU, or by a
      // toolchain this driver cannot read) is never fatal: recompile it.
      if (!bin.from_disk) throw;
      warn("kernel cache: the cached binary of " + s.kernel_name + " does not load on this GPU (" +
           e.reason() + "); recompiling");
      bin = runtime::cubin_for(s.cuda, s.kernel_name, arch, runtime::DiskCache::instance(),
                               /*skip_disk=*/true);
      origin = "nvrtc";
      s.module = runtime::Module::load(bin.cubin, s.kernel_name);
    }
    ModuleCache& mc = module_cache();
    std::lock_guard<std::mutex> l2(mc.mu);
    mc.modules[key] = s.module;
  }
  s.function = s.module->function(s.kernel_name);
  return origin;
}

void Kernel::launch(const std::vector<Tensor>& args, std::source_location loc) const {
  // Pointers on the stack: a launch allocates nothing on the fast path.
  std::array<const Tensor*, 32> small{};
  std::vector<const Tensor*> big;
  const Tensor** p = small.data();
  if (args.size() > small.size()) {
    big.resize(args.size());
    p = big.data();
  }
  for (std::size_t i = 0; i < args.size(); ++i) p[i] = &args[i];
  launch(p, args.size(), loc);
}

namespace {
bool sync_after_launch() {
  static const bool sync = [] {
    const char* v = std::getenv("TX_SYNC");
    return v && *v && std::string(v) != "0";
  }();
  return sync;
}
}  // namespace

void Kernel::launch(const Tensor* const* args, std::size_t n, SourceLoc call_loc) const {
  if (!state_)
    fail("tx.Kernel.launch", "", call_loc,
         "the Kernel is empty (default-constructed); make one with tx::compile");
  const State& s = *state_;
  const auto& params = s.info.params;
  // The caller's line; the kernel's own where no call site is known.
  SourceLoc loc = call_loc.known() ? call_loc : s.info.source->loc;
  auto bad = [&](std::size_t i, const std::string& reason) {
    fail("launch " + s.kernel_name,
         i < params.size() ? params[i].name + " (argument " + std::to_string(i) + ")" : "", loc,
         reason);
  };
  if (n != params.size())
    bad(params.size(),
        "takes " + std::to_string(params.size()) + " tensors, got " + std::to_string(n));
  std::array<void*, 32> small{};
  std::vector<void*> big;
  void** ptrs = small.data();
  if (n > small.size()) {
    big.resize(n);
    ptrs = big.data();
  }
  for (std::size_t i = 0; i < n; ++i) {
    const Tensor& t = *args[i];
    const auto& pi = params[i];
    if (!t.defined()) bad(i, "tensor is undefined");
    if (t.numel() == 0)
      bad(i, "tensor is empty (shape " + shape_str(t.shape()) +
                 "); a kernel's buffers have fixed, positive extents (the kernel declares " +
                 shape_str(pi.shape) + ")");
    if (t.dtype() != pi.dtype)
      bad(i, "dtype " + t.dtype().name() + " but the kernel declares " + pi.dtype.name());
    if (t.shape() != pi.shape)
      bad(i, "shape " + shape_str(t.shape()) + " but the kernel declares " + shape_str(pi.shape) +
                 (t.numel() == pi.elems ? " (same element count: pass t.reshape(...))" : ""));
    if (t.numel() < pi.elems)
      bad(i, "tensor holds " + std::to_string(t.numel()) + " elements, the layout needs " +
                 std::to_string(pi.elems));
    if (!(t.device() == s.device))
      bad(i, "tensor is on " + t.device().str() + " but the kernel runs on " + s.device.str() +
                 " (move it with .to(kernel.device()))");
    auto addr = reinterpret_cast<std::uintptr_t>(t.data_ptr());
    if (addr % static_cast<std::uintptr_t>(pi.align_bytes) != 0)
      bad(i, "tensor data is not " + std::to_string(pi.align_bytes) +
                 "-byte aligned; the kernel makes vector accesses of that width on it");
    ptrs[i] = t.data_ptr();
  }

  if (s.device.is_cuda()) {
    if (!s.ready.load(std::memory_order_acquire)) {
      prepare_gpu();
      const runtime::DeviceInfo& dev = runtime::current_device();
      std::string op = "launch " + s.kernel_name;
      if (s.info.launch.block > dev.max_threads_per_block)
        fail(op, "", loc,
             "block of " + std::to_string(s.info.launch.block) + " threads exceeds the device's " +
                 std::to_string(dev.max_threads_per_block));
      if (s.info.shared_bytes > dev.max_shared_per_block_optin)
        fail(op, "", loc,
             "needs " + std::to_string(s.info.shared_bytes) + " bytes of shared memory; " +
                 dev.name + " allows " + std::to_string(dev.max_shared_per_block_optin) +
                 " per CTA");
      s.ready.store(true, std::memory_order_release);
    }
    std::array<runtime::DevicePtr, 32> dsmall{};
    std::array<void*, 32> ksmall{};
    std::vector<runtime::DevicePtr> dbig;
    std::vector<void*> kbig;
    runtime::DevicePtr* dptrs = dsmall.data();
    void** kargs = ksmall.data();
    if (n > dsmall.size()) {
      dbig.resize(n);
      kbig.resize(n);
      dptrs = dbig.data();
      kargs = kbig.data();
    }
    for (std::size_t i = 0; i < n; ++i) {
      dptrs[i] = static_cast<runtime::DevicePtr>(reinterpret_cast<std::uintptr_t>(ptrs[i]));
      kargs[i] = &dptrs[i];
    }
    const auto& g = s.info.launch.grid;
    runtime::launch(
        s.function,
        {static_cast<unsigned>(g[0]), static_cast<unsigned>(g[1]), static_cast<unsigned>(g[2])},
        {static_cast<unsigned>(s.info.launch.block), 1, 1},
        static_cast<std::size_t>(s.info.shared_bytes), kargs, s.kernel_name);
    if (sync_after_launch()) runtime::synchronize(s.kernel_name);
    return;
  }

  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (!s.host) {
      std::string why;
      if (!runtime::host_jit_available(&why))
        fail("launch " + s.kernel_name, "", loc, "cannot run on the host: " + why);
      s.host = runtime::host_compile(s.info, s.cuda, s.checked);
    }
  }
  s.host->run(ptrs, loc);
}

void synchronize() {
  if (runtime::cuda_available()) runtime::synchronize("tx::synchronize");
}

}  // namespace tx

namespace tx::runtime {

HostKernel::~HostKernel() = default;

#ifndef TX_HAVE_HOST_JIT
bool host_jit_available(std::string* why) {
  if (why)
    *why =
        "this tx was built without the LLVM host JIT (install llvm-19-dev and rebuild), and "
        "no GPU is in use";
  return false;
}
std::shared_ptr<HostKernel> host_compile(const lowering::LoweredKernel& k, const std::string&,
                                         bool) {
  fail("tx.host_jit", k.source->name, {}, "tx was built without the LLVM host JIT");
}
#endif

}  // namespace tx::runtime
