// The GPU binary of a kernel's CUDA source for one architecture, through the
// disk cache: a valid entry is returned as is, anything else (a miss, a
// damaged or foreign entry, an unwritable cache) compiles with NVRTC and
// stores the result when it can. Needs no GPU; Kernel::prepare_gpu uses it,
// and tests run it from several processes at once.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "tx/runtime/disk_cache.hpp"

namespace tx::runtime {

struct CachedCubin {
  std::vector<char> cubin;
  std::string key;        // the disk cache key (kernel_cache_key)
  bool from_disk = false; // false: compiled by NVRTC in this call
};

// `skip_disk` compiles even when the cache holds an entry (and replaces it):
// the caller found the cached binary unusable (the driver refused it).
CachedCubin cubin_for(const std::string& cuda, const std::string& kernel_name,
                      const std::string& arch, const DiskCache& cache = DiskCache::instance(),
                      bool skip_disk = false);

// "13.0": the NVRTC version that goes into the cache key.
std::string nvrtc_version_string();

// Ahead-of-time kernels: the op library's shape-generic kernels compiled when
// tx is built (tx_aot_kernels, for TX_AOT_ARCHS), so that a fresh process
// runs them without NVRTC -- as a framework ships its kernels. Looked up by
// the CUDA source and the arch (not the NVRTC version: a cubin is a finished
// binary; one the driver refuses is recompiled, as a cache entry would be).
// The folder: TX_AOT_DIR, else the build's aot-kernels folder; absent or not
// trusted, there are no AOT kernels (everything still JIT-compiles).
std::string aot_key(const std::string& cuda, const std::string& arch);
std::string aot_dir();
std::optional<std::vector<char>> aot_cubin(const std::string& cuda, const std::string& arch);
// The ahead-of-time folder as a cache (read once), or null.
const DiskCache* aot_cache();

}  // namespace tx::runtime
