// The host JIT's disk cache (issue 45): a kernel compiled by one process is
// linked from TX_CACHE_DIR by the next, which computes what the first did;
// damaged entries are ignored, recompiled and rewritten. Each "process" here
// is this test binary run again (its child case, selected by
// TX_TEST_CACHE_CHILD) with a private cache folder.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "hopper_cases.hpp"
#include "test_fixtures.hpp"
#include "test_support.hpp"
#include "tx/runtime/disk_cache.hpp"
#include "tx/tx.hpp"

extern char** environ;

using namespace tx;
using tx::test::read_file;
using tx::test::TempDir;
using tx::test::write_file;

namespace {

constexpr std::int64_t kCtas = 4, kThreads = 128, kN = kCtas * kThreads;

// B = A * scale + exp(A / 4): a kernel whose key changes with `scale`, so
// that every run of the suite compiles one no cache has seen.
PrimFunc affine(float scale) {
  return T::prim_func("affine", [&](Handle A_ptr, Handle B_ptr) {
    auto A = T::match_buffer(A_ptr, {kN}, f32);
    auto B = T::match_buffer(B_ptr, {kN}, f32);
    auto c = T::cta_id({kCtas});
    auto t = T::thread_id({kThreads});
    Var i = T::let(c * kThreads + t);
    B(i) = A(i) * scale + exp(A(i) * 0.25f);
  });
}

// B(t) = A(63 - t): racy when A and B are one tensor (the checked mode's
// report must come out of a kernel loaded from disk as it does compiled).
PrimFunc reverse(float scale) {
  return T::prim_func("reverse", [&](Handle A_ptr, Handle B_ptr) {
    auto A = T::match_buffer(A_ptr, {64}, f32);
    auto B = T::match_buffer(B_ptr, {64}, f32);
    auto t = T::thread_id({64});
    B(t) = A(63 - t) * scale;
  });
}

std::vector<double> inputs(std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-3.0, 3.0);
  std::vector<double> v(kN);
  for (double& x : v) x = static_cast<double>(static_cast<float>(u(rng)));
  return v;
}

struct ChildResult {
  std::string from;    // where host_compile found the kernel: "jit", "disk", "memory"
  std::string output;  // the output tensor's bytes, or the error text
  std::string log;     // the child's stdout and stderr (tx warnings go to stderr)
  int status = -1;
};

// Runs this binary's child case with TX_CACHE_DIR=dir and the given job.
ChildResult run_child(const std::string& dir, const std::string& job) {
  const std::string out = (std::filesystem::path(dir).parent_path() / "child.out").string();
  const std::string log = out + ".log";
  std::vector<std::string> env_store;
  for (char** e = environ; *e; ++e) {
    std::string kv = *e;
    if (kv.rfind("TX_CACHE_DIR=", 0) == 0 || kv.rfind("TX_CACHE=", 0) == 0 ||
        kv.rfind("TX_HOST_CACHE=", 0) == 0 || kv.rfind("TX_CHECK=", 0) == 0)
      continue;
    env_store.push_back(kv);
  }
  env_store.push_back("TX_CACHE_DIR=" + dir);
  env_store.push_back("TX_TEST_CACHE_CHILD=" + job);
  env_store.push_back("TX_TEST_CHILD_OUT=" + out);
  std::vector<char*> envp;
  for (std::string& s : env_store) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string exe = std::filesystem::read_symlink("/proc/self/exe").string();
  std::string filter = "--test-case=host JIT disk cache: the child process";
  std::string quiet = "--no-version";
  std::vector<char*> argv = {exe.data(), filter.data(), quiet.data(), nullptr};
  std::filesystem::remove(out);
  const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  REQUIRE(fd >= 0);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    dup2(fd, 1);
    dup2(fd, 2);
    execve(exe.c_str(), argv.data(), envp.data());
    _exit(127);
  }
  ::close(fd);
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  ChildResult r;
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.log = read_file(log);
  const std::string text = read_file(out);
  const std::size_t nl = text.find('\n');
  if (nl != std::string::npos) {
    r.from = text.substr(0, nl);
    r.output = text.substr(nl + 1);
  }
  return r;
}

