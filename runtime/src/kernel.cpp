// compile(): lowering + CUDA codegen up front; the GPU binary and the host
// JIT are built on first launch. The GPU binary comes from, in order, the
// process's memory cache, the disk cache, NVRTC.
#include "tx/runtime/kernel.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <sstream>

#include "tx/lowering/codegen_cuda.hpp"
#include "tx/printer.hpp"
#include "tx/runtime/cubin_cache.hpp"
#include "tx/runtime/cuda_driver.hpp"
#include "tx/runtime/disk_cache.hpp"
#include "tx/runtime/nvrtc.hpp"
#include "tx/runtime/stream.hpp"

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
  // Encoded TMA tensor maps by their description (pointer, shape, box,
  // swizzle): a launch on the same tensors reuses them. Bounded: the oldest
  // entry goes first.
  struct alignas(64) MapBlob {
    unsigned char bytes[128];
  };
  mutable std::mutex maps_mu;
  mutable std::vector<std::pair<runtime::TensorMapSpec, MapBlob>> maps;
  // What the last launch of a shape-generic kernel computed from its
  // extents and scalars (the divisors' magic numbers, the grid): a launch
  // with the same values reuses it instead of evaluating the expressions
  // again (a few hundred ns of host time per launch, the launch's largest
  // cost after the driver's). `key` holds the T::dim values, then each
  // scalar parameter's bytes; taken with try_lock, so threads launching at
  // once never wait for it.
  struct LaunchMemo {
    static constexpr std::size_t capacity = 24;
    std::array<std::int64_t, capacity> key{};
    std::size_t key_size = 0;
    std::array<std::int32_t, capacity> derived{};
    std::array<std::int64_t, 3> grid{};
    bool valid = false;
  };
  mutable std::mutex memo_mu;
  mutable LaunchMemo memo;
  // A prebuilt kernel (Kernel::prebuilt): `info` holds its launch
  // description only; `full`, made by `build` on first need, has the rest.
  bool prebuilt = false;
  std::vector<char> cubin;
  std::function<Kernel()> build;
  mutable std::mutex built_mu;  // a mutex, not std::call_once: `build` may throw a tx error
  mutable std::shared_ptr<State> full;
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

// A parameter's extents as declared: (n, 4096).
std::string dims_str(const lowering::KernelParamInfo& p) {
  if (!p.symbolic) return shape_str(p.shape);
  std::string r = "(";
  for (std::size_t i = 0; i < p.dims.size(); ++i) r += (i ? ", " : "") + to_string(p.dims[i]);
  return r + (p.dims.size() == 1 ? ",)" : ")");
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
  lo.host = !st->device.is_cuda();
  if (st->device.is_cuda() && runtime::cuda_available()) {
    // Device::cuda(n): a GPU this machine has; each device loads its own
    // module (kernels are compiled per architecture).
    const int count = runtime::device_count();
    if (st->device.index < 0 || st->device.index >= count)
      fail("tx.compile", st->device.str(), f->loc,
           "no such GPU: this machine has " + std::to_string(count) + " (cuda:0" +
               (count > 1 ? " .. cuda:" + std::to_string(count - 1) : std::string()) + ")");
    if (lo.arch.empty()) lo.arch = runtime::device_info(st->device.index).arch();
  }
  st->info = lowering::lower(f, lo);
  st->kernel_name = lowering::sanitize_identifier(f->name);
  st->cuda = lowering::codegen_cuda(st->info, {st->kernel_name, opt.approx_math});
  st->arch = opt.arch;
  Kernel k;
  k.state_ = st;
  return k;
}

