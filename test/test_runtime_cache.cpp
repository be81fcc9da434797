// The kernel disk cache and its SHA-256: known digests, round trips, and
// every way an entry can be wrong (each must read as a miss, never throw).
#include <dirent.h>
#include <doctest/doctest.h>
#include <grp.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "test_fixtures.hpp"
#include "test_support.hpp"
#include "tx/error.hpp"
#include "tx/runtime/cubin_cache.hpp"
#include "tx/runtime/disk_cache.hpp"
#include "tx/runtime/nvrtc.hpp"

namespace {

using tx::runtime::DiskCache;

using tx::test::read_file;
using tx::test::warnings;
using tx::test::write_file;
using WarningCapture = tx::test::WarningCapture;
struct TempDir : tx::test::TempDir {
  TempDir() : tx::test::TempDir("tx-cache-test") {}
};

std::vector<char> random_payload(std::size_t n) {
  std::uniform_int_distribution<int> byte(0, 255);
  std::vector<char> v(n);
  for (char& c : v) c = static_cast<char>(byte(tx::test::rng()));
  return v;
}

std::string random_key() {
  std::uniform_int_distribution<std::uint64_t> d;
  return tx::runtime::sha256_hex(std::to_string(d(tx::test::rng())));
}

std::size_t random_size(std::size_t lo, std::size_t hi) {
  return std::uniform_int_distribution<std::size_t>(lo, hi)(tx::test::rng());
}

bool exists(const std::string& path) {
  struct stat st {};
  return lstat(path.c_str(), &st) == 0;
}

std::vector<std::string> list_dir(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    names.push_back(e.path().filename().string());
  return names;
}

// The entry format as disk_cache.hpp documents it, written independently of
// the implementation so that tests can build entries that differ in one field.
struct Entry {
  std::string magic, tx_version, ir_version, key, checksum, payload;
  std::uint32_t format = 0;
  std::uint64_t size = 0;
};

std::uint64_t get_le(const std::string& s, std::size_t& p, int bytes) {
  REQUIRE(p + static_cast<std::size_t>(bytes) <= s.size());
  std::uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= std::uint64_t{static_cast<unsigned char>(s[p++])} << (8 * i);
  return v;
}
std::string get_str(const std::string& s, std::size_t& p) {
  std::size_t n = static_cast<std::size_t>(get_le(s, p, 4));
  REQUIRE(p + n <= s.size());
  std::string r = s.substr(p, n);
  p += n;
  return r;
}
void put_le(std::string& s, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) s += static_cast<char>(v >> (8 * i));
}
void put_str(std::string& s, const std::string& v) {
  put_le(s, v.size(), 4);
  s += v;
}

Entry parse(const std::string& data, std::size_t* header_size = nullptr) {
  Entry e;
  std::size_t p = 0;
  REQUIRE(data.size() >= 8);
  e.magic = data.substr(0, 8);
  p = 8;
  e.format = static_cast<std::uint32_t>(get_le(data, p, 4));
  e.tx_version = get_str(data, p);
  e.ir_version = get_str(data, p);
  e.key = get_str(data, p);
  e.size = get_le(data, p, 8);
  REQUIRE(p + 32 <= data.size());
  e.checksum = data.substr(p, 32);
  p += 32;
  if (header_size) *header_size = p;
  e.payload = data.substr(p);
  return e;
}

std::string encode(const Entry& e) {
  std::string s = e.magic;
  put_le(s, e.format, 4);
  put_str(s, e.tx_version);
  put_str(s, e.ir_version);
  put_str(s, e.key);
  put_le(s, e.size, 8);
  s += e.checksum;
  s += e.payload;
  return s;
}

std::string digest_bytes(const std::string& payload) {
  auto d = tx::runtime::sha256(payload);
  return std::string(reinterpret_cast<const char*>(d.data()), d.size());
}

// A cache in a fresh folder holding one valid entry.
struct Stored {
  TempDir tmp;
  DiskCache cache{tmp.path};
  std::string key = random_key();
  std::vector<char> payload = random_payload(random_size(1, 5000));
  std::string path = cache.path_for(key);
  std::string bytes;
  Stored() {
    REQUIRE(cache.store(key, payload));
    bytes = read_file(path);
    REQUIRE(cache.load(key) == payload);
  }
};

// The uid and gid of "nobody": an unprivileged user for tests run as root.
constexpr uid_t kNobody = 65534;

// Runs `body` in a forked child and returns what it reports: "" for success,
// otherwise what went wrong (or how the child died). With `unprivileged`, a
// child of root first becomes nobody, so that file permissions apply to it.
// The child reports through a pipe and never returns into doctest.
std::string in_child(const std::function<std::string()>& body, bool unprivileged = false) {
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    close(fds[0]);
    std::string result;
    try {
      if (unprivileged && geteuid() == 0 &&
          (setgroups(0, nullptr) != 0 || setgid(kNobody) != 0 || setuid(kNobody) != 0))
        result = std::string("cannot become nobody: ") + std::strerror(errno);
      else
        result = body();
    } catch (const std::exception& e) {
      result = std::string("exception: ") + e.what();
    } catch (...) {
      result = "unknown exception";
    }
    std::size_t off = 0;
    while (off < result.size()) {
      ssize_t n = write(fds[1], result.data() + off, result.size() - off);
      if (n <= 0) break;
      off += static_cast<std::size_t>(n);
    }
    _exit(0);
  }
  close(fds[1]);
  std::string out;
  char buf[512];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof buf)) > 0) out.append(buf, static_cast<std::size_t>(n));
  close(fds[0]);
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  if (WIFSIGNALED(status))
    return out + " [child killed by signal " + std::to_string(WTERMSIG(status)) + "]";
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return out + " [child exited with " + std::to_string(WEXITSTATUS(status)) + "]";
  return out;
}

// Collects the problems a child finds, as text.
struct Problems {
  std::string text;
  void expect(bool ok, const std::string& what) {
    if (!ok) text += (text.empty() ? "" : "; ") + what;
  }
};