std::vector<std::string> entries(const std::string& dir) {
  std::vector<std::string> v;
  for (const auto& e : std::filesystem::directory_iterator(dir)) v.push_back(e.path().string());
  return v;
}

// The key an entry was stored under: its header, as disk_cache.cpp writes
// it ("TXCACHE1" | u32 format | str tx version | str IR version | str key ...).
std::string entry_key(const std::string& bytes) {
  std::size_t at = 12;
  auto str = [&] {
    REQUIRE(at + 4 <= bytes.size());
    std::uint32_t n = 0;
    for (int i = 0; i < 4; ++i)
      n |= std::uint32_t{static_cast<unsigned char>(bytes[at + static_cast<std::size_t>(i)])}
           << (8 * i);
    at += 4;
    REQUIRE(at + n <= bytes.size());
    std::string s = bytes.substr(at, n);
    at += n;
    return s;
  };
  str();  // tx version
  str();  // IR version
  return str();
}

std::vector<float> as_floats(const std::string& bytes) {
  std::vector<float> v(bytes.size() / sizeof(float));
  std::memcpy(v.data(), bytes.data(), v.size() * sizeof(float));
  return v;
}

}  // namespace

// The child: compiles the job's kernel through host_compile (reporting where
// it came from), runs it and writes "from\n" + the output's bytes (or the
// error's text) to TX_TEST_CHILD_OUT.
TEST_CASE("host JIT disk cache: the child process" *
          doctest::skip(std::getenv("TX_TEST_CACHE_CHILD") == nullptr)) {
  const std::string job = std::getenv("TX_TEST_CACHE_CHILD");
  const char* out_path = std::getenv("TX_TEST_CHILD_OUT");
  REQUIRE(out_path);
  // job: "affine <scale> <seed>", "checked <scale> <seed>", "race <scale>", "fibers <P>"
  std::istringstream in(job);
  std::string kind;
  in >> kind;
  std::string from, output;
  if (kind == "affine" || kind == "checked") {
    float scale = 0;
    std::uint64_t seed = 0;
    in >> scale >> seed;
    const bool checked = kind == "checked";
    Kernel k = compile(affine(scale), {.device = Device::host(), .checked = checked});
    runtime::host_compile(k.info(), checked, &from);
    Tensor A = Tensor::from_doubles(inputs(seed), {kN}, f32, Device::host());
    Tensor B = Tensor::empty({kN}, f32, Device::host());
    B.fill_bits(test::poison_bits(f32));
    k(A, B);
    std::vector<std::uint8_t> b = B.to_bytes();
    output.assign(b.begin(), b.end());
  } else if (kind == "race") {
    float scale = 0;
    in >> scale;
    Kernel k = compile(reverse(scale), {.checked = true});
    runtime::host_compile(k.info(), true, &from);
    std::vector<double> x = inputs(1);
    x.resize(64);
    Tensor X = Tensor::from_doubles(x, {64}, f32, Device::host());
    try {
      k(X, X);
      output = "no error";
    } catch (const Error& e) {
      output = e.what();
    }
  } else if (kind == "fibers") {
    std::int64_t P = 0;
    in >> P;
    Kernel k = compile(test::pipeline_phases(P), {.device = Device::host()});
    runtime::host_compile(k.info(), false, &from);
    Tensor O = Tensor::empty({1, P, 2, 128}, i32, Device::host());
    O.fill_bits(test::poison_bits(i32));
    k(O);
    output = test::pipeline_phases_ok(O.to_doubles(), P) ? "ok" : "wrong values";
  } else {
    FAIL("unknown job " << job);
  }
  write_file(out_path, from + "\n" + output);
}