Kernel Kernel::prebuilt(lowering::LoweredKernel info, std::string kernel_name,
                        std::vector<char> cubin, Device device, std::function<Kernel()> build) {
  if (!build) fail("tx.prebuilt", kernel_name, {}, "a prebuilt kernel needs a way to build it");
  auto st = std::make_shared<Kernel::State>();
  st->info = std::move(info);
  st->kernel_name = std::move(kernel_name);
  st->device = device;
  st->prebuilt = true;
  st->cubin = std::move(cubin);
  st->build = std::move(build);
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

// With its IR and CUDA: a prebuilt kernel builds them on first need.
const Kernel::State& Kernel::full_state(const char* method) const {
  const State& s = state_of(state_, method);
  if (!s.prebuilt) return s;
  std::lock_guard<std::mutex> lock(s.built_mu);
  if (!s.full) {
    Kernel k = s.build();
    if (!k.state_ || k.state_->prebuilt || k.state_->kernel_name != s.kernel_name)
      fail("tx.prebuilt", s.kernel_name, {},
           "the kernel built for it is " +
               (k.state_ ? "'" + k.state_->kernel_name + "'" : std::string("empty")));
    s.full = k.state_;
  }
  return *s.full;
}

const std::string& Kernel::name() const { return state_of(state_, "name").kernel_name; }
Device Kernel::device() const { return state_of(state_, "device").device; }
const PrimFunc& Kernel::source() const { return full_state("source").info.source; }
const PrimFunc& Kernel::lowered() const { return full_state("lowered").info.lowered; }
const lowering::LoweredKernel& Kernel::info() const { return full_state("info").info; }
std::string Kernel::tirx() const { return to_string(full_state("tirx").info.source); }
std::string Kernel::lowered_ir() const { return to_string(full_state("lowered_ir").info.lowered); }
std::string Kernel::cuda_source() const { return full_state("cuda_source").cuda; }
bool Kernel::checked() const { return state_of(state_, "checked").checked; }
bool Kernel::is_prebuilt() const { return state_of(state_, "is_prebuilt").prebuilt; }

std::string Kernel::ptx(const std::string& arch) const {
  const State& s = full_state("ptx");
  return runtime::nvrtc_compile(s.cuda, s.kernel_name + ".cu", arch, runtime::NvrtcTarget::ptx).ptx;
}

std::string Kernel::prepare_gpu() const {
  state_of(state_, "prepare_gpu");
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.function) return "memory";
  if (s.prebuilt) {
    // Its own binary; a driver that refuses it gets the kernel built.
    try {
      s.module = runtime::Module::load(s.cubin, s.kernel_name, s.device.index);
      s.function = s.module->function(s.kernel_name);
      return "prebuilt";
    } catch (const Error& e) {
      warn("the prebuilt binary of " + s.kernel_name + " does not load on this GPU (" + e.reason() +
           "); building it");
    }
    const State& f = full_state("prepare_gpu");
    Kernel full;
    full.state_ = s.full;
    std::string origin = full.prepare_gpu();
    s.module = f.module;
    s.function = f.function;
    return origin;
  }
  const runtime::DeviceInfo& dev = runtime::device_info(s.device.index);
  std::string arch = s.arch.empty() ? dev.arch() : s.arch;
  // The modules of this process, by source, options and GPU. Not by NVRTC
  // version (one per process): asking NVRTC for it loads libnvrtc (10-15 ms),
  // which a kernel built ahead of time never needs.
  std::string key =
      runtime::kernel_cache_key(s.cuda, runtime::nvrtc_default_options(arch), arch, "module");
  std::string origin = "memory";
  {
    ModuleCache& mc = module_cache();
    std::lock_guard<std::mutex> l2(mc.mu);
    key += "@" + std::to_string(s.device.index);  // modules are per context
    auto it = mc.modules.find(key);
    if (it != mc.modules.end()) s.module = it->second;
  }
  if (!s.module) {
    // A kernel compiled when tx was built (the op library's generic ones).
    if (std::optional<std::vector<char>> aot = runtime::aot_cubin(s.cuda, arch)) {
      try {
        s.module = runtime::Module::load(*aot, s.kernel_name, s.device.index);
        origin = "aot";
      } catch (const Error& e) {
        warn("the prebuilt binary of " + s.kernel_name + " does not load on this GPU (" +
             e.reason() + "); compiling it");
      }
    }
  }
  if (!s.module) {
    runtime::CachedCubin bin = runtime::cubin_for(s.cuda, s.kernel_name, arch);
    origin = bin.from_disk ? "disk" : "nvrtc";
    try {
      s.module = runtime::Module::load(bin.cubin, s.kernel_name, s.device.index);
    } catch (const Error& e) {
      // A cached binary the driver refuses (made for another GPU, or by a
      // toolchain this driver cannot read) is never fatal: recompile it.
      if (!bin.from_disk) throw;
      warn("kernel cache: the cached binary of " + s.kernel_name + " does not load on this GPU (" +
           e.reason() + "); recompiling");
      bin = runtime::cubin_for(s.cuda, s.kernel_name, arch, runtime::DiskCache::instance(),
                               /*skip_disk=*/true);
      origin = "nvrtc";
      s.module = runtime::Module::load(bin.cubin, s.kernel_name, s.device.index);
    }
    ModuleCache& mc = module_cache();
    std::lock_guard<std::mutex> l2(mc.mu);
    mc.modules[key] = s.module;
  }
  s.function = s.module->function(s.kernel_name);
  return origin;
}

