// A compiled kernel: what tx::compile returns. It holds the lowered IR and
// the CUDA source at once (no GPU needed for either), builds the GPU binary
// on first use (NVRTC -> cubin for the device's exact arch, through the
// memory and disk caches), and launches on the GPU or, where there is none,
// on the host through the LLVM ORC JIT.
//
//   tx::Kernel k = tx::compile(warp_sqrt());
//   std::cout << k.cuda_source();
//   k(A, B);                       // tensors in parameter order
//
// A launch checks every argument against the kernel's T.match_buffer
// declarations (count, dtype, shape, device, alignment) and reports a
// mismatch as a tx error naming the kernel and the parameter.
#pragma once

#include <array>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <source_location>
#include <string>
#include <type_traits>
#include <vector>

#include "tx/ir.hpp"
#include "tx/lowering/lower.hpp"
#include "tx/runtime/profile.hpp"
#include "tx/runtime/stream.hpp"
#include "tx/runtime/tensor.hpp"

namespace tx {

// Where one launch runs. By default: the kernel's device, on that device's
// current stream (a StreamGuard's, else the legacy default stream). A CUDA
// kernel may launch on any GPU of the architecture it was compiled for (each
// device loads its own module); a host kernel runs on the calling thread.
struct LaunchOptions {
  std::optional<Device> device{};  // default: the stream's device, else the kernel's
  std::optional<Stream> stream{};  // default: the device's current stream
};

struct CompileOptions {
  // Where launches run; default: tx::default_device() at compile time.
  std::optional<Device> device{};
  // GPU arch for NVRTC; default: the device's ("sm_90a" on H100/H200).
  std::string arch{};
  bool debug_ir = false;  // print the IR after every lowering pass
  // GPU math through hardware approximations (see lowering::CudaOptions);
  // for kernels whose outputs have 16 bits or fewer.
  bool approx_math = false;
  // The checked host mode: launches run on the host with every access
  // bounds-checked, integer division by zero reported and a race detector
  // (docs/reliability.md); a launch that finds something raises a tx error.
  // Default: TX_CHECK=1 in the environment, for kernels that run on the host.
  std::optional<bool> checked{};
  // T::profile regions record per warp (docs/profiling.md); each launch's
  // records become Kernel::last_profile(). Off, the regions vanish and the
  // kernel is the code it would be without them. Default: TX_PROFILE=1.
  std::optional<bool> profile{};
  // CTAs per SM the GPU code is compiled for (__launch_bounds__(threads, n));
  // 0: unstated. ptxas then budgets registers for n CTAs, and -- what a
  // warp-specialized kernel wants -- each side of a setmaxnreg on its own
  // (unstated, it holds the whole kernel to 65536 / threads registers).
  int min_ctas_per_sm = 0;
};

class Kernel {
 public:
  Kernel() = default;

  const std::string& name() const;
  Device device() const;
  const PrimFunc& source() const;
  const PrimFunc& lowered() const;
  const lowering::LoweredKernel& info() const;

  std::string tirx() const;         // the kernel as written, in the seeds' script form
  std::string lowered_ir() const;   // after lowering ("Generated TIRx IR")
  std::string cuda_source() const;  // the CUDA given to NVRTC
  // PTX from NVRTC for `arch` (needs no GPU).
  std::string ptx(const std::string& arch = "sm_90a") const;
  bool checked() const;   // runs in the checked host mode
  bool profiled() const;  // compiled with profiling on (CompileOptions::profile)
  // What the last launch of a profiled kernel recorded (the launch has
  // completed: profiled GPU launches synchronize); empty before one.
  std::optional<KernelProfile> last_profile() const;
  // Made by Kernel::prebuilt (its IR is built when asked for).
  bool is_prebuilt() const;

  // One argument of a launch: a tensor for a T::match_buffer parameter, or a
  // number for a T::match_scalar one.
  class Arg {
   public:
    Arg() = default;
    Arg(const Tensor& t) : tensor_(&t) {}  // NOLINT: implicit by design
    template <class N>
    requires std::is_arithmetic_v<N> Arg(N v)  // NOLINT
        : is_int_(std::is_integral_v<N>),
          i_(static_cast<std::int64_t>(v)),
          f_(static_cast<double>(v)) {}
    const Tensor* tensor() const { return tensor_; }
    bool is_int() const { return is_int_; }
    std::int64_t as_int() const { return i_; }
    double as_double() const { return f_; }

   private:
    const Tensor* tensor_ = nullptr;
    bool is_int_ = false;
    std::int64_t i_ = 0;
    double f_ = 0;
  };

