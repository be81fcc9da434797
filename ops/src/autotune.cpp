// Opt-in autotuning: time strategy x threads x num_per_thread on the GPU for
// one (op, dtype, shape class), show progress, and remember the winner per
// GPU in the disk cache folder (autotune.txt; autotune_file.hpp describes the
// file and how it is trusted and updated), so the next process skips the
// search.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <sstream>
#include <utility>

#include "autotune_file.hpp"
#include "ops_internal.hpp"
#include "tx/ops/broadcast.hpp"
#include "tx/runtime/cuda_driver.hpp"
#include "tx/runtime/disk_cache.hpp"

namespace tx::ops::detail {

namespace {

constexpr const char* kFile = "autotune.txt";
constexpr const char* kLock = "autotune.txt.lock";
// Far more than any real set of winners; a bigger file is not read.
constexpr std::size_t kMaxFileBytes = std::size_t{1} << 20;

// Shapes that tune alike: log2 of the element count, and the coalesced
// broadcast pattern (which operands are contiguous / broadcast innermost).
std::string shape_class(const std::vector<std::vector<std::int64_t>>& shapes) {
  std::ostringstream k;
  Coalesced c = coalesce_broadcast(shapes);
  std::int64_t n = 1;
  for (auto e : c.out_shape) n *= e;
  int lg = 0;
  while ((std::int64_t{1} << (lg + 1)) <= n) ++lg;
  k << "n2^" << lg << "_r" << c.shape.size();
  for (const auto& st : c.strides) k << "_" << (st.empty() ? 0 : st.back());
  if (!c.shape.empty()) k << "_i" << (c.shape.back() % 64 == 0 ? 64 : c.shape.back() % 64);
  return k.str();
}

std::string encode(const Config& c) {
  return std::string(strategy_name(*c.strategy)) + " " + std::to_string(c.threads) + " " +
         std::to_string(c.num_per_thread);
}

// "strategy threads num_per_thread", exactly, with the limits resolve()
// enforces; otherwise nothing and `why`.
std::optional<Config> decode(const std::string& text, std::string* why) {
  std::istringstream in(text);
  std::vector<std::string> fields;
  for (std::string f; in >> f;) fields.push_back(f);
  if (fields.size() != 3) {
    *why = "expected 'strategy threads num_per_thread', got " + std::to_string(fields.size()) +
           " fields";
    return std::nullopt;
  }
  Config c;
  for (Strategy s : {Strategy::direct, Strategy::explicit_parallel, Strategy::register_copy})
    if (fields[0] == strategy_name(s)) c.strategy = s;
  if (!c.strategy) {
    *why = "unknown strategy '" + fields[0] + "'";
    return std::nullopt;
  }
  auto number = [](const std::string& f, int* v) {
    auto [end, ec] = std::from_chars(f.data(), f.data() + f.size(), *v);
    return ec == std::errc() && end == f.data() + f.size();
  };
  if (!number(fields[1], &c.threads) || c.threads < 32 || c.threads > 1024 || c.threads % 32 != 0) {
    *why = "threads '" + fields[1] + "' is not a multiple of 32 in [32, 1024]";
    return std::nullopt;
  }
  if (!number(fields[2], &c.num_per_thread) || c.num_per_thread < 1 || c.num_per_thread > 64 ||
      (c.num_per_thread & (c.num_per_thread - 1)) != 0) {
    *why = "num_per_thread '" + fields[2] + "' is not a power of two <= 64";
    return std::nullopt;
  }
  return c;
}

struct Fd {
  int fd = -1;
  explicit Fd(int f) : fd(f) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// What autotune.txt holds: the winners in file order (one per key, the last
// line for a key winning) and how many lines were malformed.
struct Table {
  std::vector<std::pair<std::string, Config>> winners;
  std::size_t malformed = 0;

