// The on-disk cache of compiled kernels: a private folder, atomic writes and
// verified reads, all relative to one checked folder descriptor.
// disk_cache.hpp describes the policy; the entry format is
//
//   "TXCACHE1" | u32 format | str tx version | str IR version | str key |
//   u64 payload size | 32-byte SHA-256 of the payload | payload
//
// where str is a u32 length then the bytes, and integers are little-endian.
#include "tx/runtime/disk_cache.hpp"

#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>
#include <set>

#include "tx/error.hpp"

#ifndef TX_VERSION
#define TX_VERSION "0"
#endif

namespace tx::runtime {

namespace {

constexpr char kMagic[8] = {'T', 'X', 'C', 'A', 'C', 'H', 'E', '1'};
constexpr std::uint32_t kFormatVersion = 1;

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

bool write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t w = ::write(fd, data.data(), data.size());
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    data.remove_prefix(static_cast<std::size_t>(w));
  }
  return true;
}

std::string DiskCache::dir_from_environment() {
  if (const char* v = std::getenv("TX_CACHE")) {
    std::string s = lower(v);
    if (s == "0" || s == "off" || s == "false" || s == "no") return {};
  }
  if (const char* d = std::getenv("TX_CACHE_DIR")) return d;  // set but empty: disabled
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/tx";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/tx";
  return {};
}

namespace {

// mkdir -p. Parents that do not exist get the usual 0755; the cache folder
// itself is 0700 because it holds code this process will execute. A folder
// that exists already is left as it is: open_dir() decides whether to trust it.
bool make_dirs(const std::string& dir, std::string* error) {
  std::size_t pos = 0;
  while (true) {
    std::size_t slash = dir.find('/', pos);
    std::string prefix = dir.substr(0, slash);
    const bool last = slash == std::string::npos;
    if (!prefix.empty()) {
      if (mkdir(prefix.c_str(), last ? 0700 : 0755) == 0) {
        // umask may have taken bits away; the cache folder must be exactly 0700.
        if (last) chmod(prefix.c_str(), 0700);
      } else if (errno != EEXIST) {
        *error = "mkdir " + prefix + ": " + std::strerror(errno);
        return false;
      }
    }
    if (last) break;
    pos = slash + 1;
  }
  return true;
}

// Closes a descriptor at the end of a scope.
struct Fd {
  int fd = -1;
  explicit Fd(int f) : fd(f) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// A warning about the folder is given once per folder and reason: every
// kernel of a process would otherwise repeat it.
void warn_once(const std::string& dir, const std::string& message) {
  static std::mutex mu;
  static std::set<std::string>* seen = new std::set<std::string>;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (!seen->insert(dir + '\0' + message).second) return;
  }
  warn(message);
}

std::string octal_mode(mode_t m) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%04o", static_cast<unsigned>(m & 07777));
  return buf;
}

void put_u32(std::string& s, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) s += static_cast<char>(v >> (8 * i));
}
void put_u64(std::string& s, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) s += static_cast<char>(v >> (8 * i));
}
void put_str(std::string& s, std::string_view v) {
  put_u32(s, static_cast<std::uint32_t>(v.size()));
  s += v;
}

// Bounds-checked reads over a whole entry; after the first failure every
// read fails, so a parse can be checked once at the end.
struct Reader {
  std::string_view data;
  std::size_t pos = 0;
  bool ok = true;

  std::string_view take(std::size_t n) {
    if (!ok || n > data.size() - pos) {
      ok = false;
      return {};
    }
    std::string_view v = data.substr(pos, n);
    pos += n;
    return v;
  }
  std::uint64_t uint(int bytes) {
    std::string_view b = take(static_cast<std::size_t>(bytes));
    std::uint64_t v = 0;
    for (std::size_t i = 0; i < b.size(); ++i)
      v |= std::uint64_t{static_cast<unsigned char>(b[i])} << (8 * i);
    return v;
  }
  std::string_view str() { return take(static_cast<std::size_t>(uint(4))); }
  std::size_t left() const { return data.size() - pos; }
};

// Reads up to `size` bytes; a short result shows up as a truncated entry.
bool read_all(int fd, std::size_t size, std::string* out) {
  out->resize(size);
  std::size_t done = 0;
  while (done < size) {
    ssize_t r = ::read(fd, out->data() + done, size - done);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return false;
    if (r == 0) break;
    done += static_cast<std::size_t>(r);
  }
  out->resize(done);
  return true;
}