  // Runs the kernel on its device; arguments in parameter order (T::dim
  // extents are bound from the tensors' shapes, not passed). Errors name the
  // line of the call (`loc`, defaulted to the caller's). An Arg refers to its
  // tensor: the tensors must outlive the call.
  void launch(const std::vector<Arg>& args,
              std::source_location loc = std::source_location::current()) const;
  void launch(std::initializer_list<Arg> args,
              std::source_location loc = std::source_location::current()) const;
  void launch(const std::vector<Tensor>& args,
              std::source_location loc = std::source_location::current()) const;
  void launch(const Arg* args, std::size_t n, SourceLoc loc = {}) const;
  void launch(const Tensor* const* args, std::size_t n, SourceLoc loc = {}) const;
  // On the device and stream `where` names (several GPUs, a stream other
  // than the current one, a stream being captured into a CUDA graph).
  void launch(const std::vector<Arg>& args, const LaunchOptions& where,
              std::source_location loc = std::source_location::current()) const;
  void launch(const Arg* args, std::size_t n, const LaunchOptions& where, SourceLoc loc = {}) const;

  // The first argument of k(a, b, ...), which also records the caller's line
  // (a function with a parameter pack cannot default a trailing one).
  struct FirstArg {
    Arg arg;
    SourceLoc loc;
    FirstArg(const Tensor& t,  // NOLINT: implicit by design
             std::source_location l = std::source_location::current())
        : arg(t), loc(l) {}
    template <class N>
    requires std::is_arithmetic_v<N> FirstArg(
        N v, std::source_location l = std::source_location::current())  // NOLINT
        : arg(v), loc(l) {}
  };
  template <class... Ts>
  void operator()(const FirstArg& first, const Ts&... rest) const {
    const Arg args[] = {first.arg, Arg(rest)...};
    launch(args, 1 + sizeof...(Ts), first.loc);
  }
  void operator()(std::source_location loc = std::source_location::current()) const {
    launch(static_cast<const Arg*>(nullptr), 0, loc);
  }

  // Builds (or fetches from cache) the GPU binary now, for the kernel's
  // device; returns where it came from: "memory", "aot" (compiled when tx
  // was built), "prebuilt" (compiled ahead of time with its launch
  // description), "disk" or "nvrtc".
  std::string prepare_gpu() const;

  // A kernel compiled ahead of time, from its launch description and GPU
  // binary (runtime/prebuilt.hpp): launches on the GPU need nothing else.
  // `build` makes the full kernel -- its IR and CUDA, and what a host launch
  // runs -- the first time one of those is asked for.
  static Kernel prebuilt(lowering::LoweredKernel info, std::string kernel_name,
                         std::vector<char> cubin, Device device, std::function<Kernel()> build);

  struct State;

 private:
  const State& full_state(const char* method) const;
  static const State& full_of(const State& s);
  friend Kernel compile(const PrimFunc& f, const CompileOptions& opt);
  std::shared_ptr<State> state_;
};

// Lowers `f` and generates its CUDA; throws tx::Error for an invalid kernel.
Kernel compile(const PrimFunc& f, const CompileOptions& opt = {});

// Waits for every launched kernel; raises a tx error for a failed one.
void synchronize();

}  // namespace tx

namespace tx::runtime {

// The host fallback's interface; implemented with LLVM ORC in
// runtime/src/host/ when tx is built with LLVM.
// One launch of a host kernel: args[i] points at parameter i's element
// storage (a buffer) or value (a scalar; then the T::dim extents, as
// int32_t), the grid as evaluated for this launch, each buffer parameter's
// element count (for the checked mode's bounds), and the launch's line.
struct HostLaunch {
  void* const* args = nullptr;
  std::array<std::int64_t, 3> grid{1, 1, 1};
  const std::int64_t* elems = nullptr;
  SourceLoc loc;
  bool profiled = false;  // one CTA after another on the calling thread (its recorder)
};

class HostKernel {
 public:
  virtual ~HostKernel();
  virtual void run(const HostLaunch& launch) const = 0;
};

bool host_jit_available(std::string* why = nullptr);
// JIT-compiles k's host form (lowered for the host: k.host; otherwise, or in
// the other mode, it is made here). Cached in memory per process under the
// GPU cache's key function (kernel_cache_key over the host form's structural
// hash, with the host target and LLVM version in place of the GPU arch and
// NVRTC version, and the launch shape the host code is specialized for).
// `checked`: the checked host mode (bounds, division by zero, races; see
// docs/reliability.md), cached apart from the plain kernel.
// Also cached on disk, in the GPU cache's folder (TX_CACHE_DIR; disk_cache.hpp),
// as an object file per kernel keyed as above plus the host CPU's features
// and a fingerprint of the host code generator: a new process links it
// instead of compiling (docs/host_jit.md). TX_HOST_CACHE=0 bypasses both
// caches. `from`, if given, says where the kernel came from: "memory",
// "disk" or "jit".
std::shared_ptr<HostKernel> host_compile(const lowering::LoweredKernel& k, bool checked = false,
                                         std::string* from = nullptr);
// Forgets the kernels compiled in this process (they stay valid where they
// are held): the next host_compile of each goes to the disk cache or the JIT.
// For tests and benchmarks of the disk cache.
void host_cache_clear_memory();

}  // namespace tx::runtime
