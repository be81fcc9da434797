// How a profiled launch's records become a KernelProfile (profile.hpp): the
// GPU's per-warp record buffer, the host's recorder, and the sink a Kernel
// reads its last profile from.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "tx/lowering/lower.hpp"
#include "tx/runtime/profile.hpp"

namespace tx::runtime {

// Records per warp in the GPU's buffer; each warp's part is a 2-word header
// (its mark count, written only on overflow), then (timestamp, region |
// end << 16 | sm << 17) pairs: kProfileWarpWords u64s (lowering/lower.hpp).
using lowering::kProfileCapacity;
using lowering::kProfileWarpWords;
std::int64_t profile_buffer_words(const lowering::LoweredKernel& k, std::int64_t ctas);

// Where a Kernel's launches leave their profile (shared by the Kernel and
// its Executable).
struct ProfileSink {
  std::mutex mu;
  std::optional<KernelProfile> last;
  int launches = 0;
  // The profile of a launch: kept as the last, and written to
  // TX_PROFILE_DIR/<kernel>-<n>.{trace.json,svg} when that is set.
  void publish(KernelProfile p);
};

KernelProfile profile_from_gpu(const lowering::LoweredKernel& k, const std::string& kernel,
                               std::int64_t ctas, const std::vector<std::uint64_t>& buffer);

// The host's recorder: every mark of every thread, in the order they happen
// (the step); the first thread of a warp to reach a region is its recorder.
class HostProfileRecorder {
 public:
  void mark(std::int32_t region, bool end, std::int32_t thread, std::int64_t cta);
  KernelProfile profile(const lowering::LoweredKernel& k, const std::string& kernel,
                        std::int64_t ctas) const;

 private:
  struct Mark {
    std::int32_t region, thread;
    bool end;
    std::int64_t cta, step;
  };
  std::vector<Mark> marks_;
};
// The recorder of the host launch running on this thread (null: none).
HostProfileRecorder*& current_host_profile();

}  // namespace tx::runtime

// Called by JIT-compiled host kernels compiled with profiling on.
extern "C" void tx_host_profile_mark(std::int32_t region, std::int32_t end, std::int32_t thread,
                                     std::int32_t bx, std::int32_t by, std::int32_t bz,
                                     std::int64_t gx, std::int64_t gy);
