#include "tx/runtime/cubin_cache.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>

#include "tx/runtime/nvrtc.hpp"

namespace tx::runtime {

std::string aot_key(const std::string& cuda, const std::string& arch) {
  return kernel_cache_key(cuda, nvrtc_default_options(arch), arch, "aot");
}

std::string aot_dir() {
  if (const char* d = std::getenv("TX_AOT_DIR")) return d;
#ifdef TX_AOT_DEFAULT_DIR
  return TX_AOT_DEFAULT_DIR;
#else
  return "";
#endif
}

const DiskCache* aot_cache() {
  // Read once: the folder and whether it is trusted (owned by this user or
  // by root, as an installed package is).
  static const std::optional<DiskCache> cache = []() -> std::optional<DiskCache> {
    std::string dir = aot_dir();
    struct stat st {};
    if (dir.empty() || ::stat(dir.c_str(), &st) != 0) return std::nullopt;
    if (st.st_uid != 0 && st.st_uid != ::geteuid()) return std::nullopt;
    return DiskCache(dir, st.st_uid);
  }();
  return cache ? &*cache : nullptr;
}

std::optional<std::vector<char>> aot_cubin(const std::string& cuda, const std::string& arch) {
  const DiskCache* cache = aot_cache();
  if (!cache) return std::nullopt;
  return cache->load(aot_key(cuda, arch));
}

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
