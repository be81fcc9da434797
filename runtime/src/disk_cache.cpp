// The disk cache of compiled kernels: private folder, atomic writes,
// verified reads. See disk_cache.hpp for the entry format and the policy.
#include "tx/runtime/disk_cache.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>

#include "tx/error.hpp"

#ifndef TX_VERSION
#define TX_VERSION "0"
#endif

namespace tx::runtime {

namespace {

constexpr char kMagic[8] = {'T', 'X', 'C', 'A', 'C', 'H', 'E', '1'};
constexpr std::uint32_t kFormat = 1;

bool env_disables(const char* v) {
  if (!v) return false;
  std::string s = v;
  return s == "0" || s == "off" || s == "OFF" || s == "false" || s == "no";
}

std::string default_dir() {
  if (env_disables(std::getenv("TX_CACHE"))) return {};
  if (const char* d = std::getenv("TX_CACHE_DIR")) return d;  // empty: disabled
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/tx";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/tx";
  return {};
}

// mkdir -p; the last component private to the user.
bool make_dirs(const std::string& dir) {
  std::string cur;
  std::stringstream ss(dir);
  std::string part;
  if (!dir.empty() && dir[0] == '/') cur = "/";
  std::vector<std::string> parts;
  while (std::getline(ss, part, '/'))
    if (!part.empty()) parts.push_back(part);
  for (std::size_t i = 0; i < parts.size(); ++i) {
    cur += (cur.empty() || cur.back() == '/' ? "" : "/") + parts[i];
    bool last = i + 1 == parts.size();
    if (mkdir(cur.c_str(), last ? 0700 : 0755) != 0 && errno != EEXIST) return false;
  }
  struct stat st {};
  return stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

void put_u32(std::string& s, std::uint32_t v) { s.append(reinterpret_cast<const char*>(&v), 4); }
void put_u64(std::string& s, std::uint64_t v) { s.append(reinterpret_cast<const char*>(&v), 8); }
void put_str(std::string& s, const std::string& v) {
  put_u32(s, static_cast<std::uint32_t>(v.size()));
  s += v;
}

struct Reader {
  const std::string& d;
  std::size_t p = 0;
  bool ok = true;
  bool take(void* out, std::size_t n) {
    if (!ok || p + n > d.size()) return ok = false;
    std::memcpy(out, d.data() + p, n);
    p += n;
    return true;
  }
  std::string str() {
    std::uint32_t n = 0;
    if (!take(&n, 4) || n > d.size() - p) {
      ok = false;
      return {};
    }
    std::string s = d.substr(p, n);
    p += n;
    return s;
  }
};

}  // namespace

DiskCache& DiskCache::instance() {
  static DiskCache* c = new DiskCache(default_dir());
  return *c;
}

DiskCache::DiskCache(std::string dir) : dir_(std::move(dir)) {}

std::string DiskCache::path_for(const std::string& key) const { return dir_ + "/" + key + ".txbin"; }

std::optional<std::vector<char>> DiskCache::load(const std::string& key) const {
  if (!enabled()) return std::nullopt;
  std::string path = path_for(key);
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return std::nullopt;
  if (st.st_uid != geteuid()) {
    warn("kernel cache entry " + path + " belongs to another user; not loading it");
    return std::nullopt;
  }
  std::ifstream in(path, std::ios::binary);
  std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto reject = [&](const std::string& why) -> std::optional<std::vector<char>> {
    warn("kernel cache entry " + path + " is unusable (" + why + "); recompiling");
    std::remove(path.c_str());
    return std::nullopt;
  };
  Reader r{data};
  char magic[8];
  std::uint32_t format = 0;
  if (!r.take(magic, 8) || std::memcmp(magic, kMagic, 8) != 0) return reject("bad magic");
  if (!r.take(&format, 4) || format != kFormat) return reject("other format version");
  std::string version = r.str(), ir = r.str(), k = r.str();
  if (!r.ok) return reject("truncated header");
  if (version != TX_VERSION || ir != kIRVersion) return reject("written by another tx version");
  if (k != key) return reject("key mismatch");
  std::uint64_t size = 0;
  std::array<std::uint8_t, 32> sum{};
  if (!r.take(&size, 8) || !r.take(sum.data(), 32)) return reject("truncated header");
  if (data.size() - r.p != size) return reject("truncated or oversized payload");
  std::string_view payload(data.data() + r.p, size);
  if (sha256(payload) != sum) return reject("checksum mismatch");
  return std::vector<char>(payload.begin(), payload.end());
}

bool DiskCache::store(const std::string& key, const std::vector<char>& payload) const {
  if (!enabled()) return false;
  if (!make_dirs(dir_)) {
    warn("cannot create the kernel cache folder " + dir_ + ": " + std::strerror(errno) +
         "; running uncached");
    return false;
  }
  std::string blob(kMagic, 8);
  put_u32(blob, kFormat);
  put_str(blob, TX_VERSION);
  put_str(blob, kIRVersion);
  put_str(blob, key);
  put_u64(blob, payload.size());
  auto sum = sha256(std::string_view(payload.data(), payload.size()));
  blob.append(reinterpret_cast<const char*>(sum.data()), 32);
  blob.append(payload.data(), payload.size());

  static std::mt19937_64 rng{std::random_device{}()};
  std::string final_path = path_for(key);
  std::string tmp = final_path + ".tmp." + std::to_string(getpid()) + "." + std::to_string(rng());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600);
  if (fd < 0) {
    warn("cannot write the kernel cache entry " + tmp + ": " + std::strerror(errno) + "; running uncached");
    return false;
  }
  std::size_t done = 0;
  while (done < blob.size()) {
    ssize_t w = ::write(fd, blob.data() + done, blob.size() - done);
    if (w <= 0) {
      int e = errno;
      ::close(fd);
      std::remove(tmp.c_str());
      warn("cannot write the kernel cache entry " + tmp + ": " + std::strerror(e) + "; running uncached");
      return false;
    }
    done += static_cast<std::size_t>(w);
  }
  if (::close(fd) != 0 || std::rename(tmp.c_str(), final_path.c_str()) != 0) {
    std::remove(tmp.c_str());
    warn("cannot publish the kernel cache entry " + final_path + "; running uncached");
    return false;
  }
  return true;
}

std::string kernel_cache_key(const std::string& source, const std::vector<std::string>& options,
                             const std::string& arch, const std::string& compiler_version) {
  std::string s;
  put_str(s, kIRVersion);
  put_str(s, TX_VERSION);
  put_str(s, compiler_version);
  put_str(s, arch);
  put_u32(s, static_cast<std::uint32_t>(options.size()));
  for (const auto& o : options) put_str(s, o);
  put_str(s, source);
  return sha256_hex(s);
}

}  // namespace tx::runtime