// Per thread, so concurrent stores need no lock; seeded so that two
// processes with the same pid (containers) still pick different names.
std::uint64_t random_suffix() {
  thread_local std::mt19937_64 rng([] {
    std::uint64_t seed =
        static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
    try {
      seed ^= std::uint64_t{std::random_device{}()} << 32;
    } catch (...) {
      // No entropy source: the clock and the pid in the name suffice.
    }
    return seed;
  }());
  return rng();
}

// Keys are normally hex digests; anything else (a path separator, a long
// or empty key) is hashed so that it cannot name a file outside the folder.
bool plain_file_name(const std::string& key) {
  if (key.empty() || key.size() > 128 || key[0] == '.') return false;
  for (unsigned char c : key)
    if (!std::isalnum(c) && c != '-' && c != '_' && c != '.') return false;
  return true;
}

// The file name of a key inside the folder.
std::string file_name(const std::string& key) {
  return (plain_file_name(key) ? key : sha256_hex(key)) + ".txbin";
}

}  // namespace

DiskCache& DiskCache::instance() {
  static DiskCache* cache = new DiskCache(dir_from_environment());
  return *cache;
}

DiskCache::DiskCache(std::string dir) : DiskCache(std::move(dir), geteuid()) {}

DiskCache::DiskCache(std::string dir, uid_t owner) : dir_(std::move(dir)), owner_(owner) {
  while (dir_.size() > 1 && dir_.back() == '/') dir_.pop_back();
}

std::string DiskCache::path_for(const std::string& key) const {
  return dir_ + "/" + file_name(key);
}

std::string DiskCache::untrusted_reason(const struct stat& st, uid_t owner, bool directory) {
  if (directory && !S_ISDIR(st.st_mode)) return "not a directory";
  if (!directory && !S_ISREG(st.st_mode)) return "not a regular file";
  if (st.st_uid != owner)
    return "owned by uid " + std::to_string(st.st_uid) + ", not by uid " + std::to_string(owner);
  if (st.st_mode & (S_IWGRP | S_IWOTH))
    return std::string("writable by ") + ((st.st_mode & S_IWOTH) ? "others" : "its group") +
           " (mode " + octal_mode(st.st_mode) + ")";
  return {};
}

int DiskCache::open_dir(bool create) const {
  if (!enabled()) return -1;
  try {
    std::string why;
    if (create && !make_dirs(dir_, &why)) {
      warn_once(dir_,
                "kernel cache: cannot create " + dir_ + " (" + why + "); kernels run uncached");
      return -1;
    }
    // Follows a symbolic link (a cache on another disk is a common set-up);
    // what is checked is the folder actually opened.
    int fd = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
      if (errno == ENOENT && !create) return -1;  // no cache yet: a miss
      warn_once(dir_, "kernel cache: cannot open " + dir_ + " (" + std::strerror(errno) +
                          "); kernels run uncached");
      return -1;
    }
    struct stat st {};
    std::string problem = fstat(fd, &st) != 0 ? std::string("fstat failed: ") + std::strerror(errno)
                                              : untrusted_reason(st, owner_, true);
    if (problem.empty()) return fd;
    ::close(fd);
    struct stat link {};
    if (lstat(dir_.c_str(), &link) == 0 && S_ISLNK(link.st_mode)) {
      char target[PATH_MAX];
      ssize_t n = readlink(dir_.c_str(), target, sizeof target - 1);
      problem = "a symbolic link to " +
                (n > 0 ? std::string(target, static_cast<std::size_t>(n)) : std::string("?")) +
                ", which is " + problem;
    }
    std::string fix;
    if (S_ISDIR(st.st_mode) && st.st_uid == owner_) fix = " (chmod 700 " + dir_ + " to use it)";
    warn_once(dir_, "kernel cache: not using " + dir_ + ": " + problem +
                        "; another user could plant code there, so kernels run uncached" + fix);
    return -1;
  } catch (...) {
    return -1;
  }
}

