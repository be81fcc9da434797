// The CUDA driver layer on a real GPU: device queries, memory, NVRTC ->
// cubin -> Module -> launch, launch errors, timing, CUDA tensors, and a
// kernel fault that leaves the process running (without the GPU). Skipped (exit 77) without a GPU.
#include <doctest/doctest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "test_support.hpp"
#include "tx/error.hpp"
#include "tx/runtime/cuda_driver.hpp"
#include "tx/runtime/nvrtc.hpp"
#include "tx/runtime/tensor.hpp"

extern char** environ;

namespace {

namespace rt = tx::runtime;
using tx::Device;
using tx::Tensor;

const char* kKernels = R"(
extern "C" __global__ void affine(const float* __restrict__ x, float* __restrict__ y, float a,
                                  float b, unsigned n) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + b;
}

// Sums `count` floats staged through dynamic shared memory; one block.
extern "C" __global__ void stage_sum(const float* x, float* out, unsigned count) {
  extern __shared__ float stage[];
  for (unsigned i = threadIdx.x; i < count; i += blockDim.x) stage[i] = x[i];
  __syncthreads();
  if (threadIdx.x == 0) {
    float s = 0;
    for (unsigned i = 0; i < count; ++i) s += stage[i];
    *out = s;
  }
}

extern "C" __global__ void write_at(unsigned long long address) {
  *(volatile int*)address = 1;
}
)";

// One module for the whole suite, built for this device's exact arch.
std::shared_ptr<rt::Module> module() {
  static std::shared_ptr<rt::Module> m = [] {
    const std::string arch = rt::current_device().arch();
    rt::NvrtcOutput out =
        rt::nvrtc_compile(kKernels, "gpu_runtime.cu", arch, rt::NvrtcTarget::cubin);
    return rt::Module::load(out.cubin, "gpu_runtime.cu");
  }();
  return m;
}

std::vector<float> random_floats(std::size_t n) {
  std::vector<double> d = tx::test::random_values(n, tx::f32, -100.0, 100.0);
  return std::vector<float>(d.begin(), d.end());
}

// Device memory released at scope exit.
struct DeviceBuffer {
  rt::DevicePtr ptr = 0;
  explicit DeviceBuffer(std::size_t bytes) : ptr(rt::device_alloc(bytes)) {}
  ~DeviceBuffer() { rt::device_free(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

bool same_values(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (!(a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i])))) return false;
  return true;
}

}  // namespace

TEST_CASE("device info describes the GPU") {
  std::string why;
  REQUIRE_MESSAGE(rt::cuda_available(&why), why);
  const rt::DeviceInfo& d = rt::current_device();
  MESSAGE(d.name << ", sm_" << d.cc_major << d.cc_minor << ", " << d.sm_count << " SMs, driver "
                 << rt::cuda_driver_version());
  CHECK_FALSE(d.name.empty());
  CHECK(d.cc_major >= 7);
  CHECK(d.sm_count > 0);
  CHECK(d.total_memory > (std::size_t{1} << 30));
  CHECK(d.max_threads_per_block == 1024);
  CHECK(d.max_shared_per_block == 48 * 1024);
  CHECK(d.max_shared_per_block_optin >= d.max_shared_per_block);
  CHECK(d.l2_bytes > 0);
  CHECK(rt::cuda_driver_version() >= 12000);
  const std::string arch = d.arch();
  if (d.cc_major == 9 && d.cc_minor == 0)
    CHECK(arch == "sm_90a");
  else
    CHECK(arch == "sm_" + std::to_string(d.cc_major) + std::to_string(d.cc_minor));
  // The same object on every call.
  CHECK(&rt::current_device() == &d);
}

