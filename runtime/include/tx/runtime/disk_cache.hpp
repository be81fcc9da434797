// The on-disk cache of compiled kernels.
//
// Location: $TX_CACHE_DIR, else $XDG_CACHE_HOME/tx, else ~/.cache/tx.
// Disabled with TX_CACHE=0 (or off/false). The folder is created 0700.
// One file per key: a header (magic, format version, tx version, key,
// payload size, SHA-256 of the payload) then the payload. Writes go to a
// unique temporary name then rename(), so readers never see half a file.
// A read that finds anything wrong (short file, bad magic, other version,
// other key, checksum mismatch, file owned by another user) returns nothing
// and removes the bad entry when it can: the caller recompiles. No method
// throws; problems become tx warnings.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tx::runtime {

std::array<std::uint8_t, 32> sha256(std::string_view data);
std::string sha256_hex(std::string_view data);

class DiskCache {
 public:
  // The process-wide cache configured from the environment (read once).
  static DiskCache& instance();
  // A cache in an explicit folder (tests); empty dir means disabled.
  explicit DiskCache(std::string dir);

  bool enabled() const { return !dir_.empty(); }
  const std::string& dir() const { return dir_; }

  std::optional<std::vector<char>> load(const std::string& key) const;
  // Returns false (after a warning) when the entry could not be written.
  bool store(const std::string& key, const std::vector<char>& payload) const;
  // Path of the file for a key (whether or not it exists).
  std::string path_for(const std::string& key) const;

 private:
  std::string dir_;
};

// Hex SHA-256 over everything that determines a binary: the source, the
// options, the target arch, the NVRTC version and tx's IR/codegen version.
std::string kernel_cache_key(const std::string& source, const std::vector<std::string>& options,
                             const std::string& arch, const std::string& compiler_version);

// Bumped whenever lowering or code generation changes what a kernel means.
inline constexpr const char* kIRVersion = "tx-ir-1";

}  // namespace tx::runtime