  void set(const std::string& key, const Config& c) {
    for (auto& [k, v] : winners)
      if (k == key) {
        v = c;
        return;
      }
    winners.emplace_back(key, c);
  }
};

// Reads autotune.txt from the open cache folder `dir`. False (after a
// warning) when the file exists but must not be trusted; a missing file is
// an empty table. Malformed lines are skipped, with a warning when `loud`.
bool read_table(int dir, const runtime::DiskCache& cache, bool loud, Table* table) {
  const std::string path = cache.dir() + "/" + kFile;
  Fd fd(::openat(dir, kFile, O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (fd.fd < 0) {
    if (errno == ENOENT) return true;
    warn("autotune: ignoring " + path + " (" +
         (errno == ELOOP ? std::string("a symbolic link") : std::strerror(errno)) +
         "); kernels use their defaults until tuned again");
    return false;
  }
  struct stat st {};
  std::string problem = fstat(fd.fd, &st) != 0
                            ? std::string("fstat failed: ") + std::strerror(errno)
                            : runtime::DiskCache::untrusted_reason(st, cache.owner(), false);
  if (!problem.empty()) {
    warn("autotune: ignoring " + path + " (" + problem + "); remembered winners are not used");
    return false;
  }
  if (static_cast<std::size_t>(st.st_size) > kMaxFileBytes) {
    if (loud)
      warn("autotune: ignoring the contents of " + path + " (" + std::to_string(st.st_size) +
           " bytes, more than any real set of winners)");
    table->malformed = 1;
    return true;
  }
  std::string data(static_cast<std::size_t>(st.st_size), '\0');
  std::size_t done = 0;
  while (done < data.size()) {
    ssize_t r = ::read(fd.fd, data.data() + done, data.size() - done);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    done += static_cast<std::size_t>(r);
  }
  data.resize(done);

  std::size_t line_no = 0, pos = 0;
  while (pos < data.size()) {
    ++line_no;
    const std::size_t nl = data.find('\n', pos);
    const std::string line = data.substr(pos, nl == std::string::npos ? nl : nl - pos);
    pos = nl == std::string::npos ? data.size() : nl + 1;
    if (line.empty() && nl != std::string::npos) continue;  // a blank line is harmless
    std::string why;
    std::optional<Config> c;
    const std::size_t eq = line.find(" = ");
    if (nl == std::string::npos)
      why = "no end of line: a cut-off write?";
    else if (eq == std::string::npos || eq == 0)
      why = "not 'key = strategy threads num_per_thread'";
    else
      c = decode(line.substr(eq + 3), &why);
    if (c) {
      table->set(line.substr(0, eq), *c);
      continue;
    }
    ++table->malformed;
    if (loud && table->malformed <= 3)
      warn("autotune: ignoring line " + std::to_string(line_no) + " of " + path + " (" + why + ")");
  }
  if (loud && table->malformed > 3)
    warn("autotune: ignoring " + std::to_string(table->malformed - 3) +
         " more malformed lines of " + path);
  return true;
}

}  // namespace

std::optional<Config> remembered_config(const runtime::DiskCache& cache, const std::string& key) {
  try {
    Fd dir(cache.open_dir(false));  // a folder that cannot be trusted has warned
    if (dir.fd < 0) return std::nullopt;
    Table table;
    if (!read_table(dir.fd, cache, /*loud=*/true, &table)) return std::nullopt;
    for (const auto& [k, c] : table.winners)
      if (k == key) return c;
  } catch (...) {
    // bad_alloc, or a warning handler that throws: a miss.
  }
  return std::nullopt;
}

bool remember_config(const runtime::DiskCache& cache, const std::string& key, const Config& c) {
  try {
    if (!cache.enabled()) return false;
    if (key.empty() || key.find('\n') != std::string::npos || key.find('\r') != std::string::npos ||
        key.find(" = ") != std::string::npos || !c.strategy) {
      warn("autotune: not remembering a winner for '" + key +
           "' (it cannot be written as one line)");
      return false;
    }
    std::string why;
    if (!decode(encode(c), &why)) {
      warn("autotune: not remembering " + encode(c) + " for " + key + " (" + why + ")");
      return false;
    }
    Fd dir(cache.open_dir(true));
    if (dir.fd < 0) return false;
    const std::string path = cache.dir() + "/" + kFile;
    // One writer at a time: the read-modify-write below must not lose
    // another process's line. The lock file is never replaced, unlike
    // autotune.txt, so every writer locks the same inode.
    Fd lock(::openat(dir.fd, kLock, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (lock.fd < 0) {
      warn("autotune: cannot open " + cache.dir() + "/" + kLock + ": " + std::strerror(errno) +
           "; the winner is not remembered");
      return false;
    }
    while (flock(lock.fd, LOCK_EX) != 0) {
      if (errno == EINTR) continue;
      warn("autotune: cannot lock " + cache.dir() + "/" + kLock + ": " + std::strerror(errno) +
           "; the winner is not remembered");
      return false;
    }
    Table table;
    // An untrusted file is not read, and not replaced either: it is not ours.
    if (!read_table(dir.fd, cache, /*loud=*/false, &table)) return false;
    if (table.malformed)
      warn("autotune: rewriting " + path + " without its " + std::to_string(table.malformed) +
           " malformed line(s)");
    table.set(key, c);
    std::string text;
    for (const auto& [k, v] : table.winners) text += k + " = " + encode(v) + "\n";

    // Readers do not lock: they see the old file or the whole new one.
    const std::string tmp = std::string(kFile) + ".tmp." + std::to_string(getpid());
    Fd out(
        ::openat(dir.fd, tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600));
    bool ok = out.fd >= 0 && runtime::write_all(out.fd, text);
    int err = errno;
    if (out.fd >= 0) {
      if (::close(out.fd) != 0 && ok) {
        ok = false;
        err = errno;
      }
      out.fd = -1;
    }
    if (ok && ::renameat(dir.fd, tmp.c_str(), dir.fd, kFile) != 0) {
      ok = false;
      err = errno;
    }
    if (!ok) {
      ::unlinkat(dir.fd, tmp.c_str(), 0);
      warn("autotune: cannot write " + path + ": " + std::strerror(err) +
           "; the winner is not remembered");
    }
    return ok;
  } catch (...) {
    return false;
  }
}

Config tuned_config(const OpInfo& op, DType dtype,
                    const std::vector<std::vector<std::int64_t>>& shapes, const Params& params,
                    Device device, const Config& requested) {
  if (!device.is_cuda()) {
    warn("tx.ops." + op.name + ": autotuning times kernels on a GPU; using the defaults on " +
         device.str());
    return resolved(requested, dtype, op);
  }
  static std::mutex mu;
  // What this process tuned or read, so the file is read once per key.
  static std::map<std::string, Config>* known = new std::map<std::string, Config>;
  std::lock_guard<std::mutex> lock(mu);
  const runtime::DeviceInfo& dev = runtime::current_device();
  std::string key = op.name + "|" + dtype.name() + "|" + shape_class(shapes) + "|" + dev.name;
  if (auto it = known->find(key); it != known->end()) return it->second;
  const runtime::DiskCache& cache = runtime::DiskCache::instance();
  if (auto c = remembered_config(cache, key)) {
    try {
      Config r = resolved(*c, dtype, op);
      (*known)[key] = r;
      return r;
    } catch (const Error& e) {
      warn("autotune: the remembered winner for " + key + " is not usable (" + e.what() +
           "); tuning again");
    }
  }

  std::vector<Tensor> inputs;
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    bool mask = (op.name == "where" && i == 0) || (op.name == "masked_fill" && i == 1);
    DType t = mask ? boolean : dtype;
    std::int64_t n = 1;
    for (auto e : shapes[i]) n *= e;
    std::vector<double> v(static_cast<std::size_t>(n));
    for (std::size_t j = 0; j < v.size(); ++j)
      v[j] = mask ? (j % 3 == 0) : 0.25 + 0.5 * std::sin(0.1 * j);
    inputs.push_back(Tensor::from_doubles(v, shapes[i], t, device));
  }
  std::vector<Config> candidates;
  int vec = std::max(1, 16 / dtype.bytes());
  for (Strategy s : {Strategy::register_copy, Strategy::explicit_parallel, Strategy::direct})
    for (int threads : {128, 256, 512})
      for (int mult : {1, 2, 4}) {
        if (s == Strategy::direct && mult > 1) continue;
        candidates.push_back({s, threads, s == Strategy::direct ? 1 : vec * mult, false});
      }
  Config best = resolved(requested, dtype, op);
  float best_ms = 1e30f;
  std::size_t timed = 0;
  Tensor out;
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    Config c = candidates[i];
    try {
      Elementwise e(op.name, shapes, dtype, params, c, device);
      if (!out.defined()) out = Tensor::empty(e.out_shape(), e.out_dtype(), device);
      for (int w = 0; w < 3; ++w) e(inputs, out);
      std::vector<float> times;
      runtime::EventTimer t;
      for (int r = 0; r < 15; ++r) {
        t.start();
        e(inputs, out);
        t.stop();
        times.push_back(t.elapsed_ms());
      }
      std::nth_element(times.begin(), times.begin() + 7, times.end());
      float ms = times[7];
      std::fprintf(stderr, "[tx tune] %s %s %zu/%zu %s threads=%d npt=%d: %.4f ms\n",
                   op.name.c_str(), dtype.name().c_str(), i + 1, candidates.size(),
                   strategy_name(*c.strategy), c.threads, c.num_per_thread, ms);
      ++timed;
      if (ms < best_ms) {
        best_ms = ms;
        best = c;
      }
    } catch (const Error& e) {
      std::fprintf(stderr, "[tx tune] %s candidate %zu failed: %s\n", op.name.c_str(), i + 1,
                   e.what());
    }
  }
  if (timed == 0) {
    // Nothing measured: keep the default for this process, remember nothing.
    warn("autotune: no candidate of " + op.name + " " + dtype.name() +
         " could be timed (see above); using the default " + encode(best));
    (*known)[key] = best;
    return best;
  }
  std::fprintf(stderr, "[tx tune] %s %s: best %s of %zu timed\n", op.name.c_str(),
               dtype.name().c_str(), encode(best).c_str(), timed);
  remember_config(cache, key, best);  // a failure has warned; the winner still serves this process
  (*known)[key] = best;
  return best;
}

}  // namespace tx::ops::detail