TEST_CASE("device memory round-trips random bytes") {
  const std::size_t n = (std::size_t{1} << 20) + tx::test::rng()() % 4096;
  std::vector<std::uint8_t> src(n), back(n, 0);
  for (auto& b : src) b = static_cast<std::uint8_t>(tx::test::rng()());
  DeviceBuffer a(n), b(n);
  rt::copy_to_device(a.ptr, src.data(), n);
  rt::copy_device_to_device(b.ptr, a.ptr, n);
  rt::copy_to_host(back.data(), b.ptr, n);
  CHECK(back == src);
  CHECK(a.ptr % 256 == 0);

  const auto value = static_cast<unsigned char>(1 + tx::test::rng()() % 255);
  rt::memset_device(b.ptr, value, n);
  rt::copy_to_host(back.data(), b.ptr, n);
  CHECK(back == std::vector<std::uint8_t>(n, value));
  // The source buffer is unchanged by the memset of the other, also when read
  // from a thread that has never used CUDA (the context is made current there).
  std::fill(back.begin(), back.end(), 0);
  std::string thread_error;
  std::thread reader([&] {
    try {
      rt::copy_to_host(back.data(), a.ptr, n);
    } catch (const tx::Error& e) {
      thread_error = e.what();
    }
  });
  reader.join();
  CHECK(thread_error == "");
  CHECK(back == src);
}

TEST_CASE("an NVRTC cubin loads and its kernel computes y = 2x + 1") {
  auto m = module();
  void* f = m->function("affine");
  REQUIRE(f != nullptr);

  // About a million elements, not a multiple of the block, plus a guard
  // zone after the end that the kernel must not touch.
  const unsigned n = (1u << 20) + static_cast<unsigned>(tx::test::rng()() % 1000) + 1;
  const unsigned guard = 256;
  std::vector<float> x = random_floats(n);
  DeviceBuffer dx(n * sizeof(float)), dy((n + guard) * sizeof(float));
  rt::copy_to_device(dx.ptr, x.data(), n * sizeof(float));
  rt::memset_device(dy.ptr, 0xff, (n + guard) * sizeof(float));  // NaN everywhere

  float a = 2.0f, b = 1.0f;
  unsigned count = n;
  void* args[] = {&dx.ptr, &dy.ptr, &a, &b, &count};
  const unsigned block = 256;
  rt::launch(f, {(n + block - 1) / block, 1, 1}, {block, 1, 1}, 0, args, "affine");
  rt::synchronize("affine");

  std::vector<float> y(n + guard);
  rt::copy_to_host(y.data(), dy.ptr, y.size() * sizeof(float));
  std::size_t wrong = 0;
  for (unsigned i = 0; i < n; ++i)
    if (y[i] != 2.0f * x[i] + 1.0f) ++wrong;  // exact: 2x is exact, one rounding
  CHECK(wrong == 0);
  std::size_t touched = 0;
  for (unsigned i = n; i < n + guard; ++i)
    if (!std::isnan(y[i])) ++touched;
  CHECK(touched == 0);
}

TEST_CASE("more than 48 KiB of dynamic shared memory is opted into") {
  const rt::DeviceInfo& d = rt::current_device();
  const unsigned count = 24 * 1024;  // 96 KiB of floats
  if (static_cast<std::size_t>(d.max_shared_per_block_optin) < count * sizeof(float)) {
    MESSAGE("this GPU allows only " << d.max_shared_per_block_optin << " bytes of shared memory");
    return;
  }
  std::vector<double> xd = tx::test::random_values(count, tx::f32, 0.5, 1.5);
  std::vector<float> x(xd.begin(), xd.end());
  DeviceBuffer dx(count * sizeof(float)), dout(sizeof(float));
  rt::copy_to_device(dx.ptr, x.data(), count * sizeof(float));
  unsigned c = count;
  void* args[] = {&dx.ptr, &dout.ptr, &c};
  rt::launch(module()->function("stage_sum"), {1, 1, 1}, {256, 1, 1}, count * sizeof(float), args,
             "stage_sum");
  rt::synchronize("stage_sum");
  float got = 0;
  rt::copy_to_host(&got, dout.ptr, sizeof got);
  float want = 0;
  for (float v : x) want += v;  // the same order as the kernel's loop
  CHECK(got == want);
}