// A small CUDA kernel whose source no other test (or run) has compiled.
std::string fresh_kernel_source() {
  return "extern \"C\" __global__ void scale(float* x) { x[threadIdx.x] *= " +
         std::to_string(std::uniform_int_distribution<int>(1, 1 << 30)(tx::test::rng())) +
         ".5f; }\n";
}

// NVRTC is a required dependency of tx: a test that compiles through the
// cache fails, rather than passes unchecked, when it cannot be loaded.
void require_nvrtc() {
  std::string why;
  const bool ok = tx::runtime::nvrtc_available(&why);
  REQUIRE_MESSAGE(ok, "NVRTC (a required dependency of tx) cannot be loaded: " << why);
}

// A uid other than ours, for the owner seam: DiskCache(dir, other_uid())
// trusts only that user's files, so our own look foreign to it.
uid_t other_uid() { return geteuid() == kNobody ? kNobody - 1 : kNobody; }

std::size_t count_mentions(const std::string& s) {
  std::size_t n = 0;
  for (const auto& w : warnings()) n += w.find(s) != std::string::npos;
  return n;
}

// Mounts a tmpfs of `size` on `dir` in a private mount namespace of the
// calling (forked, single-threaded) process, so that it vanishes with the
// process: as root directly, otherwise inside a new user namespace mapping
// the user to itself. Returns "" on success, else why it could not.
std::string mount_tiny_tmpfs(const std::string& dir, const std::string& size) {
  auto write_proc = [](const char* file, const std::string& text) {
    std::ofstream out(file);
    out << text;
    out.flush();
    return out.good();
  };
  const uid_t uid = geteuid();
  const gid_t gid = getegid();
  if (uid != 0) {
    if (unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0)
      return std::string("unshare(CLONE_NEWUSER | CLONE_NEWNS): ") + std::strerror(errno);
    if (!write_proc("/proc/self/setgroups", "deny") ||
        !write_proc("/proc/self/uid_map", std::to_string(uid) + " " + std::to_string(uid) + " 1") ||
        !write_proc("/proc/self/gid_map", std::to_string(gid) + " " + std::to_string(gid) + " 1"))
      return "cannot write the user namespace's uid / gid maps";
  } else if (unshare(CLONE_NEWNS) != 0) {
    return std::string("unshare(CLONE_NEWNS): ") + std::strerror(errno);
  }
  // Without this the mount could propagate back to the parent's namespace.
  if (mount("none", "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0)
    return std::string("making / private: ") + std::strerror(errno);
  const std::string options = "size=" + size + ",mode=0700";
  if (mount("tmpfs", dir.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, options.c_str()) != 0)
    return std::string("mount -t tmpfs: ") + std::strerror(errno);
  return {};
}

}  // namespace

TEST_CASE("sha256 matches the FIPS 180-2 vectors") {
  using tx::runtime::sha256_hex;
  CHECK(sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  CHECK(sha256_hex(std::string(1000000, 'a')) ==
        "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  auto raw = tx::runtime::sha256("abc");
  CHECK(raw[0] == 0xba);
  CHECK(raw[31] == 0xad);
}

TEST_CASE("sha256 pads correctly around the block boundaries") {
  // Lengths where the length field just fits, just spills, and fills blocks
  // (digests from Python's hashlib).
  const std::pair<std::size_t, const char*> cases[] = {
      {55, "d5e285683cd4efc02d021a5c62014694958901005d6f71e89e0989fac77e4072"},
      {56, "04c26261370ee7541549d16dee320c723e3fd14671e66a099afe0a377c16888e"},
      {63, "75220b47218278e656f2013bb8f0c455a25eaf01e86c64924e9d48d89776d6f2"},
      {64, "7ce100971f64e7001e8fe5a51973ecdfe1ced42befe7ee8d5fd6219506b5393c"},
      {65, "9537c5fdf120482f7d58d25e9ed583f52c02b4e304ea814db1633ad565aed7e9"},
      {119, "000b48d4edf0fa7bee3c6236ecd2785baa5db4eeb8bb54341b029e0d9fa5fb0c"},
      {120, "13f05a0b594787f5ecd315edc96141bd3243203d1b7d4f0836f37308b276ba98"},
  };
  for (auto [n, want] : cases) {
    CAPTURE(n);
    CHECK(tx::runtime::sha256_hex(std::string(n, 'x')) == want);
  }
}

TEST_CASE("sha256 differs for inputs one bit apart") {
  std::vector<char> p = random_payload(random_size(1, 300));
  std::string a(p.begin(), p.end()), b = a;
  b[random_size(0, b.size() - 1)] ^= 1;
  CHECK(tx::runtime::sha256(a) != tx::runtime::sha256(b));
  CHECK(tx::runtime::sha256(a) == tx::runtime::sha256(std::string(a)));
}

TEST_CASE("DiskCache stores and loads an entry") {
  TempDir tmp;
  DiskCache cache(tmp.path);
  WarningCapture w;
  REQUIRE(cache.enabled());
  CHECK(cache.dir() == tmp.path);
  const std::string key = random_key();
  CHECK_FALSE(cache.load(key).has_value());  // a miss before the store

  const std::vector<char> payload = random_payload(random_size(1, 200000));
  REQUIRE(cache.store(key, payload));
  CHECK(exists(cache.path_for(key)));
  auto got = cache.load(key);
  REQUIRE(got.has_value());
  CHECK(*got == payload);
  // Only the entry is left: the temporary file was renamed, not copied.
  CHECK(list_dir(tmp.path).size() == 1);
  struct stat st {};
  REQUIRE(stat(cache.path_for(key).c_str(), &st) == 0);
  CHECK((st.st_mode & 0077) == 0);

  // The file is laid out as documented.
  Entry e = parse(read_file(cache.path_for(key)));
  CHECK(e.magic == "TXCACHE1");
  CHECK(e.format == 1u);
  CHECK(e.ir_version == tx::runtime::kIRVersion);
  CHECK(e.key == key);
  CHECK(e.size == payload.size());
  CHECK(e.payload == std::string(payload.begin(), payload.end()));
  CHECK(e.checksum == digest_bytes(e.payload));

  // A second store replaces the entry.
  const std::vector<char> other = random_payload(random_size(1, 3000));
  REQUIRE(cache.store(key, other));
  CHECK(cache.load(key) == other);

  // An empty payload is a valid entry, not a miss.
  const std::string empty_key = random_key();
  REQUIRE(cache.store(empty_key, {}));
  auto empty = cache.load(empty_key);
  REQUIRE(empty.has_value());
  CHECK(empty->empty());
  CHECK(warnings().empty());
}

TEST_CASE("DiskCache keeps odd keys inside its folder") {
  TempDir tmp;
  DiskCache cache(tmp.path);
  for (std::string key : {std::string("../escape"), std::string("a/b"), std::string(""),
                          std::string(300, 'k'), std::string(".hidden")}) {
    CAPTURE(key);
    const std::string path = cache.path_for(key);
    REQUIRE(path.rfind(tmp.path + "/", 0) == 0);
    CHECK(path.find('/', tmp.path.size() + 1) == std::string::npos);
    const std::vector<char> payload = random_payload(random_size(1, 100));
    REQUIRE(cache.store(key, payload));
    CHECK(cache.load(key) == payload);
  }
  // Keys that collide on a file must not load each other's entry.
  CHECK(cache.path_for("../escape") != cache.path_for("a/b"));
}

TEST_CASE("a truncated entry is a miss, is removed and warned about") {
  Stored s;
  // Cut in the magic, in the header strings, just before the payload, and
  // one byte short of the end.
  std::size_t header = 0;
  parse(s.bytes, &header);
  for (std::size_t cut :
       {std::size_t{3}, std::size_t{14}, header - 1, header, s.bytes.size() - 1}) {
    CAPTURE(cut);
    WarningCapture w;
    write_file(s.path, s.bytes.substr(0, cut));
    std::optional<std::vector<char>> got;
    CHECK_NOTHROW(got = s.cache.load(s.key));
    CHECK_FALSE(got.has_value());
    CHECK_FALSE(exists(s.path));
    CHECK(w.any_mentions(s.path));
  }
  // Extra bytes after the payload are damage too.
  WarningCapture w;
  write_file(s.path, s.bytes + "x");
  CHECK_FALSE(s.cache.load(s.key).has_value());
  CHECK_FALSE(exists(s.path));
  CHECK(w.any_mentions(s.path));
}

TEST_CASE("an entry with one flipped payload byte fails its checksum") {
  Stored s;
  WarningCapture w;
  std::size_t header = 0;
  parse(s.bytes, &header);
  std::string bad = s.bytes;
  bad[header + random_size(0, s.payload.size() - 1)] ^= static_cast<char>(1 << random_size(0, 7));
  write_file(s.path, bad);
  std::optional<std::vector<char>> got;
  CHECK_NOTHROW(got = s.cache.load(s.key));
  CHECK_FALSE(got.has_value());
  CHECK_FALSE(exists(s.path));
  CHECK(w.any_mentions(s.path));
  CHECK(w.any_mentions("checksum"));
}

TEST_CASE("an entry with any one flipped header byte is a miss") {
  Stored s;
  WarningCapture w;
  std::size_t header = 0;
  parse(s.bytes, &header);
  for (std::size_t i = 0; i < header; ++i) {
    CAPTURE(i);
    std::string bad = s.bytes;
    bad[i] ^= static_cast<char>(1 << (i % 8));
    write_file(s.path, bad);
    std::optional<std::vector<char>> got;
    CHECK_NOTHROW(got = s.cache.load(s.key));
    CHECK_FALSE(got.has_value());
    CHECK_FALSE(exists(s.path));
  }
  // After all that, a fresh store works again.
  REQUIRE(s.cache.store(s.key, s.payload));
  CHECK(s.cache.load(s.key) == s.payload);
}

TEST_CASE("an entry recorded under another key is a miss") {
  Stored s;
  // The test's encoder reproduces the stored bytes exactly, so the variants
  // below differ from a valid entry in the one field they change.
  Entry e = parse(s.bytes);
  REQUIRE(encode(e) == s.bytes);

  const std::string other_key = random_key();
  // The whole file moved to another key's name.
  REQUIRE(std::rename(s.path.c_str(), s.cache.path_for(other_key).c_str()) == 0);
  CHECK_FALSE(s.cache.load(other_key).has_value());
  CHECK_FALSE(exists(s.cache.path_for(other_key)));

  // The key field edited, checksum intact.
  Entry edited = e;
  edited.key = other_key;
  write_file(s.path, encode(edited));
  CHECK_FALSE(s.cache.load(s.key).has_value());
  CHECK_FALSE(exists(s.path));
}

TEST_CASE("an entry from another format or tx version is a quiet miss") {
  Stored s;
  Entry e = parse(s.bytes);
  REQUIRE(encode(e) == s.bytes);
  WarningCapture w;

  Entry format = e;
  format.format = e.format + 1;
  Entry tx_version = e;
  tx_version.tx_version = e.tx_version + ".1";
  Entry ir_version = e;
  ir_version.ir_version = "tx-ir-0";
  for (const Entry* variant : {&format, &tx_version, &ir_version}) {
    write_file(s.path, encode(*variant));
    std::optional<std::vector<char>> got;
    CHECK_NOTHROW(got = s.cache.load(s.key));
    CHECK_FALSE(got.has_value());
    CHECK_FALSE(exists(s.path));
  }
  // Stale entries are expected after an upgrade: no warning for them.
  CHECK(warnings().empty());

  // The unchanged encoding still loads: the misses above came from the field.
  write_file(s.path, encode(e));
  CHECK(s.cache.load(s.key) == s.payload);
}

TEST_CASE("a symbolic link in place of an entry is not followed") {
  Stored s;
  const std::string elsewhere = s.tmp.path + "/elsewhere.bin";
  REQUIRE(std::rename(s.path.c_str(), elsewhere.c_str()) == 0);
  REQUIRE(symlink(elsewhere.c_str(), s.path.c_str()) == 0);
  WarningCapture w;
  std::optional<std::vector<char>> got;
  CHECK_NOTHROW(got = s.cache.load(s.key));
  CHECK_FALSE(got.has_value());
}

TEST_CASE("a missing cache folder is created, private to the user") {
  TempDir tmp;
  const std::string parent = tmp.path + "/deep/er";
  const std::string dir = parent + "/tx";
  DiskCache cache(dir + "/");  // a trailing slash is tolerated
  CHECK(cache.dir() == dir);
  const std::string key = random_key();
  CHECK_FALSE(cache.load(key).has_value());
  CHECK_FALSE(exists(dir));  // a load creates nothing

  const std::vector<char> payload = random_payload(random_size(1, 1000));
  REQUIRE(cache.store(key, payload));
  struct stat st {};
  REQUIRE(stat(dir.c_str(), &st) == 0);
  CHECK(S_ISDIR(st.st_mode));
  CHECK((st.st_mode & 07777) == 0700);
  CHECK(st.st_uid == geteuid());
  // Parents get the ordinary mode, less what the umask removes.
  const mode_t mask = umask(0);
  umask(mask);
  REQUIRE(stat(parent.c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == (0755 & ~mask));
  CHECK(cache.load(key) == payload);
}

TEST_CASE("a cache folder that cannot be created or written makes store return false") {
  TempDir tmp;
  WarningCapture w;
  // A regular file where a parent folder should be: mkdir fails even for root.
  write_file(tmp.path + "/file", "not a folder");
  DiskCache blocked(tmp.path + "/file/tx");
  bool stored = true;
  CHECK_NOTHROW(stored = blocked.store(random_key(), random_payload(16)));
  CHECK_FALSE(stored);
  CHECK(w.any_mentions(tmp.path + "/file"));
  CHECK_FALSE(blocked.load(random_key()).has_value());
}

TEST_CASE("a read-only cache folder: entries still load, stores fail with a warning") {
  // As nobody when run as root: root ignores permissions.
  TempDir tmp;
  chmod(tmp.path.c_str(), 0777);
  const std::vector<char> payload = random_payload(random_size(1, 3000));
  const std::string key = random_key(), other = random_key();
  std::string problems = in_child(
      [&] {
        Problems p;
        std::vector<std::string> seen;
        static std::vector<std::string>* sink;
        sink = &seen;
        tx::set_warning_handler([](const std::string& m) { sink->push_back(m); });
        const std::string ro = tmp.path + "/readonly";
        DiskCache cache(ro);
        p.expect(cache.store(key, payload), "the first store (writable folder) failed");
        p.expect(chmod(ro.c_str(), 0500) == 0, "chmod 0500 failed");
        p.expect(cache.load(key) == payload, "a valid entry in a read-only folder did not load");
        bool stored = true;
        stored = cache.store(other, random_payload(100));
        p.expect(!stored, "store into a read-only folder returned true");
        bool mentioned = false;
        for (const auto& w : seen) mentioned = mentioned || w.find(ro) != std::string::npos;
        p.expect(mentioned, "no warning names the read-only folder");
        p.expect(
            list_dir(ro).size() == 1,
            "the read-only folder holds " + std::to_string(list_dir(ro).size()) + " files, not 1");
        p.expect(!cache.load(other).has_value(), "a failed store left a loadable entry");
        // A damaged entry that cannot be removed is still only a miss.
        chmod(ro.c_str(), 0700);
        std::string bytes = read_file(cache.path_for(key));
        bytes[bytes.size() - 1] ^= 0x20;
        write_file(cache.path_for(key), bytes);
        chmod(ro.c_str(), 0500);
        p.expect(!cache.load(key).has_value(), "a damaged entry in a read-only folder loaded");
        p.expect(exists(cache.path_for(key)), "the damaged entry vanished from a read-only folder");
        chmod(ro.c_str(), 0700);
        return p.text;
      },
      /*unprivileged=*/true);
  CHECK(problems == "");
}

TEST_CASE("a full disk: the store fails cleanly, leaves nothing behind, and compiles still run") {
  // RLIMIT_FSIZE makes every write past the limit fail (EFBIG), as a full
  // disk makes them fail with ENOSPC: the same path through store().
  TempDir tmp;
  require_nvrtc();
  const std::string source = fresh_kernel_source();
  const std::vector<char> small = random_payload(100);
  const std::string small_key = random_key(), big_key = random_key();
  std::string problems = in_child([&] {
    Problems p;
    static std::vector<std::string> seen;
    tx::set_warning_handler([](const std::string& m) { seen.push_back(m); });
    DiskCache cache(tmp.path);
    p.expect(cache.store(small_key, small), "storing a small entry before the disk filled failed");
    std::signal(SIGXFSZ, SIG_IGN);
    struct rlimit lim {
      4096, 4096
    };
    p.expect(setrlimit(RLIMIT_FSIZE, &lim) == 0, "setrlimit failed");
    p.expect(!cache.store(big_key, random_payload(100000)),
             "a store past the size limit returned true");
    p.expect(!seen.empty() && seen.back().find("cannot write") != std::string::npos,
             "no 'cannot write' warning");
    p.expect(list_dir(tmp.path).size() == 1, "a partial or temporary file was left behind");
    p.expect(!cache.load(big_key).has_value(), "the failed entry loads");
    p.expect(cache.load(small_key) == small, "the earlier entry no longer loads");
    // The kernel still compiles; it just stays uncached.
    tx::runtime::CachedCubin c = tx::runtime::cubin_for(source, "scale", "sm_90a", cache);
    p.expect(!c.from_disk && c.cubin.size() > 64, "no cubin from NVRTC on a full disk");
    p.expect(!cache.load(c.key).has_value() || c.cubin.size() < 4096, "a cubin entry was stored");
    return p.text;
  });
  CHECK(problems == "");
}

TEST_CASE("a really full disk (ENOSPC on a tiny tmpfs): stores fail cleanly, compiles still run") {
  // A real ENOSPC needs a small file system: a 64 KiB tmpfs mounted in a
  // private mount namespace of a child (as root, or in a user namespace
  // otherwise). Where neither is allowed the test says so and falls back to
  // the RLIMIT_FSIZE simulation of the test above.
  TempDir tmp;
  require_nvrtc();
  const std::string source = fresh_kernel_source();
  const std::string mnt = tmp.path + "/mnt";
  REQUIRE(mkdir(mnt.c_str(), 0700) == 0);
  const std::vector<char> small = random_payload(100);
  const std::string small_key = random_key(), big_key = random_key(), tiny_key = random_key();
  // The child reports "simulation:<how>" first, then its problems.
  std::string report = in_child([&] {
    std::string simulation = "tmpfs";
    std::string dir = mnt + "/tx";
    if (std::string why = mount_tiny_tmpfs(mnt, "64k"); !why.empty()) {
      simulation = "RLIMIT_FSIZE (no tmpfs: " + why + ")";
      dir = tmp.path + "/tx";
    }
    Problems p;
    static std::vector<std::string> seen;
    tx::set_warning_handler([](const std::string& m) { seen.push_back(m); });
    DiskCache cache(dir);
    p.expect(cache.store(small_key, small), "storing a small entry before the disk filled failed");
    const char* error = "No space left on device";
    if (simulation != "tmpfs") {
      std::signal(SIGXFSZ, SIG_IGN);
      struct rlimit lim {
        4096, 4096
      };
      p.expect(setrlimit(RLIMIT_FSIZE, &lim) == 0, "setrlimit failed");
      error = "File too large";
    }
    // Bigger than the whole file system.
    p.expect(!cache.store(big_key, random_payload(100000)),
             "a store past the free space returned true");
    p.expect(!seen.empty() && seen.back().find("cannot write") != std::string::npos &&
                 seen.back().find(error) != std::string::npos,
             std::string("no 'cannot write ... ") + error + "' warning");
    p.expect(list_dir(dir).size() == 1, "a partial or temporary file was left behind");
    p.expect(!cache.load(big_key).has_value(), "the failed entry loads");
    p.expect(cache.load(small_key) == small, "the earlier entry no longer loads");
    if (simulation == "tmpfs") {
      // Fill what is left, so that even a tiny entry cannot be written.
      {
        std::ofstream fill(mnt + "/filler", std::ios::binary);
        const std::string block(4096, 'f');
        for (int i = 0; i < 64 && fill.good(); ++i) fill.write(block.data(), block.size());
        fill.flush();
      }
      p.expect(!cache.store(tiny_key, random_payload(16)), "a store on a full disk returned true");
      p.expect(list_dir(dir).size() == 1, "a store on a full disk left a file behind");
    }
    // The kernel still compiles; it just stays uncached.
    tx::runtime::CachedCubin c = tx::runtime::cubin_for(source, "scale", "sm_90a", cache);
    p.expect(!c.from_disk && c.cubin.size() > 64, "no cubin from NVRTC on a full disk");
    // (Under RLIMIT_FSIZE a cubin smaller than the limit may still be stored.)
    p.expect(!cache.load(c.key).has_value() || (simulation != "tmpfs" && c.cubin.size() < 4096),
             "a cubin entry was stored on a full disk");
    p.expect(cache.load(small_key) == small, "the earlier entry no longer loads after the compile");
    if (simulation == "tmpfs") {
      // Space again: the cache works again.
      std::remove((mnt + "/filler").c_str());
      p.expect(cache.store(tiny_key, random_payload(16)), "no store after space was freed");
    }
    return "simulation:" + simulation + "\n" + p.text;
  });
  const std::size_t nl = report.find('\n');
  REQUIRE(nl != std::string::npos);
  INFO(report);
  MESSAGE("full disk simulated with " << report.substr(11, nl - 11));
  CHECK(report.substr(nl + 1) == "");
}

TEST_CASE("an entry owned by another user is never loaded") {
  Stored s;
  WarningCapture w;
  // The same check through the owner seam, as any user: a cache that trusts
  // only another uid's files refuses ours (the folder, then its entries).
  DiskCache foreign(s.tmp.path, other_uid());
  CHECK_FALSE(foreign.load(s.key).has_value());
  CHECK(w.any_mentions("owned by uid " + std::to_string(geteuid()) + ", not by uid " +
                       std::to_string(other_uid())));
  CHECK(exists(s.path));
  // ... and the entry check itself, on the entry's real status.
  struct stat st {};
  REQUIRE(stat(s.path.c_str(), &st) == 0);
  CHECK(DiskCache::untrusted_reason(st, geteuid(), false) == "");
  CHECK(DiskCache::untrusted_reason(st, other_uid(), false).find("owned by uid") == 0);

  if (geteuid() != 0) {
    MESSAGE("not root: the entry was not chowned to another user; only the owner seam above ran");
    return;
  }
  // As root: a real file of another user's inside a trusted folder.
  REQUIRE(chown(s.path.c_str(), kNobody, kNobody) == 0);
  std::optional<std::vector<char>> got;
  CHECK_NOTHROW(got = s.cache.load(s.key));
  CHECK_FALSE(got.has_value());
  CHECK(w.any_mentions("owned by uid " + std::to_string(kNobody)));
  CHECK(exists(s.path));  // someone else's file: ignored, not deleted
  // Giving it back makes it load: the owner was the only difference.
  REQUIRE(chown(s.path.c_str(), geteuid(), getegid()) == 0);
  CHECK(s.cache.load(s.key) == s.payload);
}

TEST_CASE("an entry writable by group or others is not loaded, and a store replaces it") {
  Stored s;
  for (mode_t mode : {mode_t{0620}, mode_t{0602}}) {
    CAPTURE(mode);
    WarningCapture w;
    REQUIRE(chmod(s.path.c_str(), mode) == 0);
    CHECK_FALSE(s.cache.load(s.key).has_value());
    CHECK(w.any_mentions(s.path));
    CHECK(w.any_mentions(mode == 0620 ? "writable by its group" : "writable by others"));
    CHECK(exists(s.path));
    // A store writes a fresh private file in its place.
    REQUIRE(s.cache.store(s.key, s.payload));
    struct stat st {};
    REQUIRE(stat(s.path.c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0600);
    CHECK(s.cache.load(s.key) == s.payload);
  }
}

TEST_CASE("untrusted_reason: type, owner and write bits") {
  struct stat st {};
  st.st_uid = 1000;
  st.st_mode = S_IFDIR | 0700;
  CHECK(DiskCache::untrusted_reason(st, 1000, true) == "");
  CHECK(DiskCache::untrusted_reason(st, 1000, false) == "not a regular file");
  CHECK(DiskCache::untrusted_reason(st, 1001, true) == "owned by uid 1000, not by uid 1001");
  st.st_mode = S_IFDIR | 0755;  // readable by others: not a way to plant code
  CHECK(DiskCache::untrusted_reason(st, 1000, true) == "");
  st.st_mode = S_IFDIR | 0770;
  CHECK(DiskCache::untrusted_reason(st, 1000, true) == "writable by its group (mode 0770)");
  st.st_mode = S_IFDIR | 01777;
  CHECK(DiskCache::untrusted_reason(st, 1000, true) == "writable by others (mode 1777)");
  st.st_mode = S_IFREG | 0600;
  CHECK(DiskCache::untrusted_reason(st, 1000, false) == "");
  CHECK(DiskCache::untrusted_reason(st, 1000, true) == "not a directory");
  CHECK(DiskCache::untrusted_reason(st, 0, false) == "owned by uid 1000, not by uid 0");
  st.st_mode = S_IFREG | 0622;
  CHECK(DiskCache::untrusted_reason(st, 1000, false) == "writable by others (mode 0622)");
  st.st_mode = S_IFLNK | 0777;
  CHECK(DiskCache::untrusted_reason(st, 1000, false) == "not a regular file");
}

TEST_CASE("an existing cache folder writable by group or others is not used") {
  Stored s;
  const std::string& dir = s.tmp.path;
  for (mode_t mode : {mode_t{0770}, mode_t{0707}, mode_t{0777}, mode_t{01777}}) {
    CAPTURE(mode);
    WarningCapture w;
    REQUIRE(chmod(dir.c_str(), mode) == 0);
    std::optional<std::vector<char>> got;
    CHECK_NOTHROW(got = s.cache.load(s.key));
    CHECK_FALSE(got.has_value());  // a valid entry, in a folder others may write to
    bool stored = true;
    CHECK_NOTHROW(stored = s.cache.store(random_key(), random_payload(64)));
    CHECK_FALSE(stored);
    CHECK_FALSE(s.cache.load(s.key).has_value());
    // One warning for the three calls, naming the folder, the reason and the fix.
    CHECK(count_mentions("not using " + dir + ": writable by") == 1);
    CHECK(w.any_mentions(mode & S_IWOTH ? "writable by others" : "writable by its group"));
    CHECK(w.any_mentions("chmod 700 " + dir));
    // Refused, not tightened: the mode is the user's, and nothing was written.
    struct stat st {};
    REQUIRE(stat(dir.c_str(), &st) == 0);
    CHECK((st.st_mode & 07777) == mode);
    CHECK(list_dir(dir).size() == 1);
    CHECK(exists(s.path));
  }
  // Tight again, or readable (not writable) by others: used.
  for (mode_t mode : {mode_t{0700}, mode_t{0755}}) {
    CAPTURE(mode);
    REQUIRE(chmod(dir.c_str(), mode) == 0);
    CHECK(s.cache.load(s.key) == s.payload);
  }
}

TEST_CASE("an existing cache folder owned by another user is not used") {
  Stored s;
  const std::string& dir = s.tmp.path;
  {
    // The owner seam, as any user: the folder is ours, the cache trusts another uid.
    WarningCapture w;
    DiskCache foreign(dir, other_uid());
    CHECK_FALSE(foreign.load(s.key).has_value());
    CHECK_FALSE(foreign.store(random_key(), random_payload(64)));
    CHECK(count_mentions("not using " + dir + ": owned by uid " + std::to_string(geteuid())) == 1);
    CHECK_FALSE(w.any_mentions("chmod 700"));  // not the user's to fix with chmod
    CHECK(list_dir(dir).size() == 1);
  }
  if (geteuid() != 0) {
    MESSAGE("not root: the folder was not chowned to another user; only the owner seam above ran");
    return;
  }
  WarningCapture w;
  REQUIRE(chown(dir.c_str(), kNobody, kNobody) == 0);
  CHECK_FALSE(s.cache.load(s.key).has_value());
  CHECK_FALSE(s.cache.store(random_key(), random_payload(64)));
  CHECK(count_mentions("not using " + dir + ": owned by uid " + std::to_string(kNobody)) == 1);
  CHECK(list_dir(dir).size() == 1);
  REQUIRE(chown(dir.c_str(), geteuid(), getegid()) == 0);
  CHECK(s.cache.load(s.key) == s.payload);
}

TEST_CASE("a cache folder that is a symbolic link to another user's folder is not used") {
  Stored s;  // the entry lives in s.tmp.path, the link points there
  TempDir links;
  const std::string link = links.path + "/tx";
  REQUIRE(symlink(s.tmp.path.c_str(), link.c_str()) == 0);
  // A link to the user's own folder (a cache on another disk) is followed.
  DiskCache through(link);
  CHECK(through.load(s.key) == s.payload);
  const std::string k2 = random_key();
  REQUIRE(through.store(k2, random_payload(32)));
  CHECK(exists(s.tmp.path + "/" + k2 + ".txbin"));
  REQUIRE(std::remove((s.tmp.path + "/" + k2 + ".txbin").c_str()) == 0);

  // Seam, as any user: to a cache trusting another uid, the target is foreign.
  {
    WarningCapture w;
    DiskCache foreign(link, other_uid());
    CHECK_FALSE(foreign.load(s.key).has_value());
    CHECK_FALSE(foreign.store(random_key(), random_payload(32)));
    CHECK(count_mentions("not using " + link + ": a symbolic link to " + s.tmp.path +
                         ", which is owned by uid " + std::to_string(geteuid())) == 1);
    CHECK(list_dir(s.tmp.path).size() == 1);
  }
  if (geteuid() != 0) {
    MESSAGE("not root: the link's target was not chowned to another user; only the seam ran");
    return;
  }
  WarningCapture w;
  REQUIRE(chown(s.tmp.path.c_str(), kNobody, kNobody) == 0);
  DiskCache cache(link);
  CHECK_FALSE(cache.load(s.key).has_value());
  CHECK_FALSE(cache.store(random_key(), random_payload(32)));
  CHECK(count_mentions("not using " + link + ": a symbolic link to " + s.tmp.path +
                       ", which is owned by uid " + std::to_string(kNobody)) == 1);
  CHECK(list_dir(s.tmp.path).size() == 1);
  REQUIRE(chown(s.tmp.path.c_str(), geteuid(), getegid()) == 0);
  CHECK(cache.load(s.key) == s.payload);
}

TEST_CASE("a cache path that is not a folder is not used") {
  TempDir tmp;
  WarningCapture w;
  const std::string file = tmp.path + "/tx";
  write_file(file, "not a folder");
  DiskCache cache(file);
  CHECK_FALSE(cache.load(random_key()).has_value());
  CHECK_FALSE(cache.store(random_key(), random_payload(32)));
  CHECK(w.any_mentions(file));
  CHECK(read_file(file) == "not a folder");
}

TEST_CASE("two processes compiling the same kernel at once share one valid entry") {
  require_nvrtc();
  TempDir tmp;
  const std::string source = fresh_kernel_source();
  constexpr int kProcs = 4;
  // The children wait on `go` so that they compile at the same moment.
  int go[2];
  REQUIRE(pipe(go) == 0);
  std::vector<int> results;
  std::vector<pid_t> pids;
  for (int i = 0; i < kProcs; ++i) {
    int out[2];
    REQUIRE(pipe(out) == 0);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      close(go[1]);
      close(out[0]);
      char c;
      (void)!read(go[0], &c, 1);  // EOF when the parent closes its end
      std::string r;
      try {
        DiskCache cache(tmp.path);
        tx::runtime::CachedCubin bin = tx::runtime::cubin_for(source, "scale", "sm_90a", cache);
        r = tx::runtime::sha256_hex(std::string_view(bin.cubin.data(), bin.cubin.size()));
      } catch (const std::exception& e) {
        r = std::string("exception: ") + e.what();
      }
      (void)!write(out[1], r.data(), r.size());
      _exit(0);
    }
    close(out[1]);
    results.push_back(out[0]);
    pids.push_back(pid);
  }
  close(go[0]);
  close(go[1]);
  std::vector<std::string> digests;
  for (int i = 0; i < kProcs; ++i) {
    std::string r;
    char buf[256];
    ssize_t n;
    while ((n = read(results[static_cast<std::size_t>(i)], buf, sizeof buf)) > 0)
      r.append(buf, static_cast<std::size_t>(n));
    close(results[static_cast<std::size_t>(i)]);
    int status = 0;
    REQUIRE(waitpid(pids[static_cast<std::size_t>(i)], &status, 0) ==
            pids[static_cast<std::size_t>(i)]);
    CHECK(WIFEXITED(status));
    CHECK(r.size() == 64);
    INFO(r);
    digests.push_back(r);
  }
  for (const auto& d : digests) CHECK(d == digests[0]);
  // One entry, no temporary files; this process now hits it.
  CHECK(list_dir(tmp.path).size() == 1);
  DiskCache cache(tmp.path);
  tx::runtime::CachedCubin again = tx::runtime::cubin_for(source, "scale", "sm_90a", cache);
  CHECK(again.from_disk);
  CHECK(tx::runtime::sha256_hex(std::string_view(again.cubin.data(), again.cubin.size())) ==
        digests[0]);
}

TEST_CASE("an entry made for another GPU arch is never served") {
  require_nvrtc();
  TempDir tmp;
  DiskCache cache(tmp.path);
  const std::string source = fresh_kernel_source();
  tx::runtime::CachedCubin sm89 = tx::runtime::cubin_for(source, "scale", "sm_89", cache);
  tx::runtime::CachedCubin sm90 = tx::runtime::cubin_for(source, "scale", "sm_90a", cache);
  CHECK_FALSE(sm89.from_disk);
  CHECK_FALSE(sm90.from_disk);
  CHECK(sm89.key != sm90.key);
  CHECK(sm89.cubin != sm90.cubin);
  CHECK(list_dir(tmp.path).size() == 2);
  // The sm_89 entry copied over the sm_90a one: its header names another key.
  write_file(cache.path_for(sm90.key), read_file(cache.path_for(sm89.key)));
  tx::runtime::CachedCubin got = tx::runtime::cubin_for(source, "scale", "sm_90a", cache);
  CHECK_FALSE(got.from_disk);
  CHECK(got.cubin == sm90.cubin);
  // ... and the recompiled binary replaced it.
  CHECK(cache.load(sm90.key) == sm90.cubin);
  CHECK(tx::runtime::cubin_for(source, "scale", "sm_90a", cache).from_disk);
}

TEST_CASE("a disabled cache stores and loads nothing") {
  TempDir tmp;
  DiskCache cache("");
  CHECK_FALSE(cache.enabled());
  bool stored = true;
  CHECK_NOTHROW(stored = cache.store(random_key(), random_payload(32)));
  CHECK_FALSE(stored);
  CHECK_FALSE(cache.load(random_key()).has_value());
}

TEST_CASE("the process-wide cache follows TX_CACHE_DIR") {
  // ctest sets TX_CACHE_DIR for every suite; instance() reads it once. Run
  // by hand, the documented fallbacks are checked instead of skipped.
  auto env = [](const char* name) -> std::optional<std::string> {
    const char* v = std::getenv(name);
    return v ? std::optional<std::string>(v) : std::nullopt;
  };
  std::string want;
  std::string off = env("TX_CACHE").value_or("");
  for (char& c : off) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (off == "0" || off == "off" || off == "false" || off == "no")
    want = "";
  else if (auto d = env("TX_CACHE_DIR"))
    want = *d;
  else if (auto x = env("XDG_CACHE_HOME"); x && !x->empty())
    want = *x + "/tx";
  else if (auto h = env("HOME"); h && !h->empty())
    want = *h + "/.cache/tx";
  while (want.size() > 1 && want.back() == '/') want.pop_back();
  CHECK(DiskCache::instance().dir() == want);
  CHECK(DiskCache::instance().enabled() == !want.empty());
  CHECK(DiskCache::instance().owner() == geteuid());
  CHECK(&DiskCache::instance() == &DiskCache::instance());
}

TEST_CASE("TX_CACHE=0 turns the disk cache off, whatever TX_CACHE_DIR says") {
  // Restores the variables the rest of the process may read.
  struct Env {
    std::string name;
    std::optional<std::string> old;
    explicit Env(const char* n) : name(n) {
      if (const char* v = std::getenv(n)) old = v;
    }
    ~Env() {
      if (old)
        setenv(name.c_str(), old->c_str(), 1);
      else
        unsetenv(name.c_str());
    }
  } cache_env("TX_CACHE"), dir_env("TX_CACHE_DIR"), xdg_env("XDG_CACHE_HOME");
  TempDir tmp;
  setenv("TX_CACHE_DIR", tmp.path.c_str(), 1);
  for (const char* off : {"0", "off", "OFF", "false", "no"}) {
    CAPTURE(off);
    setenv("TX_CACHE", off, 1);
    CHECK(DiskCache::dir_from_environment().empty());
    DiskCache c(DiskCache::dir_from_environment());
    CHECK_FALSE(c.store(random_key(), random_payload(64)));
  }
  setenv("TX_CACHE", "1", 1);
  CHECK(DiskCache::dir_from_environment() == tmp.path);
  unsetenv("TX_CACHE");
  CHECK(DiskCache::dir_from_environment() == tmp.path);
  setenv("TX_CACHE_DIR", "", 1);  // set but empty: off
  CHECK(DiskCache::dir_from_environment().empty());
  unsetenv("TX_CACHE_DIR");
  setenv("XDG_CACHE_HOME", tmp.path.c_str(), 1);
  CHECK(DiskCache::dir_from_environment() == tmp.path + "/tx");
  // Nothing was written while the cache was off.
  CHECK(std::filesystem::is_empty(tmp.path));
}

TEST_CASE("concurrent stores of one key never expose a partial entry") {
  TempDir tmp;
  DiskCache cache(tmp.path);
  const std::string key = random_key();
  std::vector<std::vector<char>> payloads;
  for (int i = 0; i < 4; ++i) payloads.push_back(random_payload(random_size(10000, 50000)));
  std::vector<std::thread> threads;
  std::vector<int> bad(payloads.size(), 0);
  for (std::size_t t = 0; t < payloads.size(); ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i) {
        if (!cache.store(key, payloads[t])) ++bad[t];
        auto got = cache.load(key);
        // Any of the writers' payloads, whole; a miss is not expected either
        // since every entry written is valid.
        bool whole = false;
        for (const auto& p : payloads) whole = whole || (got && *got == p);
        if (!whole) ++bad[t];
      }
    });
  for (auto& th : threads) th.join();
  for (int b : bad) CHECK(b == 0);
  CHECK(list_dir(tmp.path).size() == 1);
}

TEST_CASE("kernel_cache_key changes when any input changes") {
  using tx::runtime::kernel_cache_key;
  std::vector<char> noise = random_payload(64);
  const std::string source = "extern \"C\" __global__ void k() {} // " +
                             tx::runtime::sha256_hex(std::string(noise.begin(), noise.end()));
  const std::vector<std::string> options = {"--gpu-architecture=sm_90a", "-std=c++17"};
  const std::string base = kernel_cache_key(source, options, "sm_90a", "13.0");
  CHECK(base.size() == 64);
  CHECK(base.find_first_not_of("0123456789abcdef") == std::string::npos);
  CHECK(kernel_cache_key(source, options, "sm_90a", "13.0") == base);

  std::string edited = source;
  edited[random_size(0, edited.size() - 1)] ^= 1;
  CHECK(kernel_cache_key(edited, options, "sm_90a", "13.0") != base);
  CHECK(kernel_cache_key(source + " ", options, "sm_90a", "13.0") != base);
  CHECK(kernel_cache_key(source, {options[0]}, "sm_90a", "13.0") != base);
  CHECK(kernel_cache_key(source, {options[1], options[0]}, "sm_90a", "13.0") != base);
  CHECK(kernel_cache_key(source, {options[0], options[1], "-lineinfo"}, "sm_90a", "13.0") != base);
  CHECK(kernel_cache_key(source, options, "sm_90", "13.0") != base);
  CHECK(kernel_cache_key(source, options, "sm_100a", "13.0") != base);
  CHECK(kernel_cache_key(source, options, "sm_90a", "13.1") != base);
  CHECK(kernel_cache_key(source, options, "sm_90a", "") != base);
  // Field boundaries count: the same characters split differently differ.
  CHECK(kernel_cache_key(source, {"ab", "c"}, "sm_90a", "13.0") !=
        kernel_cache_key(source, {"a", "bc"}, "sm_90a", "13.0"));
  CHECK(kernel_cache_key("x", options, "sm_90a", "13.0") !=
        kernel_cache_key("", options, "xsm_90a", "13.0"));
}