std::optional<std::vector<char>> DiskCache::load(const std::string& key) const {
  if (!enabled()) return std::nullopt;
  try {
    Fd dir(open_dir(false));
    if (dir.fd < 0) return std::nullopt;
    const std::string name = file_name(key), path = dir_ + "/" + name;
    // The entry is code to run: no symlinks, only the user's own files.
    int fd = ::openat(dir.fd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
      if (errno != ENOENT)
        warn("kernel cache: cannot open " + path + ": " + std::strerror(errno) + "; recompiling");
      return std::nullopt;
    }
    struct stat st {};
    std::string data, problem;
    if (fstat(fd, &st) != 0)
      problem = std::string("fstat failed: ") + std::strerror(errno);
    else if (std::string why = untrusted_reason(st, owner_, false); !why.empty())
      problem = why;
    else if (!read_all(fd, static_cast<std::size_t>(st.st_size), &data))
      problem = std::string("read failed: ") + std::strerror(errno);
    ::close(fd);
    if (!problem.empty()) {
      warn("kernel cache: ignoring " + path + " (" + problem + "); recompiling");
      return std::nullopt;
    }

    // Stale entries (another tx, another format) are expected after an
    // upgrade and dropped quietly; damaged ones are worth a warning.
    auto drop = [&](const char* damage) -> std::optional<std::vector<char>> {
      if (damage)
        warn("kernel cache: " + path + " is damaged (" + damage + "); removed it, recompiling");
      ::unlinkat(dir.fd, name.c_str(), 0);
      return std::nullopt;
    };
    Reader r{data};
    if (r.take(sizeof kMagic) != std::string_view(kMagic, sizeof kMagic))
      return drop(r.ok ? "bad magic" : "truncated header");
    const std::uint64_t format = r.uint(4);
    if (!r.ok) return drop("truncated header");
    if (format != kFormatVersion) return drop(nullptr);
    const std::string_view tx_version = r.str(), ir_version = r.str(), entry_key = r.str();
    const std::uint64_t size = r.uint(8);
    const std::string_view sum = r.take(32);
    if (!r.ok) return drop("truncated header");
    if (tx_version != TX_VERSION || ir_version != kIRVersion || entry_key != key)
      return drop(nullptr);
    if (size != r.left())
      return drop(size > r.left() ? "truncated payload" : "payload longer than recorded");
    const std::string_view payload = r.take(size);
    const auto digest = sha256(payload);
    if (std::memcmp(digest.data(), sum.data(), digest.size()) != 0)
      return drop("checksum mismatch");
    return std::vector<char>(payload.begin(), payload.end());
  } catch (...) {
    // bad_alloc, or a warning handler that throws: the contract is "no throw".
    return std::nullopt;
  }
}

bool DiskCache::store(const std::string& key, const std::vector<char>& payload) const {
  if (!enabled()) return false;
  try {
    Fd dir(open_dir(true));  // has warned when it fails
    if (dir.fd < 0) return false;
    const std::string_view body(payload.data(), payload.size());
    std::string entry(kMagic, sizeof kMagic);
    put_u32(entry, kFormatVersion);
    put_str(entry, TX_VERSION);
    put_str(entry, kIRVersion);
    put_str(entry, key);
    put_u64(entry, payload.size());
    const auto digest = sha256(body);
    entry.append(reinterpret_cast<const char*>(digest.data()), digest.size());
    entry.append(body);

    // Written under a unique name then renamed: a reader sees the old entry,
    // no entry, or the whole new one, and concurrent writers do not collide.
    const std::string name = file_name(key), final_path = dir_ + "/" + name;
    const std::string tmp_name =
        name + ".tmp." + std::to_string(getpid()) + "." + std::to_string(random_suffix());
    const std::string tmp = dir_ + "/" + tmp_name;
    int fd = ::openat(dir.fd, tmp_name.c_str(),
                      O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
      warn("kernel cache: cannot create " + tmp + ": " + std::strerror(errno) +
           "; kernels stay uncached");
      return false;
    }
    const bool written = write_all(fd, entry);
    const int write_errno = errno;
    if (::close(fd) != 0 || !written) {
      ::unlinkat(dir.fd, tmp_name.c_str(), 0);
      warn("kernel cache: cannot write " + tmp + ": " +
           std::strerror(written ? errno : write_errno) + "; kernels stay uncached");
      return false;
    }
    if (::renameat(dir.fd, tmp_name.c_str(), dir.fd, name.c_str()) != 0) {
      const int e = errno;
      ::unlinkat(dir.fd, tmp_name.c_str(), 0);
      warn("kernel cache: cannot rename " + tmp + " to " + final_path + ": " + std::strerror(e));
      return false;
    }
    return true;
  } catch (...) {
    return false;
  }
}

std::string kernel_cache_key(const std::string& source, const std::vector<std::string>& options,
                             const std::string& arch, const std::string& compiler_version) {
  // Length-prefixed fields: moving a character from one field to the next
  // must change the key.
  std::string s;
  put_str(s, kIRVersion);
  put_str(s, TX_VERSION);
  put_str(s, compiler_version);
  put_str(s, arch);
  put_u32(s, static_cast<std::uint32_t>(options.size()));
  for (const std::string& o : options) put_str(s, o);
  put_str(s, source);
  return sha256_hex(s);
}

}  // namespace tx::runtime