TEST_CASE("launch errors name the kernel and leave the context usable") {
  void* f = module()->function("affine");
  DeviceBuffer dx(sizeof(float)), dy(sizeof(float));
  float a = 2.0f, b = 1.0f;
  unsigned n = 1;
  void* args[] = {&dx.ptr, &dy.ptr, &a, &b, &n};
  try {
    rt::launch(f, {1, 1, 1}, {4096, 1, 1}, 0, args, "affine");
    FAIL("expected a tx::Error");
  } catch (const tx::Error& e) {
    CHECK(e.op() == "tx.cuda");
    CHECK(e.operand() == "affine");
    CHECK(e.reason().find("cuLaunchKernel failed: CUDA_ERROR_") != std::string::npos);
    CHECK(e.reason().find("no longer usable") == std::string::npos);
    CHECK(e.detail().find("block 4096x1x1") != std::string::npos);
  }
  // Too much shared memory fails in the opt-in.
  const std::size_t too_much =
      static_cast<std::size_t>(rt::current_device().max_shared_per_block_optin) + 1024;
  CHECK_THROWS_AS(rt::launch(f, {1, 1, 1}, {32, 1, 1}, too_much, args, "affine"), tx::Error);
  CHECK_NOTHROW(rt::synchronize("after a refused launch"));

  // A missing kernel and a broken image are tx errors too.
  try {
    module()->function("no_such_kernel");
    FAIL("expected a tx::Error");
  } catch (const tx::Error& e) {
    CHECK(e.operand() == "no_such_kernel");
    CHECK(e.reason().find("cuModuleGetFunction") != std::string::npos);
  }
  // Not ELF, so the driver reads it as PTX text: it must end in a NUL.
  const std::string text = "not a module " + std::to_string(tx::test::rng()());
  std::vector<char> garbage(text.begin(), text.end());
  garbage.push_back('\0');
  CHECK_THROWS_AS(rt::Module::load(garbage, "garbage"), tx::Error);
  CHECK_THROWS_AS(rt::Module::load({}, "empty"), tx::Error);

  // The context still works.
  float x = static_cast<float>(tx::test::random_values(1, tx::f32)[0]);
  rt::copy_to_device(dx.ptr, &x, sizeof x);
  rt::launch(f, {1, 1, 1}, {32, 1, 1}, 0, args, "affine");
  rt::synchronize("affine");
  float y = 0;
  rt::copy_to_host(&y, dy.ptr, sizeof y);
  CHECK(y == 2.0f * x + 1.0f);
}

TEST_CASE("EventTimer measures a positive time") {
  void* f = module()->function("affine");
  const unsigned n = 1u << 22;
  DeviceBuffer dx(n * sizeof(float)), dy(n * sizeof(float));
  rt::memset_device(dx.ptr, 0x3f, n * sizeof(float));
  float a = 2.0f, b = 1.0f;
  unsigned count = n;
  void* args[] = {&dx.ptr, &dy.ptr, &a, &b, &count};
  rt::EventTimer timer;
  timer.start();
  for (int i = 0; i < 10; ++i) rt::launch(f, {n / 256, 1, 1}, {256, 1, 1}, 0, args, "affine");
  timer.stop();
  const float ms = timer.elapsed_ms();
  MESSAGE("10 launches over 4M floats: " << ms << " ms");
  CHECK(ms > 0.0f);
  CHECK(ms < 10000.0f);
  rt::synchronize("affine");
}

