// Errors on the launch path are tx errors, and the process keeps working
// after each: out of device memory, a kernel that asks for more shared memory
// than a CTA may have, arguments on the wrong device, a cached binary the
// driver refuses. After every failure a fresh kernel is compiled, launched
// and checked. A kernel that traps makes the GPU unusable for the rest of the
// process (the driver's rule): a child process checks that every later GPU
// call is a tx error and that the rest goes on. Skipped (exit 77) without a GPU.
#include <doctest/doctest.h>
#include <spawn.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "test_fixtures.hpp"
#include "test_support.hpp"
#include "tx/runtime/cubin_cache.hpp"
#include "tx/runtime/cuda_driver.hpp"
#include "tx/runtime/nvrtc.hpp"
#include "tx/tx.hpp"

extern char** environ;

namespace {

using namespace tx;

constexpr std::int64_t kN = 256;

// B = sqrt(A) for 256 floats, staged through a shared buffer of `smem_elems`
// floats (at least 256) by a CTA of 256 threads.
PrimFunc staged_sqrt(std::int64_t smem_elems, const std::string& name = "staged_sqrt") {
  return T::prim_func(name, [&](Handle A_ptr, Handle B_ptr) {
    auto A = T::match_buffer(A_ptr, {kN}, f32, std::nullopt, "A");
    auto B = T::match_buffer(B_ptr, {kN}, f32, std::nullopt, "B");
    T::thread_id({256}, "tid");
    auto S = T::alloc_buffer({smem_elems}, f32, scope::shared, std::nullopt, "S");
    auto head = region({smem_elems - kN, smem_elems});  // the far end of the buffer
    Tx::cta::copy(S[head], A);
    T::cuda::cta_sync();
    Tx::cta::sqrt(S[head], S[head]);
    T::cuda::cta_sync();
    Tx::cta::copy(B, S[head]);
  });
}

// Compiles, launches and checks a kernel: the proof that the process can
// still use the GPU.
void check_gpu_still_works(std::int64_t smem_elems = kN) {
  Kernel k = compile(staged_sqrt(smem_elems, "still_works_" + std::to_string(smem_elems)),
                     {.device = Device::cuda()});
  std::vector<double> a = test::random_values(kN, f32, 0.01, 100.0);
  Tensor A = Tensor::from_doubles(a, {kN}, f32, Device::cuda());
  Tensor B = Tensor::empty({kN}, f32, Device::cuda());
  B.fill_bits(test::poison_bits(f32));
  k(A, B);
  synchronize();
  std::vector<double> b = B.to_doubles(), want(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) want[i] = quantize(std::sqrt(a[i]), f32);
  CHECK(test::max_rel_error(b, want, 1e-30, 2.5e-7) <= 1.0);
}

// Collects tx warnings while alive.
struct Warnings : test::WarningCapture {
  bool any(const std::string& s) const { return any_mentions(s); }
};

std::string what_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("the error-free path works (the baseline the other cases return to)") {
  check_gpu_still_works();
}

TEST_CASE("out of device memory is a tx error, and the GPU stays usable") {
  const runtime::DeviceInfo& dev = runtime::current_device();
  // Absurd: 4 TiB. Then just past what the device has.
  for (std::int64_t n :
       {std::int64_t{1} << 40,
        static_cast<std::int64_t>(dev.total_memory / 4 + (std::size_t{1} << 28))}) {
    CAPTURE(n);
    try {
      Tensor t = Tensor::empty({n}, f32, Device::cuda());
      FAIL("allocated " << n << " floats on a " << dev.total_memory << "-byte device");
    } catch (const Error& e) {
      INFO(e.what());
      CHECK(e.op() == "tx.cuda");
      CHECK(e.reason().find("CUDA_ERROR_OUT_OF_MEMORY") != std::string::npos);
      CHECK(e.reason().find("no longer usable") == std::string::npos);
    }
    check_gpu_still_works();
  }
  // Sizes that do not fit in 64 bits are refused before the driver is asked.
  std::string w = what_of([] { Tensor::empty({std::int64_t{1} << 62, 16}, f32, Device::cuda()); });
  CHECK(w.find("more elements than fit in 64 bits") != std::string::npos);
  w = what_of([] { Tensor::empty({std::int64_t{1} << 62}, f64, Device::cuda()); });
  CHECK(w.find("too large") != std::string::npos);
  // Live allocations that together exhaust the device: the one that fails
  // is an error; kernels still run in what is left, and everything is
  // usable again once the tensors go.
  std::vector<Tensor> held;
  const std::int64_t chunk = static_cast<std::int64_t>(dev.total_memory / 8 / 4);  // floats
  std::string failed;
  for (int i = 0; i < 12 && failed.empty(); ++i) {
    try {
      held.push_back(Tensor::empty({chunk}, f32, Device::cuda()));
    } catch (const Error& e) {
      failed = e.what();
    }
  }
  CHECK(failed.find("CUDA_ERROR_OUT_OF_MEMORY") != std::string::npos);
  REQUIRE_FALSE(held.empty());
  CHECK(held.back().data_ptr() != nullptr);
  check_gpu_still_works();
  held.clear();
  Tensor again = Tensor::empty({chunk}, f32, Device::cuda());
  CHECK(again.numel() == chunk);
  check_gpu_still_works();
  // The pool keeps freed memory for reuse; empty_cache gives it back, so
  // that other processes (the next test's child) can have it.
  again = Tensor();
  empty_cache();
  CHECK(memory_stats().reserved_bytes < static_cast<std::uint64_t>(chunk) * 4);
}

TEST_CASE("a kernel that needs more shared memory than a CTA may have is refused when compiled") {
  // Checked against the device's architecture when the kernel is compiled
  // for it (lowering's table: 227 KiB per CTA on sm_90), not at the launch.
  const runtime::DeviceInfo& dev = runtime::current_device();
  const std::int64_t limit = dev.max_shared_per_block_optin;  // 227 KiB on H100 / H200
  MESSAGE(dev.name << ": " << limit << " bytes of shared memory per CTA");
  // Just over the limit (a 227 KiB + 1 KiB f32 buffer on H100 / H200).
  const std::int64_t elems = limit / 4 + 256;
  CHECK(elems * 4 > 227 * 1024);
  try {
    compile(staged_sqrt(elems, "too_much_shared"), {.device = Device::cuda()});
    FAIL("a kernel with " << elems * 4 << " bytes of shared memory compiled for " << dev.arch());
  } catch (const Error& e) {
    INFO(e.what());
    CHECK(e.op() == "T.alloc_buffer");
    CHECK(e.operand() == "S");
    CHECK(e.reason().find("bytes of shared memory per CTA") != std::string::npos);
    CHECK(e.reason().find(dev.arch()) != std::string::npos);
    // The table agrees with the device.
    CHECK(lowering::target_limits(dev.arch()).shared_bytes_per_cta == limit);
  }
  // Under the limit but far beyond the default 48 KiB: the kernel opts in and runs.
  check_gpu_still_works((limit - 4096) / 4);
  check_gpu_still_works();
}

TEST_CASE("arguments on the wrong device are refused and the kernel still runs afterwards") {
  Kernel k = compile(staged_sqrt(kN, "device_check"), {.device = Device::cuda()});
  std::vector<double> a = test::random_values(kN, f32, 0.01, 100.0);
  Tensor A_host = Tensor::from_doubles(a, {kN}, f32, Device::host());
  Tensor B_host = Tensor::empty({kN}, f32, Device::host());
  Tensor A = A_host.to(Device::cuda());
  Tensor B = Tensor::empty({kN}, f32, Device::cuda());
  B.fill_bits(test::poison_bits(f32));

  // Input on the host, output on the GPU; then the other way round.
  try {
    k(A_host, B);
    FAIL("a host tensor was accepted by a GPU kernel");
  } catch (const Error& e) {
    INFO(e.what());
    CHECK(e.op() == "launch device_check");
    CHECK(e.operand() == "A (argument 0)");
    CHECK(e.reason().find("tensor is on host but the kernel runs on cuda:") != std::string::npos);
  }
  std::string w = what_of([&] { k(A, B_host); });
  CHECK(w.find("B (argument 1)") != std::string::npos);
  CHECK(w.find("tensor is on host") != std::string::npos);

  // A host kernel given GPU tensors is refused the same way (before any
  // question of whether the host JIT exists).
  Kernel kh = compile(staged_sqrt(kN, "device_check_host"), {.device = Device::host()});
  w = what_of([&] { kh(A, B); });
  CHECK(w.find("tensor is on cuda:") != std::string::npos);
  CHECK(w.find("kernel runs on host") != std::string::npos);

  // Nothing was launched; the same kernel now runs with the right tensors.
  std::vector<std::uint8_t> untouched = B.to_bytes();
  CHECK(untouched[3] == 0x7f);
  k(A, B);
  synchronize();
  std::vector<double> b = B.to_doubles();
  std::vector<double> want(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) want[i] = quantize(std::sqrt(a[i]), f32);
  CHECK(test::max_rel_error(b, want, 1e-30, 2.5e-7) <= 1.0);
}

// Runs only in a child process (below): after a fault the CUDA driver
// refuses every later call in the process.
TEST_CASE("trap_child") {
  if (!std::getenv("TX_TEST_TRAP_CHILD")) return;
  Kernel before = compile(staged_sqrt(kN, "before_the_trap"), {.device = Device::cuda()});
  std::vector<double> a = test::random_values(kN, f32, 0.01, 100.0);
  Tensor A = Tensor::from_doubles(a, {kN}, f32, Device::cuda());
  Tensor B = Tensor::empty({kN}, f32, Device::cuda());
  before(A, B);
  synchronize();

  const std::string arch = runtime::current_device().arch();
  auto trap = runtime::Module::load(
      runtime::nvrtc_compile("extern \"C\" __global__ void trap_now() { __trap(); }", "trap.cu",
                             arch, runtime::NvrtcTarget::cubin)
          .cubin,
      "trap.cu");
  try {
    runtime::launch(trap->function("trap_now"), {1, 1, 1}, {32, 1, 1}, 0, nullptr, "trap_now");
    runtime::synchronize("trap_now");
    FAIL("a kernel that executes __trap() completed");
  } catch (const Error& e) {
    INFO(e.what());
    CHECK(e.op() == "tx.cuda");
    CHECK(e.operand() == "trap_now");
    CHECK(e.reason().find("CUDA_ERROR_LAUNCH_FAILED") != std::string::npos);
    CHECK(e.reason().find("restart the process") != std::string::npos);
  }
  CHECK(runtime::context_lost());
  // Every later GPU use is a tx error that names the fault -- a launch of a
  // kernel that ran before, a new kernel, a new tensor, a read-back.
  for (const std::function<void()>& use : std::vector<std::function<void()>>{
           [&] { before(A, B); },
           [&] {
             Kernel k = compile(staged_sqrt(kN, "after_the_trap"), {.device = Device::cuda()});
             k(A, B);
           },
           [&] { Tensor::empty({kN}, f32, Device::cuda()); }, [&] { B.to_doubles(); },
           [&] { synchronize(); }}) {
    std::string w = what_of(use);
    CHECK(w.find("since an earlier kernel fault") != std::string::npos);
    CHECK(w.find("trap_now") != std::string::npos);
  }
  // The process goes on: lowering, CUDA generation and host tensors work,
  // and the GPU objects are released without a crash.
  Kernel host = compile(staged_sqrt(kN, "on_the_host"), {.device = Device::host()});
  CHECK(host.cuda_source().find("__global__") != std::string::npos);
  Tensor H = Tensor::from_doubles(a, {kN}, f32, Device::host());
  CHECK(H.to_doubles() == Tensor::from_doubles(a, {kN}, f32, Device::host()).to_doubles());
  A = Tensor();
  B = Tensor();
  trap.reset();
}

TEST_CASE("a kernel that traps is a tx error, and the process goes on without the GPU") {
  if (std::getenv("TX_TEST_TRAP_CHILD")) return;
  std::vector<std::string> env_storage = {"TX_TEST_TRAP_CHILD=1"};
  for (char** e = environ; *e; ++e) env_storage.push_back(*e);
  std::vector<char*> envp;
  for (auto& s : env_storage) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string self = "/proc/self/exe", filter = "--test-case=trap_child";
  char* argv[] = {self.data(), filter.data(), nullptr};
  pid_t pid = 0;
  REQUIRE(posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv, envp.data()) == 0);
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

TEST_CASE("a cached binary the driver refuses is recompiled, with a warning") {
  // A kernel this process has not loaded yet (a random constant in its name).
  const std::string name = "refused_cubin_" + std::to_string(std::uniform_int_distribution<int>(
                                                  0, 1 << 30)(test::rng()));
  Kernel k = compile(staged_sqrt(kN, name), {.device = Device::cuda()});
  const std::string arch = runtime::current_device().arch();
  runtime::DiskCache& cache = runtime::DiskCache::instance();
  if (!cache.enabled()) {
    MESSAGE("the disk cache is disabled (TX_CACHE=0): nothing to check");
    return;
  }
  // A valid entry under the right key whose binary is for an older GPU: the
  // header checks pass, the driver says no.
  const std::string key = runtime::kernel_cache_key(
      k.cuda_source(), runtime::nvrtc_default_options(arch), arch, runtime::nvrtc_version_string());
  std::vector<char> foreign =
      runtime::nvrtc_compile(k.cuda_source(), name + ".cu", "sm_75", runtime::NvrtcTarget::cubin)
          .cubin;
  REQUIRE(cache.store(key, foreign));
  Warnings w;
  std::vector<double> a = test::random_values(kN, f32, 0.01, 100.0);
  Tensor A = Tensor::from_doubles(a, {kN}, f32, Device::cuda());
  Tensor B = Tensor::empty({kN}, f32, Device::cuda());
  B.fill_bits(test::poison_bits(f32));
  k(A, B);
  synchronize();
  std::vector<double> b = B.to_doubles(), want(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) want[i] = quantize(std::sqrt(a[i]), f32);
  CHECK(test::max_rel_error(b, want, 1e-30, 2.5e-7) <= 1.0);
  CHECK(w.any("does not load on this GPU"));
  // The entry now holds the binary for this GPU.
  std::optional<std::vector<char>> now = cache.load(key);
  REQUIRE(now.has_value());
  CHECK(*now != foreign);
}
