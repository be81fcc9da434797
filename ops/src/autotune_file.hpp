// autotune.txt, the remembered autotuning winners in the kernel cache folder:
// one "key = strategy threads num_per_thread" per line. Internal to tx_ops;
// declared here so that the file handling is testable without a GPU.
//
// The file is trusted like a cache entry: it is read only from a folder that
// DiskCache::open_dir() accepts, and only when it is a regular file owned by
// the cache's user and not writable by group or others; otherwise it is
// ignored with a warning. A malformed line is skipped with a warning. Updates
// hold an flock on autotune.txt.lock, rewrite the whole file under a
// temporary name and rename() it into place, so readers never see half a
// file and two processes tuning at once lose no line.
#pragma once

#include <optional>
#include <string>

#include "tx/ops/ops.hpp"
#include "tx/runtime/disk_cache.hpp"

namespace tx::ops::detail {

// The winner remembered for `key`; nothing when there is none or the file
// cannot be trusted. Never throws.
std::optional<Config> remembered_config(const runtime::DiskCache& cache, const std::string& key);

// Records `c` as the winner for `key`, replacing an earlier one. False (after
// a warning) when it was not written. Never throws.
bool remember_config(const runtime::DiskCache& cache, const std::string& key, const Config& c);

}  // namespace tx::ops::detail
