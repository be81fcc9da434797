// NVRTC through dlopen: PTX and cubins for sm_90a without a GPU, and
// compile errors that point at the offending source line.
#include <doctest/doctest.h>
#include <sys/stat.h>

#include <random>
#include <string>
#include <vector>

#include "test_support.hpp"
#include "tx/error.hpp"
#include "tx/runtime/nvrtc.hpp"

namespace {

using tx::runtime::nvrtc_compile;
using tx::runtime::NvrtcTarget;

// 128-bit copies global -> shared -> global, the pattern tx's vectorized
// copies generate. const __restrict__ lets NVVM use the non-coherent path.
const char* kCopy128 = R"(extern "C" __global__ void copy128(const uint4* __restrict__ src,
                                                     uint4* __restrict__ dst) {
  __shared__ uint4 tile[128];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  *(uint4*)&tile[threadIdx.x] = *(const uint4*)&src[i];
  __syncthreads();
  *(uint4*)&dst[i] = *(const uint4*)&tile[(threadIdx.x + 1) % blockDim.x];
}
)";

bool contains(const std::string& s, const std::string& what) {
  return s.find(what) != std::string::npos;
}

}  // namespace

TEST_CASE("NVRTC loads and is CUDA 12 or newer") {
  std::string why;
  REQUIRE_MESSAGE(tx::runtime::nvrtc_available(&why), why);
  auto [major, minor] = tx::runtime::nvrtc_version();
  MESSAGE("NVRTC " << major << "." << minor);
  CHECK(major >= 12);
  CHECK(minor >= 0);
}

TEST_CASE("the default options name the arch, C++17 and an include dir with cuda_fp16.h") {
  const std::vector<std::string> opts = tx::runtime::nvrtc_default_options("sm_90a");
  auto has = [&](const std::string& o) {
    for (const auto& x : opts)
      if (x == o) return true;
    return false;
  };
  CHECK(has("--gpu-architecture=sm_90a"));
  CHECK(has("-std=c++17"));
  CHECK(has("-default-device"));
  std::string include;
  for (const auto& o : opts)
    if (o.rfind("-I", 0) == 0) include = o.substr(2);
  REQUIRE_FALSE(include.empty());
  struct stat st {};
  CHECK(stat((include + "/cuda_fp16.h").c_str(), &st) == 0);
}

TEST_CASE("128-bit copies compile to vector loads and stores for sm_90a") {
  auto out = nvrtc_compile(kCopy128, "copy128.cu", "sm_90a", NvrtcTarget::ptx);
  CHECK(out.cubin.empty());
  REQUIRE_FALSE(out.ptx.empty());
  CHECK(out.ptx.back() != '\0');
  CHECK(contains(out.ptx, ".target sm_90a"));
  CHECK(contains(out.ptx, ".entry copy128("));
  // Observed with NVRTC 13.0: one instruction per 16-byte access.
  CHECK(contains(out.ptx, "ld.global.nc.v4.u32"));
  CHECK(contains(out.ptx, "st.shared.v4.u32"));
  CHECK(contains(out.ptx, "ld.shared.v4.u32"));
  CHECK(contains(out.ptx, "st.global.v4.u32"));
  // No scalar fallback for the copies.
  CHECK_FALSE(contains(out.ptx, "ld.global.u32"));
  CHECK_FALSE(contains(out.ptx, "st.shared.u32"));
}

TEST_CASE("the virtual arch compute_90a also gives PTX") {
  auto out = nvrtc_compile(kCopy128, "copy128.cu", "compute_90a", NvrtcTarget::ptx);
  CHECK(contains(out.ptx, ".target sm_90a"));
  CHECK(contains(out.ptx, "st.shared.v4.u32"));
}

TEST_CASE("a cubin for sm_90a is a 64-bit ELF image") {
  auto out = nvrtc_compile(kCopy128, "copy128.cu", "sm_90a", NvrtcTarget::cubin);
  CHECK(out.ptx.empty());
  REQUIRE(out.cubin.size() > 64);
  CHECK(out.cubin[0] == '\x7f');
  CHECK(out.cubin[1] == 'E');
  CHECK(out.cubin[2] == 'L');
  CHECK(out.cubin[3] == 'F');
  CHECK(out.cubin[4] == 2);  // ELFCLASS64
  // The kernel's name is in the symbol table.
  CHECK(contains(std::string(out.cubin.begin(), out.cubin.end()), "copy128"));
}

TEST_CASE("a cubin needs a real architecture") {
  try {
    nvrtc_compile(kCopy128, "copy128.cu", "compute_90a", NvrtcTarget::cubin);
    FAIL("expected a tx::Error");
  } catch (const tx::Error& e) {
    CHECK(e.op() == "tx.nvrtc");
    CHECK(e.operand() == "copy128.cu");
    CHECK(contains(e.reason(), "compute_90a"));
  }
}

