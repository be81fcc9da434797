#include "tx/runtime/cubin_cache.hpp"

#include "tx/runtime/nvrtc.hpp"

namespace tx::runtime {

std::string nvrtc_version_string() {
  auto [maj, min] = nvrtc_version();
  return std::to_string(maj) + "." + std::to_string(min);
}

CachedCubin cubin_for(const std::string& cuda, const std::string& kernel_name,
                      const std::string& arch, const DiskCache& cache, bool skip_disk) {
  CachedCubin r;
  const std::vector<std::string> options = nvrtc_default_options(arch);
  r.key = kernel_cache_key(cuda, options, arch, nvrtc_version_string());
  if (!skip_disk) {
    if (std::optional<std::vector<char>> hit = cache.load(r.key)) {
      r.cubin = std::move(*hit);
      r.from_disk = true;
      return r;
    }
  }
  r.cubin = nvrtc_compile(cuda, kernel_name + ".cu", arch, NvrtcTarget::cubin).cubin;
  // A failed store has already warned; the kernel runs uncached.
  cache.store(r.key, r.cubin);
  return r;
}

}  // namespace tx::runtime