TEST_CASE("a second process links the host kernel from the disk cache and computes the same") {
  TempDir tmp;
  const std::string dir = tmp.path + "/cache";
  const float scale = static_cast<float>(test::random_values(1, f32, 0.5, 2.0)[0]);
  const std::uint64_t seed = test::rng()();
  const std::string job = "affine " + std::to_string(scale) + " " + std::to_string(seed);

  ChildResult first = run_child(dir, job);
  INFO(first.log);
  REQUIRE(first.status == 0);
  CHECK(first.from == "jit");
  REQUIRE(entries(dir).size() == 1);

  ChildResult second = run_child(dir, job);
  INFO(second.log);
  REQUIRE(second.status == 0);
  CHECK(second.from == "disk");
  CHECK(second.output == first.output);
  CHECK(entries(dir).size() == 1);

  // Both against a double-precision reference (exp within a few ulp).
  const std::vector<double> a = inputs(seed);
  const std::vector<float> got = as_floats(second.output);
  REQUIRE(got.size() == a.size());
  std::vector<double> want(a.size()), g(got.begin(), got.end());
  for (std::size_t i = 0; i < a.size(); ++i)
    want[i] = a[i] * static_cast<double>(scale) + std::exp(a[i] * 0.25);
  CHECK(test::max_rel_error(g, want, 1e-6, 4e-7) <= 1.0);

  // Another kernel (another scale) is another entry, compiled.
  ChildResult other =
      run_child(dir, "affine " + std::to_string(scale * 2) + " " + std::to_string(seed));
  CHECK(other.status == 0);
  CHECK(other.from == "jit");
  CHECK(entries(dir).size() == 2);
}

TEST_CASE("a damaged host-JIT cache entry is recompiled and rewritten, never run") {
  TempDir tmp;
  const std::string dir = tmp.path + "/cache";
  const float scale = static_cast<float>(test::random_values(1, f32, 0.5, 2.0)[0]);
  const std::uint64_t seed = test::rng()();
  const std::string job = "affine " + std::to_string(scale) + " " + std::to_string(seed);
  ChildResult good = run_child(dir, job);
  REQUIRE(good.status == 0);
  REQUIRE(good.from == "jit");
  REQUIRE(entries(dir).size() == 1);
  const std::string path = entries(dir)[0];
  const std::string pristine = read_file(path);
  const std::string key = entry_key(pristine);

  // Recompiled, the same result, and the entry is good again afterwards.
  auto recompiles = [&](const std::string& what, const std::string& warning) {
    CAPTURE(what);
    ChildResult r = run_child(dir, job);
    INFO(r.log);
    CHECK(r.status == 0);
    CHECK(r.from == "jit");
    CHECK(r.output == good.output);
    if (!warning.empty()) CHECK(r.log.find(warning) != std::string::npos);
    ChildResult again = run_child(dir, job);
    CHECK(again.status == 0);
    CHECK(again.from == "disk");
    CHECK(again.output == good.output);
  };

  // One flipped byte in the object: the checksum fails.
  std::string flipped = pristine;
  flipped[flipped.size() - 100] = static_cast<char>(flipped[flipped.size() - 100] ^ 0x10);
  write_file(path, flipped);
  recompiles("flipped byte", "checksum mismatch");

  // Cut short.
  write_file(path, pristine.substr(0, pristine.size() / 2));
  recompiles("truncated", "truncated payload");

  // A well-formed entry under the right key whose payload is not a host kernel.
  runtime::DiskCache cache(dir);
  REQUIRE(cache.store(key, std::vector<char>{'n', 'o', 't', ' ', 'a', 'n', ' ', 'o', 'b', 'j'}));
  recompiles("foreign payload", "does not hold this host kernel");

  // A host-kernel payload whose object file is garbage: it does not link.
  std::string payload = "TXHOSTO1";
  payload += '\0';                                 // region schedule
  payload += std::string("\x0b\0\0\0", 4);         // symbol length
  payload += "tx_host_aff";                        // symbol
  payload += std::string(8, '\0');                 // scratch bytes
  payload += std::string(4096, '\x7f') + "ELF??";  // not an object file
  REQUIRE(cache.store(key, std::vector<char>(payload.begin(), payload.end())));
  recompiles("garbage object", "cannot link");
  // Compiles are deterministic: the rewritten entry is the first one, byte for byte.
  CHECK(read_file(path) == pristine);
}