TEST_CASE("extra options reach the compiler, and a random constant reaches the PTX") {
  const auto value =
      std::uniform_int_distribution<std::uint32_t>(1000, 0x7fffffff)(tx::test::rng());
  const std::string src =
      "#include <cuda_fp16.h>\n"
      "#ifndef VALUE\n#error VALUE is not defined\n#endif\n"
      "extern \"C\" __global__ void k(unsigned* out, __half* h) {\n"
      "  out[threadIdx.x] = VALUE;\n"
      "  h[threadIdx.x] = __float2half(1.5f);\n"
      "}\n";
  auto out = nvrtc_compile(src, "k.cu", "sm_90a", NvrtcTarget::ptx,
                           {"-DVALUE=" + std::to_string(value) + "u"});
  CHECK(contains(out.ptx, " " + std::to_string(value) + ";"));
  CHECK(contains(out.ptx, "cvt.rn.f16.f32"));
  // Without the option the #error fires.
  CHECK_THROWS_AS(nvrtc_compile(src, "k.cu", "sm_90a", NvrtcTarget::ptx), tx::Error);
}

TEST_CASE("a syntax error names the program, the log and the numbered source line") {
  // The error is on line 4; the identifier makes the line easy to find.
  const auto tag = std::uniform_int_distribution<int>(100000, 999999)(tx::test::rng());
  const std::string bad_line = "  float v_" + std::to_string(tag) + " = x[i] +;";
  const std::string src =
      "extern \"C\" __global__ void broken(float* x) {\n"
      "  int i = threadIdx.x;\n"
      "  // a comment\n" +
      bad_line +
      "\n"
      "  x[i] = 1.0f;\n"
      "}\n";
  try {
    nvrtc_compile(src, "broken.cu", "sm_90a", NvrtcTarget::cubin);
    FAIL("expected a tx::Error");
  } catch (const tx::Error& e) {
    CHECK(e.op() == "tx.nvrtc");
    CHECK(e.operand() == "broken.cu");
    CHECK(e.reason() == "compilation failed (1 error): expected an expression");
    // The compiler's log...
    CHECK(contains(e.detail(), "broken.cu(4): error"));
    // ...then the line itself, numbered and marked, with its neighbours.
    CHECK(contains(e.detail(), "> 4 | " + bad_line));
    CHECK(contains(e.detail(), "  3 |   // a comment"));
    CHECK(contains(e.detail(), "  5 |   x[i] = 1.0f;"));
    CHECK_FALSE(contains(e.detail(), "> 3 |"));
    CHECK(contains(e.what(), "broken.cu"));
  }
}

TEST_CASE("several errors are counted and each line is shown") {
  const std::string src =
      "extern \"C\" __global__ void twice(float* x) {\n"
      "  x[0] = undefined_a;\n"
      "  x[1] = 2.0f;\n"
      "  x[2] = 3.0f;\n"
      "  x[3] = 4.0f;\n"
      "  x[4] = 5.0f;\n"
      "  x[5] = 6.0f;\n"
      "  x[6] = undefined_b;\n"
      "}\n";
  try {
    nvrtc_compile(src, "twice.cu", "sm_90a", NvrtcTarget::ptx);
    FAIL("expected a tx::Error");
  } catch (const tx::Error& e) {
    CHECK(e.reason() == "compilation failed (2 errors): identifier \"undefined_a\" is undefined");
    CHECK(contains(e.detail(), "> 2 |   x[0] = undefined_a;"));
    CHECK(contains(e.detail(), "> 8 |   x[6] = undefined_b;"));
  }
}

TEST_CASE("an error comes before the warnings in the log") {
  // Unused static helpers make NVRTC warn (#177-D); the error must not be
  // buried under them.
  std::string src;
  for (int k = 0; k < 5; ++k)
    src += "static __device__ float unused_" + std::to_string(k) + "(float v) { return v; }\n";
  src +=
      "extern \"C\" __global__ void late(float* x) {\n"
      "  x[0] = missing_name;\n"
      "}\n";
  try {
    nvrtc_compile(src, "late.cu", "sm_90a", NvrtcTarget::ptx);
    FAIL("expected a tx::Error");
  } catch (const tx::Error& e) {
    CHECK(e.reason() == "compilation failed (1 error): identifier \"missing_name\" is undefined");
    INFO(e.detail());
    const std::string& d = e.detail();
    CHECK(d.rfind("late.cu(7): error", 0) == 0);  // the first line of the log
  }
}