void Kernel::launch(const std::vector<Arg>& args, std::source_location loc) const {
  launch(args.data(), args.size(), loc);
}

void Kernel::launch(std::initializer_list<Arg> args, std::source_location loc) const {
  launch(args.begin(), args.size(), loc);
}

void Kernel::launch(const std::vector<Tensor>& args, std::source_location loc) const {
  std::vector<const Tensor*> p;
  p.reserve(args.size());
  for (const Tensor& t : args) p.push_back(&t);
  launch(p.data(), p.size(), loc);
}

void Kernel::launch(const Tensor* const* args, std::size_t n, SourceLoc loc) const {
  // Pointers on the stack: a launch allocates nothing on the fast path.
  std::array<Arg, 32> small{};
  std::vector<Arg> big;
  Arg* a = small.data();
  if (n > small.size()) {
    big.assign(n, Arg());
    a = big.data();
  }
  for (std::size_t i = 0; i < n; ++i) a[i] = Arg(*args[i]);
  launch(a, n, loc);
}

namespace {
bool sync_after_launch() {
  static const bool sync = [] {
    const char* v = std::getenv("TX_SYNC");
    return v && *v && std::string(v) != "0";
  }();
  return sync;
}

// A value of a scalar parameter or a T::dim as the kernel receives it: the
// bytes of its C type (CUDA takes a pointer to each argument's value).
struct ScalarSlot {
  alignas(8) unsigned char bytes[8] = {};
};

template <class T>
void put(ScalarSlot& slot, T v) {
  static_assert(sizeof(T) <= sizeof(slot.bytes));
  std::memcpy(slot.bytes, &v, sizeof(T));
}
}  // namespace