TEST_CASE("checked and fiber kernels are cached on disk too") {
  TempDir tmp;
  const std::string dir = tmp.path + "/cache";
  const float scale = static_cast<float>(test::random_values(1, f32, 0.5, 2.0)[0]);
  const std::uint64_t seed = test::rng()();

  // The checked mode: its host form is another kernel, with another entry.
  const std::string job = "checked " + std::to_string(scale) + " " + std::to_string(seed);
  ChildResult c1 = run_child(dir, job), c2 = run_child(dir, job);
  CHECK(c1.status == 0);
  CHECK(c2.status == 0);
  CHECK(c1.from == "jit");
  CHECK(c2.from == "disk");
  CHECK(c1.output == c2.output);
  ChildResult plain =
      run_child(dir, "affine " + std::to_string(scale) + " " + std::to_string(seed));
  CHECK(plain.from == "jit");
  CHECK(plain.output == c1.output);

  // A checked kernel from disk reports a race as the compiled one does: the
  // check plan (names, lines) is this process's.
  const std::string race = "race " + std::to_string(scale);
  ChildResult r1 = run_child(dir, race), r2 = run_child(dir, race);
  INFO(r1.log);
  CHECK(r1.status == 0);
  CHECK(r1.from == "jit");
  CHECK(r2.from == "disk");
  CHECK(r1.output.find("race on global memory shared by arguments B and A") != std::string::npos);
  CHECK(r2.output == r1.output);

  // The fiber schedule (mbarrier pipelines).
  const std::int64_t P = 3 + static_cast<std::int64_t>(test::rng()() % 40);
  ChildResult f1 = run_child(dir, "fibers " + std::to_string(P));
  ChildResult f2 = run_child(dir, "fibers " + std::to_string(P));
  INFO(f1.log);
  INFO(f2.log);
  CHECK(f1.from == "jit");
  CHECK(f2.from == "disk");
  CHECK(f1.output == "ok");
  CHECK(f2.output == "ok");
}

TEST_CASE("in one process: a cleared memory cache goes to the disk, TX_HOST_CACHE=0 to the JIT") {
  if (!runtime::DiskCache::instance().enabled()) {
    MESSAGE("the disk cache is off in this environment (TX_CACHE=0 or no folder)");
    return;
  }
  const float scale = static_cast<float>(test::random_values(1, f32, 0.5, 2.0)[0]);
  Kernel k = compile(affine(scale), {.device = Device::host()});
  std::string from;
  auto first = runtime::host_compile(k.info(), false, &from);
  CHECK(from == "jit");
  auto again = runtime::host_compile(k.info(), false, &from);
  CHECK(from == "memory");
  CHECK(again == first);
  runtime::host_cache_clear_memory();
  auto loaded = runtime::host_compile(k.info(), false, &from);
  CHECK(from == "disk");
  CHECK(loaded != first);
  setenv("TX_HOST_CACHE", "0", 1);
  runtime::host_compile(k.info(), false, &from);
  unsetenv("TX_HOST_CACHE");
  CHECK(from == "jit");

  // The kernel from disk and the one compiled compute the same bits.
  std::vector<double> a = test::random_values(kN, f32, -3, 3);
  Tensor A = Tensor::from_doubles(a, {kN}, f32, Device::host());
  Tensor B1 = Tensor::empty({kN}, f32, Device::host()),
         B2 = Tensor::empty({kN}, f32, Device::host());
  B1.fill_bits(test::poison_bits(f32));
  B2.fill_bits(test::poison_bits(f32));
  void* args1[] = {A.data_ptr(), B1.data_ptr()};
  void* args2[] = {A.data_ptr(), B2.data_ptr()};
  std::int64_t elems[] = {kN, kN};
  first->run({args1, {kCtas, 1, 1}, elems, {}});
  loaded->run({args2, {kCtas, 1, 1}, elems, {}});
  CHECK(B1.to_bytes() == B2.to_bytes());
  std::vector<double> got = B2.to_doubles(), want(a.size());
  for (std::size_t i = 0; i < a.size(); ++i)
    want[i] = a[i] * static_cast<double>(scale) + std::exp(a[i] * 0.25);
  CHECK(test::max_rel_error(got, want, 1e-6, 4e-7) <= 1.0);
}