TEST_CASE("CUDA tensors round-trip values and copy between devices") {
  if (!std::getenv("TX_DEVICE")) CHECK(tx::default_device() == Device::cuda());
  for (tx::DType t : {tx::f32, tx::f16, tx::bf16, tx::f8e4m3, tx::f8e5m2, tx::f64, tx::i8, tx::i32,
                      tx::u16, tx::u64, tx::boolean}) {
    CAPTURE(t.name());
    const std::int64_t n = 1000 + static_cast<std::int64_t>(tx::test::rng()() % 1000);
    const double range = t.is_float() && t.bits <= 16 ? 100.0 : 1e6;
    const std::vector<double> v =
        tx::test::random_values(static_cast<std::size_t>(n), t, -range, range);

    Tensor g = Tensor::from_doubles(v, {n}, t, Device::cuda());
    CHECK(g.device() == Device::cuda());
    CHECK(reinterpret_cast<std::uintptr_t>(g.data_ptr()) % 256 == 0);
    CHECK(same_values(g.to_doubles(), v));

    Tensor h = g.to(Device::host());
    CHECK(h.device() == Device::host());
    CHECK(h.data_ptr() != g.data_ptr());
    CHECK(same_values(h.to_doubles(), v));

    Tensor g2 = h.to(Device::cuda());
    CHECK(g2.device() == Device::cuda());
    CHECK(g2.data_ptr() != g.data_ptr());
    CHECK(same_values(g2.to_doubles(), v));
    CHECK(g.to(Device::cuda()).data_ptr() == g.data_ptr());

    // Poisoning the copy leaves the original alone.
    g2.fill_bits(tx::test::poison_bits(t));
    CHECK(same_values(g.to_doubles(), v));
    const std::vector<std::uint8_t> poisoned = g2.to_bytes();
    const std::uint64_t pattern = tx::test::poison_bits(t);
    bool all = true;
    for (std::size_t i = 0; i < poisoned.size(); i += static_cast<std::size_t>(t.bytes()))
      all = all &&
            std::memcmp(poisoned.data() + i, &pattern, static_cast<std::size_t>(t.bytes())) == 0;
    CHECK(all);
  }
  CHECK_THROWS_AS(Tensor::empty({4}, tx::f32, Device::cuda(rt::current_device().ordinal + 1)),
                  tx::Error);
}

// Runs only in a child process (below): a fault makes the GPU unusable for
// the rest of the process.
TEST_CASE("sticky_fault_child") {
  if (!std::getenv("TX_TEST_STICKY_CHILD")) return;
  void* f = module()->function("write_at");
  unsigned long long address = 0x10;  // unmapped
  void* args[] = {&address};
  rt::launch(f, {1, 1, 1}, {1, 1, 1}, 0, args, "write_at");
  try {
    rt::synchronize("write_at");
    FAIL("expected a tx::Error");
  } catch (const tx::Error& e) {
    CHECK(e.operand() == "write_at");
    CHECK(e.reason().find("CUDA_ERROR_ILLEGAL_ADDRESS") != std::string::npos);
    CHECK(e.reason().find("unusable in this process") != std::string::npos);
  }
  CHECK(rt::context_lost());
  // Every later GPU call fails at once, naming the first fault; none crashes.
  for (int i = 0; i < 3; ++i) {
    try {
      rt::device_alloc(64);
      FAIL("device_alloc after a fault succeeded");
    } catch (const tx::Error& e) {
      CHECK(e.reason().find("since an earlier kernel fault") != std::string::npos);
      CHECK(e.reason().find("write_at") != std::string::npos);
    }
  }
  CHECK_THROWS_AS(Tensor::empty({4}, tx::f32, Device::cuda()), tx::Error);
  // Host work goes on.
  std::vector<double> v = tx::test::random_values(64, tx::f32, -10.0, 10.0);
  CHECK(Tensor::from_doubles(v, {64}, tx::f32, Device::host()).to_doubles() == v);
}

TEST_CASE("a kernel fault is a tx error, and the process goes on without the GPU") {
  if (std::getenv("TX_TEST_STICKY_CHILD")) return;
  std::vector<std::string> env_storage = {"TX_TEST_STICKY_CHILD=1"};
  for (char** e = environ; *e; ++e) env_storage.push_back(*e);
  std::vector<char*> envp;
  for (auto& s : env_storage) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string self = "/proc/self/exe", filter = "--test-case=sticky_fault_child";
  char* argv[] = {self.data(), filter.data(), nullptr};
  pid_t pid = 0;
  REQUIRE(posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv, envp.data()) == 0);
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}
