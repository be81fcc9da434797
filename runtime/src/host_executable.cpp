// The host Executable (executable.hpp): a kernel lowered for the host, run
// by the host JIT (runtime/src/host/, or a tx error in a build without
// LLVM). The JIT's function is compiled on the first launch -- the host
// JIT's own caches (keyed by the host form's structural hash; in memory and
// on disk) make a second kernel of the same structure free and one that
// another process compiled cheap -- and published with an atomic store.
#include <atomic>
#include <mutex>

#include "executable.hpp"
#include "profile_sink.hpp"

namespace tx::runtime {

namespace {

class HostExecutable final : public Executable {
 public:
  explicit HostExecutable(ExecutableSource src) : src_(std::move(src)) {}

  void run(const BoundLaunch& b, const Stream*) const override {
    const HostKernel* k = ready_.load(std::memory_order_acquire);
    if (!k) {
      prepare(b.device, b.loc);
      k = ready_.load(std::memory_order_acquire);
    }
    const lowering::LoweredKernel& info = *src_.info;
    if (!src_.profile || info.profile_regions.empty()) {
      k->run({b.ptrs, b.grid, b.elems, b.loc});
      return;
    }
    // Profiled: the CTAs run on this thread, which holds the recorder.
    HostProfileRecorder recorder;
    HostProfileRecorder*& current = current_host_profile();
    HostProfileRecorder* outer = current;
    current = &recorder;
    try {
      k->run({b.ptrs, b.grid, b.elems, b.loc, /*profiled=*/true});
    } catch (...) {
      current = outer;
      throw;
    }
    current = outer;
    src_.profile->publish(
        recorder.profile(info, src_.kernel_name, b.grid[0] * b.grid[1] * b.grid[2]));
  }

  std::string prepare(Device, SourceLoc loc) const override {
    std::lock_guard<std::mutex> lock(mu_);
    if (kernel_) return "memory";
    std::string why;
    if (!host_jit_available(&why))
      fail("launch " + src_.kernel_name, "", loc, "cannot run on the host: " + why);
    // A prebuilt kernel's launch description has no host form: the full
    // kernel's IR has.
    const lowering::LoweredKernel& info = src_.full ? *src_.full().info : *src_.info;
    std::string from;
    kernel_ = host_compile(info, src_.checked, &from);
    ready_.store(kernel_.get(), std::memory_order_release);
    return from;
  }

 private:
  ExecutableSource src_;
  mutable std::mutex mu_;
  mutable std::shared_ptr<HostKernel> kernel_;
  mutable std::atomic<const HostKernel*> ready_{nullptr};
};

}  // namespace

std::unique_ptr<Executable> make_host_executable(ExecutableSource src) {
  return std::make_unique<HostExecutable>(std::move(src));
}

}  // namespace tx::runtime
