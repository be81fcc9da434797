// The on-disk cache of compiled kernels.
//
// Location: $TX_CACHE_DIR, else $XDG_CACHE_HOME/tx, else ~/.cache/tx.
// Disabled with TX_CACHE=0 (or off/false). The folder is created 0700.
// A folder that already exists is used only when it is a directory (a
// symbolic link to one is followed) owned by this user and not writable by
// group or others; otherwise tx warns once, naming the folder and the
// reason, and runs uncached. tx never changes the mode of a folder it did
// not create: TX_CACHE_DIR may name a shared folder whose permissions others
// rely on, so the warning says how to fix it instead.
// One file per key: a header (magic, format version, tx version, key,
// payload size, SHA-256 of the payload) then the payload. Writes go to a
// unique temporary name then rename(), so readers never see half a file.
// A read that finds anything wrong (short file, bad magic, other version,
// other key, checksum mismatch) returns nothing and removes the bad entry
// when it can: the caller recompiles. An entry that is not a regular file
// owned by this user, or is writable by group or others, is ignored, not
// removed. No method throws; problems become tx warnings.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tx::runtime {

std::array<std::uint8_t, 32> sha256(std::string_view data);
std::string sha256_hex(std::string_view data);

// Writes all of `data` to `fd`, retrying short writes and EINTR; false on
// any other failure (errno says why). The cache and autotune.txt use it.
bool write_all(int fd, std::string_view data);

class DiskCache {
 public:
  // The process-wide cache configured from the environment (read once).
  static DiskCache& instance();
  // The folder instance() uses, from the environment as it is now: empty
  // (disabled) for TX_CACHE=0/off/false/no, else TX_CACHE_DIR (set but empty:
  // disabled), else $XDG_CACHE_HOME/tx, else ~/.cache/tx.
  static std::string dir_from_environment();
  // A cache in an explicit folder (tests); empty dir means disabled.
  explicit DiskCache(std::string dir);
  // Trusting the files of `owner` instead of the effective uid's: a seam
  // that lets tests exercise the other-user checks without root.
  DiskCache(std::string dir, uid_t owner);

  bool enabled() const { return !dir_.empty(); }
  const std::string& dir() const { return dir_; }
  uid_t owner() const { return owner_; }

  // The folder opened for openat() (O_DIRECTORY, close-on-exec; the caller
  // closes it), created first (0700) when `create`. -1 when the cache is
  // disabled, the folder is missing (quietly, unless `create`), or it fails
  // untrusted_reason(): then a warning names the folder and the reason, once
  // per folder and reason in the process. Checking the opened descriptor
  // leaves no window between the check and the use.
  int open_dir(bool create) const;

  // Why a folder (`directory`) or file with status `st` must not be trusted
  // by `owner`; empty when it may be: of the expected type, owned by `owner`,
  // not writable by group or others.
  static std::string untrusted_reason(const struct stat& st, uid_t owner, bool directory);

  std::optional<std::vector<char>> load(const std::string& key) const;
  // Returns false (after a warning) when the entry could not be written.
  bool store(const std::string& key, const std::vector<char>& payload) const;
  // Path of the file for a key (whether or not it exists).
  std::string path_for(const std::string& key) const;

 private:
  std::string dir_;
  uid_t owner_;
};

// Hex SHA-256 over everything that determines a binary: the source, the
// options, the target arch, the NVRTC version and tx's IR/codegen version.
std::string kernel_cache_key(const std::string& source, const std::vector<std::string>& options,
                             const std::string& arch, const std::string& compiler_version);

// Bumped whenever lowering or code generation changes what a kernel means.
inline constexpr const char* kIRVersion = "tx-ir-1";

}  // namespace tx::runtime
