// compile(): lowering + CUDA codegen up front; the GPU binary and the host
// JIT's function are built on first launch, by the kernel's Executable
// (executable.hpp). A launch is bind (bind.hpp: checks, extents, derived
// values, grid; device-neutral) then the Executable's run.
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

#include "bind.hpp"
#include "executable.hpp"
#include "profile_sink.hpp"
#include "tx/lowering/codegen_cuda.hpp"
#include "tx/printer.hpp"
#include "tx/runtime/cuda_driver.hpp"
#include "tx/runtime/nvrtc.hpp"
#include "tx/runtime/stream.hpp"

namespace tx {

// A compiled kernel: its lowered form and CUDA, the binder of its launches
// (device-neutral) and the Executable of its target (CUDA or the host).
struct Kernel::State {
  lowering::LoweredKernel info;
  std::string cuda;
  std::string kernel_name;
  Device device;
  std::string arch;
  bool checked = false;
  std::shared_ptr<runtime::ProfileSink> profile;  // profiled kernels
  std::unique_ptr<runtime::Binder> binder;
  std::unique_ptr<runtime::Executable> exec;
  // A prebuilt kernel (Kernel::prebuilt): `info` holds its launch
  // description only; `full`, made by `build` on first need, has the rest.
  bool prebuilt = false;
  std::function<Kernel()> build;
  mutable std::mutex built_mu;  // a mutex, not std::call_once: `build` may throw a tx error
  mutable std::shared_ptr<State> full;
};

namespace {

// The binder and the Executable of a kernel's device, once its info and
// CUDA are in place (they refer to them).
void make_launcher(Kernel::State& st, std::vector<char> prebuilt_cubin,
                   std::function<runtime::ExecutableSource::Full()> full) {
  st.binder = std::make_unique<runtime::Binder>(st.info, st.kernel_name);
  runtime::ExecutableSource src{st.kernel_name,  st.device, st.arch,
                                st.checked,      &st.info,  std::move(prebuilt_cubin),
                                std::move(full), st.profile};
  st.exec = st.device.is_cuda() ? runtime::make_cuda_executable(std::move(src))
                                : runtime::make_host_executable(std::move(src));
}

}  // namespace

namespace {
bool env_flag_set(const char* name) {
  const char* v = std::getenv(name);
  return v && *v && std::strcmp(v, "0") != 0;
}
}  // namespace

Kernel compile(const PrimFunc& f, const CompileOptions& opt) {
  if (!f) fail("tx.compile", "", {}, "empty PrimFunc");
  // Options are checked before anything is looked up (a GPU, the driver).
  if (opt.min_ctas_per_sm < 0 || opt.min_ctas_per_sm > 32)
    fail("tx.compile", "min_ctas_per_sm", f->loc,
         std::to_string(opt.min_ctas_per_sm) + ": CTAs per SM are 0 (unstated) to 32");
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
  lo.profile = opt.profile ? *opt.profile : env_flag_set("TX_PROFILE");
  if (lo.profile) st->profile = std::make_shared<runtime::ProfileSink>();
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
  st->cuda = lowering::codegen_cuda(st->info, {.kernel_name = st->kernel_name,
                                               .approx_math = opt.approx_math,
                                               .min_ctas_per_sm = opt.min_ctas_per_sm});
  st->arch = opt.arch;
  Kernel::State* raw = st.get();
  make_launcher(*st, {}, [raw] { return runtime::ExecutableSource::Full{&raw->info, &raw->cuda}; });
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
  st->build = std::move(build);
  // The IR and CUDA of the full kernel, built on first need. (The state
  // owns the Executable that holds this: a raw pointer, not a cycle.)
  State* raw = st.get();
  make_launcher(*st, std::move(cubin), [raw] {
    const State& f = full_of(*raw);
    return runtime::ExecutableSource::Full{&f.info, &f.cuda};
  });
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
  return full_of(state_of(state_, method));
}

const Kernel::State& Kernel::full_of(const State& s) {
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
bool Kernel::profiled() const { return state_of(state_, "profiled").profile != nullptr; }
std::optional<KernelProfile> Kernel::last_profile() const {
  const State& st = state_of(state_, "last_profile");
  if (!st.profile) return std::nullopt;
  std::lock_guard<std::mutex> lock(st.profile->mu);
  return st.profile->last;
}
bool Kernel::is_prebuilt() const { return state_of(state_, "is_prebuilt").prebuilt; }

std::string Kernel::ptx(const std::string& arch) const {
  const State& s = full_state("ptx");
  return runtime::nvrtc_compile(s.cuda, s.kernel_name + ".cu", arch, runtime::NvrtcTarget::ptx).ptx;
}

std::string Kernel::prepare_gpu() const {
  const State& s = state_of(state_, "prepare_gpu");
  if (!s.device.is_cuda())
    fail("tx.Kernel.prepare_gpu", s.kernel_name, {},
         "the kernel was compiled for " + s.device.str() +
             "; compile it for a GPU (CompileOptions::device = Device::cuda())");
  return s.exec->prepare(s.device, {});
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

void Kernel::launch(const Arg* args, std::size_t n, SourceLoc loc) const {
  static const LaunchOptions here{};
  launch(args, n, here, loc);
}

void Kernel::launch(const std::vector<Arg>& args, const LaunchOptions& where,
                    std::source_location loc) const {
  launch(args.data(), args.size(), where, loc);
}

namespace {
// Where a launch runs: the device it names, else its stream's, else the
// kernel's. A kernel runs on devices of the kind it was compiled for (its
// code is that target's); a CUDA kernel on any GPU of its architecture.
Device launch_device(const Kernel::State& s, const LaunchOptions& where, SourceLoc loc) {
  if (!where.device && !where.stream) return s.device;
  const Device d = where.device ? *where.device : where.stream->device();
  const std::string op = "launch " + s.kernel_name;
  if (d.is_cuda() != s.device.is_cuda())
    fail(op, d.str(), loc,
         "the kernel was compiled for " + s.device.str() + "; a launch on " + d.str() +
             " needs a kernel compiled for it (CompileOptions::device)");
  if (where.stream && !(where.stream->device() == d))
    fail(op, d.str(), loc,
         "the launch names " + d.str() + " but a stream of " + where.stream->device().str());
  if (where.stream && !d.is_cuda())
    fail(op, d.str(), loc, "a host kernel runs on the calling thread: it takes no stream");
  return d;
}
}  // namespace

// Bind (device-neutral: every check, the extents, the derived values, the
// grid), then run on the Executable of the kernel's target.
void Kernel::launch(const Arg* args, std::size_t n, const LaunchOptions& where,
                    SourceLoc loc) const {
  if (!state_)
    fail("tx.Kernel.launch", "", loc,
         "the Kernel is empty (default-constructed); make one with tx::compile");
  const State& s = *state_;
  const Device device = launch_device(s, where, loc);
  runtime::BoundLaunch bound;
  s.binder->bind(args, n, device, loc, &bound);
  if (bound.empty_grid()) return;  // nothing to run
  s.exec->run(bound, where.stream ? &*where.stream : nullptr);
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
std::shared_ptr<HostKernel> host_compile(const lowering::LoweredKernel& k, bool, std::string*) {
  fail("tx.host_jit", k.source->name, {}, "tx was built without the LLVM host JIT");
}
void host_cache_clear_memory() {}
#endif

}  // namespace tx::runtime