void Kernel::launch(const Arg* args, std::size_t n, SourceLoc call_loc) const {
  if (!state_)
    fail("tx.Kernel.launch", "", call_loc,
         "the Kernel is empty (default-constructed); make one with tx::compile");
  const State& s = *state_;
  const auto& params = s.info.params;
  const auto& dims = s.info.dims;
  // The caller's line; the kernel's own where no call site is known.
  SourceLoc loc = call_loc.known() ? call_loc : s.info.source->loc;
  auto bad = [&](std::size_t i, const std::string& reason) {
    fail("launch " + s.kernel_name,
         i < params.size() ? params[i].name + " (argument " + std::to_string(i) + ")" : "", loc,
         reason);
  };
  if (n != params.size())
    bad(params.size(),
        "takes " + std::to_string(params.size()) + " arguments, got " + std::to_string(n));
  // Kernel arguments: one slot per parameter, one per T::dim, then one per
  // value the launch computes (fast_divide's magic numbers).
  const auto& derived = s.info.derived;
  const std::size_t slots = n + dims.size() + derived.size();
  std::array<void*, 32> small{};
  std::array<ScalarSlot, 32> ssmall{};
  std::array<std::int64_t, 32> esmall{};
  std::vector<void*> big;
  std::vector<ScalarSlot> sbig;
  std::vector<std::int64_t> ebig;
  void** ptrs = small.data();
  ScalarSlot* values = ssmall.data();
  std::int64_t* elems = esmall.data();
  if (slots > small.size()) {
    big.resize(slots);
    sbig.resize(slots);
    ebig.resize(slots);
    ptrs = big.data();
    values = sbig.data();
    elems = ebig.data();
  }
  // T::dim values as the tensors bind them, and which argument bound each.
  std::array<std::int64_t, 16> dim_small{};
  std::array<int, 16> dim_from_small{};
  std::vector<std::int64_t> dim_big;
  std::vector<int> dim_from_big;
  std::int64_t* dim_value = dim_small.data();
  int* dim_from = dim_from_small.data();
  if (dims.size() > dim_small.size()) {
    dim_big.assign(dims.size(), 0);
    dim_from_big.assign(dims.size(), -1);
    dim_value = dim_big.data();
    dim_from = dim_from_big.data();
  }
  for (std::size_t d = 0; d < dims.size(); ++d) dim_from[d] = -1;
  auto dim_index = [&](const Expr& e) -> int {
    for (std::size_t d = 0; d < dims.size(); ++d)
      if (e.get() == dims[d].var.get()) return static_cast<int>(d);
    return -1;
  };

  for (std::size_t i = 0; i < n; ++i) {
    const auto& pi = params[i];
    const Arg& arg = args[i];
    if (pi.is_scalar) {
      if (arg.tensor()) bad(i, "is a scalar parameter (" + pi.dtype.name() + "), given a tensor");
      if (pi.dtype.is_integer()) {
        if (!arg.is_int())
          bad(i, "is an integer parameter (" + pi.dtype.name() + "), given " +
                     std::to_string(arg.as_double()));
        double lo = pi.dtype.is_uint() ? 0.0 : -std::ldexp(1.0, pi.dtype.bits - 1);
        double hi = std::ldexp(1.0, pi.dtype.bits - (pi.dtype.is_uint() ? 0 : 1)) - 1;
        if (static_cast<double>(arg.as_int()) < lo || static_cast<double>(arg.as_int()) > hi)
          bad(i, "value " + std::to_string(arg.as_int()) + " does not fit " + pi.dtype.name());
        if (arg.as_int() < pi.min || arg.as_int() > pi.max || arg.as_int() % pi.multiple_of != 0)
          bad(i, "value " + std::to_string(arg.as_int()) +
                     " breaks the facts the kernel was "
                     "compiled with (min " +
                     std::to_string(pi.min) + ", max " + std::to_string(pi.max) + ", multiple of " +
                     std::to_string(pi.multiple_of) + ")");
        switch (pi.dtype.bits) {
          case 8:
            put(values[i], static_cast<std::int8_t>(arg.as_int()));
            break;
          case 16:
            put(values[i], static_cast<std::int16_t>(arg.as_int()));
            break;
          case 32:
            put(values[i], static_cast<std::int32_t>(arg.as_int()));
            break;
          default:
            put(values[i], arg.as_int());
            break;
        }
      } else if (pi.dtype == f64) {
        put(values[i], arg.as_double());
      } else {
        put(values[i], static_cast<float>(arg.as_double()));
      }
      ptrs[i] = values[i].bytes;
      elems[i] = 0;
      continue;
    }
    if (!arg.tensor()) bad(i, "is a buffer parameter, given a number");
    const Tensor& t = *arg.tensor();
    if (!t.defined()) bad(i, "tensor is undefined");
    if (t.numel() == 0)
      bad(i, "tensor is empty (shape " + shape_str(t.shape()) +
                 "); a kernel's buffers have positive extents (the kernel declares " +
                 dims_str(pi) + ")");
    if (t.dtype() != pi.dtype)
      bad(i, "dtype " + t.dtype().name() + " but the kernel declares " + pi.dtype.name());
    if (!pi.symbolic) {
      if (t.shape() != pi.shape)
        bad(i, "shape " + shape_str(t.shape()) + " but the kernel declares " + shape_str(pi.shape) +
                   (t.numel() == pi.elems ? " (same element count: pass t.reshape(...))" : ""));
      if (t.numel() < pi.elems)
        bad(i, "tensor holds " + std::to_string(t.numel()) + " elements, the layout needs " +
                   std::to_string(pi.elems));
    } else {
      // Extents known at launch: constants must match, T::dim variables are
      // bound by the first tensor that has them and must agree after.
      if (t.shape().size() != pi.dims.size())
        bad(i, "shape " + shape_str(t.shape()) + " has " + std::to_string(t.shape().size()) +
                   " dimensions but the kernel declares " + dims_str(pi));
      for (std::size_t d = 0; d < pi.dims.size(); ++d) {
        std::int64_t got = t.shape()[d];
        if (auto c = as_const_int(pi.dims[d])) {
          if (got != *c)
            bad(i, "shape " + shape_str(t.shape()) + " but the kernel declares " + dims_str(pi) +
                       " (dimension " + std::to_string(d) + ")");
          continue;
        }
        int k = dim_index(pi.dims[d]);
        if (dim_from[k] < 0) {
          dim_value[k] = got;
          dim_from[k] = static_cast<int>(i);
        } else if (dim_value[k] != got) {
          const auto& first = params[static_cast<std::size_t>(dim_from[k])];
          bad(i, "extent " + dims[static_cast<std::size_t>(k)].var.name() + " is " +
                     std::to_string(got) + " here (shape " + shape_str(t.shape()) + ") but " +
                     std::to_string(dim_value[k]) + " in " + first.name + " (argument " +
                     std::to_string(dim_from[k]) + "): the tensors disagree");
        }
      }
    }
    if (!(t.device() == s.device))
      bad(i, "tensor is on " + t.device().str() + " but the kernel runs on " + s.device.str() +
                 " (move it with .to(kernel.device()))");
    // T.match_buffer declares a row-major buffer: a strided view would be
    // read as if it were one.
    if (!t.is_contiguous())
      bad(i, "tensor is a strided view (shape " + shape_str(t.shape()) + ", strides " +
                 shape_str(t.strides()) + ") but the kernel declares a row-major buffer " +
                 dims_str(pi) + "; pass t.contiguous()");
    auto addr = reinterpret_cast<std::uintptr_t>(t.data_ptr());
    if (addr % static_cast<std::uintptr_t>(pi.align_bytes) != 0)
      bad(i, "tensor data is not " + std::to_string(pi.align_bytes) +
                 "-byte aligned; the kernel makes vector accesses of that width on it");
    ptrs[i] = t.data_ptr();
    elems[i] = t.numel();
  }
  // T::no_alias: no two buffers share bytes where the kernel writes one.
  if (s.info.source->no_alias) {
    auto range = [&](std::size_t i) {
      const Tensor& t = *args[i].tensor();
      auto lo = reinterpret_cast<std::uintptr_t>(t.data_ptr());
      return std::pair{lo, lo + static_cast<std::uintptr_t>(t.numel() * t.dtype().bytes())};
    };
    for (std::size_t i = 0; i < n; ++i) {
      if (params[i].is_scalar) continue;
      for (std::size_t j = i + 1; j < n; ++j) {
        if (params[j].is_scalar || !(params[i].written || params[j].written)) continue;
        auto [a0, a1] = range(i);
        auto [b0, b1] = range(j);
        if (a0 < b1 && b0 < a1)
          bad(j, "overlaps " + params[i].name + " (argument " + std::to_string(i) +
                     ") in memory, but the kernel assumes its buffers do not (T::no_alias)");
      }
    }
  }
  // The facts each T::dim was compiled with.
  for (std::size_t d = 0; d < dims.size(); ++d) {
    const DimParam& dp = dims[d];
    std::int64_t v = dim_value[d];
    // Messages are built only on failure: launches are hot.
    auto bad_dim = [&](const std::string& why) {
      std::string from = dim_from[d] >= 0
                             ? " (from " + params[static_cast<std::size_t>(dim_from[d])].name +
                                   ", argument " + std::to_string(dim_from[d]) + ")"
                             : "";
      fail("launch " + s.kernel_name, dp.var.name(), loc,
           "extent " + dp.var.name() + " = " + std::to_string(v) + from + " " + why +
               " (T::dim at " + dp.loc.str() + ")");
    };
    if (v < dp.min) bad_dim("is below its min " + std::to_string(dp.min));
    if (v > dp.max) bad_dim("is above its max " + std::to_string(dp.max));
    if (dp.multiple_of > 1 && v % dp.multiple_of != 0)
      bad_dim("is not a multiple of " + std::to_string(dp.multiple_of) +
              ", which the kernel was specialized for");
    put(values[n + d], static_cast<std::int32_t>(v));
    ptrs[n + d] = values[n + d].bytes;
  }
  // The values of T::dim extents and scalar parameters, for what the launch
  // computes from them.
  auto value_of = [&](const VarNode* v) -> std::optional<std::int64_t> {
    for (std::size_t d = 0; d < dims.size(); ++d)
      if (dims[d].var.get() == v) return dim_value[d];
    for (std::size_t i = 0; i < n; ++i)
      if (params[i].is_scalar && s.info.source->params[i].scalar.get() == v)
        return args[i].is_int() ? args[i].as_int() : static_cast<std::int64_t>(args[i].as_double());
    return std::nullopt;
  };
  std::array<std::int64_t, 3> grid = s.info.launch.grid;
  const bool computed = !derived.empty() || s.info.launch.symbolic_grid;
  // The memo's key: this launch's extents and scalars.
  State::LaunchMemo key;
  if (computed) {
    for (std::size_t d = 0; d < dims.size() && key.key_size < key.capacity; ++d)
      key.key[key.key_size++] = dim_value[d];
    for (std::size_t i = 0; i < n; ++i) {
      if (!params[i].is_scalar) continue;
      if (key.key_size == key.capacity) {
        key.key_size = key.capacity + 1;  // too many values to remember: no memo
        break;
      }
      const Arg& a = args[i];
      key.key[key.key_size++] =
          a.is_int() ? a.as_int() : std::bit_cast<std::int64_t>(a.as_double());
    }
    if (dims.size() > key.capacity || derived.size() > key.capacity)
      key.key_size = key.capacity + 1;
  }
  const bool memoizable = computed && key.key_size <= key.capacity;
  bool reused = false;
  if (memoizable) {
    std::unique_lock<std::mutex> lock(s.memo_mu, std::try_to_lock);
    const State::LaunchMemo& m = s.memo;
    if (lock.owns_lock() && m.valid && m.key_size == key.key_size &&
        std::equal(m.key.begin(), m.key.begin() + static_cast<std::ptrdiff_t>(m.key_size),
                   key.key.begin())) {
      key.derived = m.derived;
      grid = m.grid;
      reused = true;
    }
  }
  // fast_divide's magic numbers for this launch's divisors (lowering proved
  // each in [1, 2^31 - 1] from the facts checked above).
  for (std::size_t j = 0; j < derived.size() && !reused; ++j) {
    const DimParam& dp = derived[j];
    auto d = lowering::evaluate_int(dp.of, value_of);
    if (!d || *d < 1 || *d > 2147483647)
      fail("launch " + s.kernel_name, dp.var.name(), loc,
           "divisor " + to_string(dp.of) + " is " +
               (d ? std::to_string(*d) : std::string("not computable")) +
               " at this launch, outside [1, 2^31 - 1]");
    const lowering::FastDivisor f = lowering::fast_divisor_magic(*d);
    const std::int32_t v = dp.derived == DimParam::Derived::div_magic
                               ? static_cast<std::int32_t>(f.magic)
                               : static_cast<std::int32_t>(f.shift);
    if (j < key.capacity) key.derived[j] = v;
  }
  for (std::size_t j = 0; j < derived.size(); ++j) {
    const std::size_t slot = n + dims.size() + j;
    put(values[slot], key.derived[j]);
    ptrs[slot] = values[slot].bytes;
    elems[slot] = 0;
  }
  // The grid, where it is known only now.
  if (s.info.launch.symbolic_grid && !reused) {
    for (std::size_t g = 0; g < 3; ++g) {
      const Expr& e = s.info.launch.grid_exprs[g];
      if (!e.defined() || e.as<IntImmNode>()) continue;
      auto v = lowering::evaluate_int(e, value_of, /*mathematical=*/true);
      const std::int64_t hw = g == 0 ? 2147483647 : 65535;
      if (!v || *v < 0 || *v > hw)
        fail("launch " + s.kernel_name, "", loc,
             "grid dimension " + std::to_string(g) + " = " + to_string(e) + " is " +
                 (v ? std::to_string(*v) : std::string("not computable")) + ", outside [0, " +
                 std::to_string(hw) + "]");
      grid[g] = *v;
    }
  }
  if (memoizable && !reused) {
    std::unique_lock<std::mutex> lock(s.memo_mu, std::try_to_lock);
    if (lock.owns_lock()) {
      key.grid = grid;
      key.valid = true;
      s.memo = key;
    }
  }
  if (grid[0] == 0 || grid[1] == 0 || grid[2] == 0) return;  // nothing to run

  if (s.device.is_cuda()) {
    if (!s.ready.load(std::memory_order_acquire)) {
      prepare_gpu();
      const runtime::DeviceInfo& dev = runtime::device_info(s.device.index);
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
    // TMA tensor maps, after the extents: encoded for these tensors (or
    // found in the kernel's cache of them).
    const auto& tmaps = s.info.tensor_maps;
    std::vector<State::MapBlob> blobs(tmaps.size());
    for (std::size_t k = 0; k < tmaps.size(); ++k) {
      const auto& tm = tmaps[k];
      const auto pi = static_cast<std::size_t>(tm.param);
      const Tensor& t = *args[pi].tensor();
      runtime::TensorMapSpec spec;
      spec.address = static_cast<runtime::DevicePtr>(reinterpret_cast<std::uintptr_t>(ptrs[pi]));
      spec.element_bytes = t.dtype().bytes();
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
      if (spec.address % 16 != 0)
        bad(pi, "tensor data is not 16-byte aligned, which the kernel's TMA copies need");
      for (int i = 0; i + 1 < spec.rank; ++i)
        if (spec.strides[i] % 16 != 0)
          bad(pi, "a row pitch of " + std::to_string(spec.strides[i]) + " bytes (shape " +
                      shape_str(t.shape()) + "): the kernel's TMA copies need multiples of 16");
      std::lock_guard<std::mutex> lock(s.maps_mu);
      auto it = std::find_if(s.maps.begin(), s.maps.end(),
                             [&](const auto& e) { return e.first == spec; });
      if (it == s.maps.end()) {
        if (s.maps.size() >= 64) s.maps.erase(s.maps.begin());
        State::MapBlob blob;
        runtime::encode_tensor_map(blob.bytes, spec, "launch " + s.kernel_name);
        s.maps.emplace_back(spec, blob);
        it = s.maps.end() - 1;
      }
      blobs[k] = it->second;
    }
    // CUDA takes a pointer to each argument's value: the device address of a
    // buffer, the value slot of a scalar or extent.
    std::array<runtime::DevicePtr, 32> dsmall{};
    std::array<void*, 32> ksmall{};
    std::vector<runtime::DevicePtr> dbig;
    std::vector<void*> kbig;
    runtime::DevicePtr* dptrs = dsmall.data();
    void** kargs = ksmall.data();
    if (slots + tmaps.size() > dsmall.size()) {
      dbig.resize(slots + tmaps.size());
      kbig.resize(slots + tmaps.size());
      dptrs = dbig.data();
      kargs = kbig.data();
    }
    for (std::size_t i = 0; i < slots; ++i) {
      if (i < n && !params[i].is_scalar) {
        dptrs[i] = static_cast<runtime::DevicePtr>(reinterpret_cast<std::uintptr_t>(ptrs[i]));
        kargs[i] = &dptrs[i];
      } else {
        kargs[i] = ptrs[i];
      }
    }
    for (std::size_t k = 0; k < tmaps.size(); ++k) kargs[slots + k] = blobs[k].bytes;
    runtime::launch(s.function,
                    {static_cast<unsigned>(grid[0]), static_cast<unsigned>(grid[1]),
                     static_cast<unsigned>(grid[2])},
                    {static_cast<unsigned>(s.info.launch.block), 1, 1},
                    static_cast<std::size_t>(s.info.shared_bytes), kargs, s.kernel_name,
                    s.device.index, current_stream(s.device).handle());
    if (sync_after_launch()) runtime::synchronize(s.kernel_name);
    return;
  }

  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (!s.host) {
      std::string why;
      if (!runtime::host_jit_available(&why))
        fail("launch " + s.kernel_name, "", loc, "cannot run on the host: " + why);
      const State& f = s.prebuilt ? full_state("launch") : s;
      s.host = runtime::host_compile(f.info, f.cuda, s.checked);
    }
  }
  s.host->run({ptrs, grid, elems, loc});
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
