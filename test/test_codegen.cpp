// The CUDA of every seed program compiles with NVRTC for sm_90a (no GPU
// needed), and its PTX has the instructions the seeds promise: 128-bit
// shared/global transfers for the copies, shfl.sync.bfly for the warp tree.
#include <doctest/doctest.h>

#include <regex>

#include "test_support.hpp"
#include "tx/runtime/nvrtc.hpp"
#include "tx/tx.hpp"

#define TX_SAMPLE_NO_MAIN
#include "cta_sqrt_smem.cpp"
#include "thread_sum_local.cpp"
#include "warp_copy_reg.cpp"
#include "warp_sqrt_reg.cpp"
#include "warp_sum_shuffle.cpp"

using namespace tx;

namespace {

std::string ptx_of(const PrimFunc& f) {
  return compile(f, {.device = Device::host()}).ptx("sm_90a");
}

int count(const std::string& s, const std::string& re) {
  std::regex r(re);
  return static_cast<int>(
      std::distance(std::sregex_iterator(s.begin(), s.end(), r), std::sregex_iterator()));
}

}  // namespace

TEST_CASE("warp_sqrt_reg: 128-bit global/shared copies, sqrt in registers") {
  std::string p = ptx_of(warp_sqrt());
  CHECK(count(p, R"(ld\.global\.v4)") >= 1);
  CHECK(count(p, R"(st\.shared\.v4)") >= 1);
  CHECK(count(p, R"(ld\.shared\.v4)") >= 1);
  CHECK(count(p, R"(st\.global\.v4)") >= 1);
  CHECK(count(p, R"(sqrt\.rn\.f32)") == 8);  // one per register, unrolled
  CHECK(count(p, R"(\.local)") == 0);        // registers stay registers
}

TEST_CASE("cta_sqrt_smem: one float4 round per thread and a barrier") {
  std::string p = ptx_of(cta_sqrt());
  CHECK(count(p, R"(ld\.global\.v4)") == 1);
  CHECK(count(p, R"(ld\.shared\.v4)") >= 1);
  CHECK(count(p, R"(st\.shared\.v4)") >= 1);
  CHECK(count(p, R"(st\.global\.v4)") == 1);
  CHECK(count(p, R"(sqrt\.rn\.f32)") == 4);
  CHECK(count(p, R"(bar\.sync)") >= 1);
}

TEST_CASE("warp_copy_reg: the register round trip is 128-bit shared traffic") {
  std::string p = ptx_of(warp_copy_reg());
  CHECK(count(p, R"(ld\.shared\.v4)") >= 2);
  CHECK(count(p, R"(st\.shared\.v4)") >= 2);
  CHECK(count(p, R"(\.local)") == 0);
}

TEST_CASE("thread_sum_local: a plain add chain") {
  std::string p = ptx_of(thread_sum());
  CHECK(count(p, R"(add\.f32)") >= 3);
  CHECK(count(p, R"(shfl)") == 0);
}

TEST_CASE("warp_sum_shuffle: the xor butterfly") {
  std::string p = ptx_of(warp_sum_shuffle());
  CHECK(count(p, R"(shfl\.sync\.bfly\.b32)") == 4 * 5);  // 4 columns x log2(32) steps
}

TEST_CASE("every sample also compiles to a cubin for sm_90a") {
  for (const PrimFunc& f :
       {warp_sqrt(), cta_sqrt(), warp_copy_reg(), thread_sum(), warp_sum_shuffle()}) {
    Kernel k = compile(f, {.device = Device::host()});
    auto out = runtime::nvrtc_compile(k.cuda_source(), k.name() + ".cu", "sm_90a",
                                      runtime::NvrtcTarget::cubin);
    REQUIRE(out.cubin.size() > 4);
    CHECK(std::string(out.cubin.data() + 1, 3) == "ELF");
  }
}

TEST_CASE("every dtype's conversions compile") {
  for (DType t :
       {f32, f16, bf16, f8e4m3, f8e5m2, f64, i8, i16, i32, i64, u8, u16, u32, u64, boolean}) {
    CAPTURE(t.name());
    PrimFunc f = T::prim_func("conv", [&](Handle A_ptr, Handle B_ptr) {
      auto A = T::match_buffer(A_ptr, {256}, t);
      auto B = T::match_buffer(B_ptr, {256}, f32);
      auto tid = T::thread_id({256});
      B(tid) = cast(A(tid), f32) * 2;
      A(tid) = cast(B(tid) + 1, t);
    });
    CHECK_NOTHROW(ptx_of(f));
  }
}

TEST_CASE("normcdf: one ex2 per element on the GPU, the fitted form under approx_math") {
  auto kernel = [](DType t) {
    return T::prim_func("ncdf", [&](Handle A_ptr, Handle B_ptr) {
      auto A = T::match_buffer(A_ptr, {256}, t);
      auto B = T::match_buffer(B_ptr, {256}, t);
      auto tid = T::thread_id({256});
      Expr x = cast(A(tid), f32);
      B(tid) = cast(x * normcdf(x), t);
    });
  };
  Kernel k32 = compile(kernel(f32), {.device = Device::host()});
  CHECK(k32.cuda_source().find("tx_normcdf(") != std::string::npos);
  std::string p32 = k32.ptx("sm_90a");
  CHECK(count(p32, R"(ex2\.approx\.ftz\.f32)") == 1);
  CHECK(count(p32, R"(rcp\.approx\.ftz\.f32)") == 1);
  CHECK(count(p32, R"(ex2\.approx\.f32)") == 0);  // no denormal fix-up
  Kernel k16 = compile(kernel(f16), {.device = Device::host(), .approx_math = true});
  CHECK(k16.cuda_source().find("tx_normcdf_fast(") != std::string::npos);
  std::string p16 = k16.ptx("sm_90a");
  CHECK(count(p16, R"(ex2\.approx\.ftz\.f32)") == 1);
  CHECK(count(p16, R"(fma\.rn\.f32)") == 7);  // the degree-5 fit, 1 + |x| / sqrt8, the exponent
}

TEST_CASE("fp8 stores use the hardware conversions on sm_90") {
  for (DType t : {f8e4m3, f8e5m2}) {
    CAPTURE(t.name());
    PrimFunc f = T::prim_func("to_fp8", [&](Handle A_ptr, Handle B_ptr) {
      auto A = T::match_buffer(A_ptr, {256}, f32);
      auto B = T::match_buffer(B_ptr, {256}, t);
      auto tid = T::thread_id({256});
      B(tid) = cast(A(tid), t);
    });
    std::string p = ptx_of(f);
    CHECK(count(p, t == f8e4m3 ? R"(cvt\.rn\.satfinite\.e4m3x2\.f32)"
                               : R"(cvt\.rn\.satfinite\.e5m2x2\.f32)") == 1);
  }
}
