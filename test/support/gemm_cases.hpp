// Tensor-core tile primitives on the device TX_GEMM_DEVICE (gpu_gemm.cpp:
// the GPU, where ldmatrix / mma.sync / cp.async run; host_gemm.cpp: the host
// JIT, where the same kernels lower to the portable variants): fragment
// layouts through ldmatrix, single-warp mma tiles (f16, bf16, fp8), the
// pipelined sample GEMM, and gemm/fallback on shapes the tensor cores refuse.
// Every result against float64 on fresh random inputs; outputs poisoned.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>

#include "test_support.hpp"
#include "tx/ops/ops.hpp"
#include "tx/runtime/cuda_driver.hpp"
#include "tx/tx.hpp"

#define TX_SAMPLE_NO_MAIN
#include "../../samples/gemm.cpp"

#ifndef TX_GEMM_DEVICE
#error "define TX_GEMM_DEVICE before including gemm_cases.hpp"
#endif

namespace gemmcase {

using namespace tx;
using tx::test::random_values;

inline Device device() { return TX_GEMM_DEVICE; }
inline bool on_gpu() { return device().is_cuda(); }

// Which variant lowered each call of the kernel ("gemm/mma_sync", ...).
inline bool used(const Kernel& k, const std::string& variant) {
  for (const auto& r : k.info().dispatched)
    if (r.variant.rfind(variant, 0) == 0) return true;
  return false;
}

// |D - D_exact| <= K 2^-23 sum_k |a b| + one rounding of the output (rel `ulp`):
// f32 accumulation in any order (tensor cores align addends by truncation,
// hence 2^-23 rather than 2^-24), products exact in f32 for 16-bit and fp8.
// The tiling of matmul_tilings() that prints as `name` ("wgmma 64x256x64 s4").
inline const ops::MatmulTiling& tiling_named(const std::string& name) {
  for (const ops::MatmulTiling& t : ops::matmul_tilings())
    if (t.str() == name) return t;
  FAIL("no tiling " << name);
  return ops::matmul_tilings().front();
}

using tx::test::gemm_error;

inline double ulp_of(DType t) { return t == bf16 ? 0x1p-8 : t == f16 ? 0x1p-11 : 0x1p-24; }

// Hopper's tensor cores add fp8 products with about 14 bits kept (measured on
// an H100: 2^-12 of sum |a b| at K = 128, in f32 terms 15 times the bound
// above). ops::matmul's wgmma kernel adds each K step of 128 (four k32 MMAs)
// into an f32 total, so the error stays that of one step, 4 x 2^-13 of
// sum |a b|, at any K; without that promotion it would grow with K.
constexpr double kFp8WgmmaError = 4 * 0x1p-13;
inline double fp8_mag_rel(const std::string& plan) {
  return plan.find("wgmma") != std::string::npos ? kFp8WgmmaError : 0.0;
}

// One warp: A (M, K) and B (K, N) from global into frag:: register tiles,
// Tx::warp::gemm, the f32 accumulator back to global.
inline PrimFunc warp_mma(std::int64_t M, std::int64_t N, std::int64_t K, DType t) {
  return T::prim_func("warp_mma", [&](Handle a, Handle b, Handle d) {
    auto A = T::match_buffer(a, {M, K}, t);
    auto B = T::match_buffer(b, {K, N}, t);
    auto D = T::match_buffer(d, {M, N}, f32);
    T::device_entry();
    T::cta_id({1});
    T::thread_id({32});
    auto Af = T::alloc_buffer({M, K}, t, scope::local, frag::mma_a(M, K, t));
    auto Bf = T::alloc_buffer({K, N}, t, scope::local, frag::mma_b(K, N, t));
    auto Df = T::alloc_buffer({M, N}, f32, scope::local, frag::mma_c(M, N));
    Tx::warp::copy(Af, A.all());
    Tx::warp::copy(Bf, B.all());
    Tx::warp::gemm(Df, Af, Bf);
    Tx::warp::copy(D.all(), Df);
  });
}

// One warp: a tagged (rows, cols) shared tile through Tx::warp::copy into a
// fragment tile of `layout`, then every lane writes its registers out:
// Out[lane, r] = register r of that lane.
inline PrimFunc fragment_roundtrip(std::int64_t rows, std::int64_t cols, const TileLayout& layout,
                                   std::int64_t regs) {
  return T::prim_func("fragment_roundtrip", [&](Handle a, Handle o) {
    auto A = T::match_buffer(a, {rows, cols}, f16);
    auto Out = T::match_buffer(o, {32, regs}, f16);
    T::device_entry();
    T::cta_id({1});
    auto lane = T::thread_id({32});
    // Rows padded by 8 elements: the ldmatrix rows fall in distinct bank groups.
    auto As = T::alloc_buffer({rows, cols}, f16, scope::shared,
                              TileLayout(S({rows, cols}, {cols + 8, 1})));
    auto R = T::alloc_buffer({rows, cols}, f16, scope::local, layout);
    Tx::warp::copy(As.all(), A.all());
    T::cuda::warp_sync();
    Tx::warp::copy(R.all(), As.all());
    for (Var r : T::unroll(regs)) Out(lane, r) = R.local()(r);
  });
}

}  // namespace gemmcase

using namespace gemmcase;

TEST_CASE(
    "frag:: layouts: a tile through Tx::warp::copy holds each element where the layout says") {
  struct Case {
    const char* what;
    std::int64_t rows, cols;
    TileLayout layout;
    const char* variant_on_gpu;
  };
  const Case cases[] = {
      {"mma_a(64, 32)", 64, 32, frag::mma_a(64, 32, f16), "copy/ldstmatrix"},
      {"mma_b(32, 64) (.trans)", 32, 64, frag::mma_b(32, 64, f16), "copy/ldstmatrix"},
      {"mma_a(16, 16)", 16, 16, frag::mma_a(16, 16, f16), "copy/ldstmatrix"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    const std::int64_t regs = c.rows * c.cols / 32;
    Kernel k = compile(fragment_roundtrip(c.rows, c.cols, c.layout, regs), {.device = device()});
    CHECK(used(k, on_gpu() ? c.variant_on_gpu : "copy/reg"));
    // Distinct tags (integers are exact in f16 up to 2048).
    std::vector<double> a(static_cast<std::size_t>(c.rows * c.cols));
    for (std::size_t i = 0; i < a.size(); ++i) a[i] = static_cast<double>(i % 2048) - 1024;
    Tensor A = Tensor::from_doubles(a, {c.rows, c.cols}, f16, device());
    Tensor Out = Tensor::empty({32, regs}, f16, device());
    Out.fill_bits(tx::test::poison_bits(f16));
    k(A, Out);
    std::vector<double> got = Out.to_doubles();
    int wrong = 0;
    for (std::int64_t x = 0; x < c.rows * c.cols; ++x) {
      auto locs = c.layout.apply_linear(x);
      REQUIRE(locs.size() == 1);
      std::int64_t lane = locs[0][static_cast<int>(Axis::laneid)],
                   r = locs[0][static_cast<int>(Axis::m)];
      if (got[static_cast<std::size_t>(lane * regs + r)] != a[static_cast<std::size_t>(x)]) ++wrong;
    }
    CHECK(wrong == 0);
  }
}

TEST_CASE("Tx::warp::gemm on mma tiles: f16 and bf16 m16n8k16, float64 reference") {
  struct Shape {
    std::int64_t m, n, k;
  };
  for (DType t : {f16, bf16})
    for (Shape s : {Shape{16, 8, 16}, Shape{32, 16, 32}, Shape{64, 32, 48}}) {
      CAPTURE(t.name());
      CAPTURE(s.m);
      CAPTURE(s.n);
      CAPTURE(s.k);
      Kernel k = compile(warp_mma(s.m, s.n, s.k, t), {.device = device()});
      CHECK(used(k, on_gpu() ? "gemm/mma_sync" : "gemm/fallback"));
      auto a = random_values(static_cast<std::size_t>(s.m * s.k), t, -2, 2);
      auto b = random_values(static_cast<std::size_t>(s.k * s.n), t, -2, 2);
      Tensor A = Tensor::from_doubles(a, {s.m, s.k}, t, device());
      Tensor B = Tensor::from_doubles(b, {s.k, s.n}, t, device());
      Tensor D = Tensor::empty({s.m, s.n}, f32, device());
      D.fill_bits(tx::test::poison_bits(f32));
      k(A, B, D);
      CHECK(gemm_error(a, b, D.to_doubles(), s.m, s.n, s.k, 0x1p-24) <= 1.0);
    }
}

TEST_CASE("Tx::warp::gemm in fp8 (e4m3, e5m2): m16n8k32 on sm_89+, gemm/fallback elsewhere") {
  for (DType t : {f8e4m3, f8e5m2}) {
    CAPTURE(t.name());
    const std::int64_t M = 32, N = 16, K = 64;
    Kernel k = compile(warp_mma(M, N, K, t), {.device = device()});
    bool mma = false;
    if (on_gpu()) {
      const auto& info = runtime::device_info(device().index);
      mma = info.cc_major * 10 + info.cc_minor >= 89;
    }
    CHECK(used(k, mma ? "gemm/mma_sync" : "gemm/fallback"));
    auto a = random_values(static_cast<std::size_t>(M * K), t, -2, 2);
    auto b = random_values(static_cast<std::size_t>(K * N), t, -2, 2);
    Tensor A = Tensor::from_doubles(a, {M, K}, t, device());
    Tensor B = Tensor::from_doubles(b, {K, N}, t, device());
    Tensor D = Tensor::empty({M, N}, f32, device());
    D.fill_bits(tx::test::poison_bits(f32));
    k(A, B, D);
    CHECK(gemm_error(a, b, D.to_doubles(), M, N, K, 0x1p-24) <= 1.0);
  }
}

TEST_CASE("samples/gemm: the pipelined tensor-core GEMM against float64") {
  struct Shape {
    std::int64_t m, n, k;
  };
  std::vector<Shape> shapes = {{128, 128, 32}, {256, 128, 96}};
  if (on_gpu()) {
    shapes.push_back({256, 384, 192});
    shapes.push_back({1024, 1024, 1024});
  }
  // Padded and XOR-swizzled shared tiles (layouts::swizzled_tiles: 64-byte
  // rows of A in Sw<2,3,3>, B's 256-byte rows as 128-byte panels in Sw<3,3,3>).
  for (bool swizzle : {false, true})
    for (DType t : {bf16, f16})
      for (Shape s : shapes) {
        CAPTURE(swizzle);
        CAPTURE(t.name());
        CAPTURE(s.m);
        CAPTURE(s.n);
        CAPTURE(s.k);
        Kernel k = compile(gemm(s.m, s.n, s.k, t, {.swizzle = swizzle}), {.device = device()});
        if (on_gpu()) {
          CHECK(used(k, "gemm/mma_sync"));
          CHECK(used(k, "copy/ldstmatrix"));
          CHECK(used(k, "copy_async/ldgsts"));
        } else {
          CHECK(used(k, "gemm/fallback"));
          CHECK(used(k, "copy_async/sync"));
        }
        auto a = random_values(static_cast<std::size_t>(s.m * s.k), t, -1, 1);
        auto b = random_values(static_cast<std::size_t>(s.k * s.n), t, -1, 1);
        Tensor A = Tensor::from_doubles(a, {s.m, s.k}, t, device());
        Tensor B = Tensor::from_doubles(b, {s.k, s.n}, t, device());
        Tensor C = Tensor::empty({s.m, s.n}, t, device());
        C.fill_bits(tx::test::poison_bits(t));
        k(A, B, C);
        CHECK(gemm_error(a, b, C.to_doubles(), s.m, s.n, s.k, ulp_of(t)) <= 1.0);
      }
}

TEST_CASE("gemm/fallback: thread scope, odd shapes, operands in global memory") {
  const std::int64_t M = 17, N = 9, K = 24;
  PrimFunc f = T::prim_func("odd_gemm", [&](Handle a, Handle b, Handle d) {
    auto A = T::match_buffer(a, {M, K}, f32);
    auto B = T::match_buffer(b, {K, N}, f32);
    auto D = T::match_buffer(d, {M, N}, f32);
    T::device_entry();
    T::cta_id({1});
    T::thread_id({1});
    auto Dl = T::alloc_buffer({M, N}, f32, scope::local);
    Tx::gemm(Dl, A.all(), B.all());
    Tx::copy(D.all(), Dl);
  });
  Kernel k = compile(f, {.device = device()});
  CHECK(used(k, "gemm/fallback"));
  auto a = random_values(static_cast<std::size_t>(M * K), f32, -2, 2);
  auto b = random_values(static_cast<std::size_t>(K * N), f32, -2, 2);
  Tensor A = Tensor::from_doubles(a, {M, K}, f32, device());
  Tensor B = Tensor::from_doubles(b, {K, N}, f32, device());
  Tensor D = Tensor::empty({M, N}, f32, device());
  D.fill_bits(tx::test::poison_bits(f32));
  k(A, B, D);
  // f32 inputs: products round too (2^-24 each), within the K 2^-23 bound.
  CHECK(gemm_error(a, b, D.to_doubles(), M, N, K, 0x1p-24) <= 1.0);
}

TEST_CASE("split-K: the parts of K in an f32 workspace, then their sum, against float64") {
  // matmul's kernels with K cut into parts (what it picks for skinny M): the
  // warp-MMA kernel and, on sm_90 and the host, the Hopper kernel; each part
  // checked on its own, then the sum rounded once.
  const bool hopper = !on_gpu() || runtime::current_device().cc_major == 9;
  struct Case {
    std::int64_t m, n, k, splits;
    ops::MatmulTiling tiling;
  };
  std::vector<Case> cases = {{16, 128, 512, 4, ops::matmul_tilings().back()},
                             {32, 64, 256, 2, ops::matmul_tilings().back()}};
  if (hopper) cases.push_back({64, 256, 512, 2, tiling_named("wgmma 64x256x64 s4")});
  for (DType t : {bf16, f16})
    for (const Case& c : cases) {
      CAPTURE(t.name());
      CAPTURE(c.m);
      CAPTURE(c.splits);
      CAPTURE(c.tiling.str());
      auto a = random_values(static_cast<std::size_t>(c.m * c.k), t, -1, 1);
      auto b = random_values(static_cast<std::size_t>(c.k * c.n), t, -1, 1);
      Tensor A = Tensor::from_doubles(a, {c.m, c.k}, t, device());
      Tensor B = Tensor::from_doubles(b, {c.k, c.n}, t, device());
      Tensor W = Tensor::empty({c.splits * c.m, c.n}, f32, device());
      W.fill_bits(0x7fc00000);  // NaN until written
      compile(ops::detail::matmul_kernel(c.m, c.n, c.k, t, c.tiling, c.splits, 4),
              {.device = device()})(A, B, W);
      // Part p is A[:, p K/s : (p+1) K/s] B[p K/s : (p+1) K/s, :] in f32.
      std::vector<double> w = W.to_doubles();
      const std::int64_t kp = c.k / c.splits;
      for (std::int64_t p = 0; p < c.splits; ++p) {
        std::vector<double> ap, bp(b.begin() + p * kp * c.n, b.begin() + (p + 1) * kp * c.n);
        for (std::int64_t i = 0; i < c.m; ++i)
          ap.insert(ap.end(), a.begin() + i * c.k + p * kp, a.begin() + i * c.k + (p + 1) * kp);
        std::vector<double> wp(w.begin() + p * c.m * c.n, w.begin() + (p + 1) * c.m * c.n);
        CHECK(gemm_error(ap, bp, wp, c.m, c.n, kp, 0x1p-24) <= 1.0);
      }
      Tensor C = Tensor::empty({c.m * c.n}, t, device());
      C.fill_bits(test::poison_bits(t));
      compile(ops::detail::matmul_splitk_reduce(c.m, c.n, c.splits, t), {.device = device()})(
          W.reshape({c.splits * c.m * c.n}), C);
      CHECK(gemm_error(a, b, C.to_doubles(), c.m, c.n, c.k, ulp_of(t)) <= 1.0);
    }
  if (!on_gpu()) return;
  // What matmul picks for skinny M on this GPU, and its result: 16 rows
  // split K in 4 (1 MB of workspace against B's 32 MB); at 128 rows the
  // workspace would move as many bytes as B, and K stays whole.
  const std::int64_t sms = runtime::current_device().sm_count;
  for (auto [m, k] : std::vector<std::pair<std::int64_t, std::int64_t>>{{16, 4096}, {128, 2048}}) {
    CAPTURE(m);
    auto a = random_values(static_cast<std::size_t>(m * k), bf16, -1, 1);
    auto b = random_values(static_cast<std::size_t>(k * 4096), bf16, -1, 1);
    Tensor A = Tensor::from_doubles(a, {m, k}, bf16, device());
    Tensor B = Tensor::from_doubles(b, {k, 4096}, bf16, device());
    const std::string plan = ops::matmul_plan(A, B);
    CAPTURE(plan);
    if (sms >= 120) CHECK((plan.find("split-K 4") != std::string::npos) == (m == 16));
    CHECK(gemm_error(a, b, ops::matmul(A, B).to_doubles(), m, 4096, k, ulp_of(bf16)) <= 1.0);
  }
}

TEST_CASE("tx::ops::matmul: every tiling and the SIMT kernel against float64, and its errors") {
  struct Case {
    std::int64_t m, n, k;
    const char* plan;  // the start of matmul_plan on the GPU
  };
  std::vector<Case> cases = {{17, 9, 24, "SIMT ("}, {48, 64, 96, "tensor cores 16x64x32"}};
  if (on_gpu()) {
    // On sm_90 the Hopper kernel (wgmma) takes the shapes it divides.
    const bool hopper = runtime::current_device().cc_major == 9;
    cases.push_back(
        {256, 256, 128,
         hopper ? "tensor cores wgmma 128x256x64 s3 tma" : "tensor cores 128x256x64 w64x64 s3"});
    if (hopper) {
      cases.push_back({320, 512, 192, "tensor cores wgmma 64x256x64 s4"});
      cases.push_back({1024, 640, 320, "tensor cores wgmma 128x128x64 s6"});
    }
    cases.push_back({512, 384, 96, "tensor cores 256x128x32"});
    cases.push_back({384, 384, 160, "tensor cores 128x128x32 w64x64 s3 sw"});
    cases.push_back({320, 128, 64, "tensor cores 64x128x64"});
    cases.push_back({320, 192, 32, "tensor cores 64x64x32 w32x32 s4 sw"});
    // No tiling divides: on sm_90 the Hopper kernel with partial tiles (TMA
    // zero fill, masked stores), 64-row tiles up to 64 rows; SIMT elsewhere.
    cases.push_back(
        {100, 64, 64, hopper ? "tensor cores wgmma 128x256x64 s3 tma, partial tiles" : "SIMT ("});
    if (hopper) {
      cases.push_back({37, 1024, 520, "tensor cores wgmma 64x256x64 s4, partial tiles"});
      cases.push_back({1000, 1000, 1000, "tensor cores wgmma 128x256x64 s3 tma, partial tiles"});
    }
    // Skinny M: the first tiling with at least 0.45 x SMs CTAs (132 SMs on an H100).
    // On sm_90 the Hopper kernel's threshold is 20% of the SMs: 64x256 gives 32.
    if (runtime::current_device().sm_count >= 120)
      cases.push_back(
          {128, 4096, 64, hopper ? "tensor cores wgmma 64x256x64 s4" : "tensor cores 64x128x64"});
  }
  for (DType t : {bf16, f16})
    for (const Case& c : cases) {
      CAPTURE(t.name());
      CAPTURE(c.m);
      CAPTURE(c.n);
      CAPTURE(c.k);
      auto a = random_values(static_cast<std::size_t>(c.m * c.k), t, -1, 1);
      auto b = random_values(static_cast<std::size_t>(c.k * c.n), t, -1, 1);
      Tensor A = Tensor::from_doubles(a, {c.m, c.k}, t, device());
      Tensor B = Tensor::from_doubles(b, {c.k, c.n}, t, device());
      const std::string plan = ops::matmul_plan(A, B);
      CAPTURE(plan);
      CHECK(plan.rfind(on_gpu() ? c.plan : "SIMT (the host", 0) == 0);
      Tensor C = ops::matmul(A, B);
      CHECK(C.dtype() == t);
      CHECK(gemm_error(a, b, C.to_doubles(), c.m, c.n, c.k, ulp_of(t)) <= 1.0);
    }
  // fp8 in, f32 out: shapes a tiling divides run on the tensor cores --
  // on sm_90 the wgmma kernel where K % 128 (B transposed to (N, K) first:
  // wgmma reads 8-bit B K-major only), else mma.sync m16n8k32 (k steps of
  // 32) -- others the SIMT kernel.
  for (DType t : {f8e4m3, f8e5m2}) {
    struct Fp8Case {
      std::int64_t m, n, k;
      const char* plan;
    };
    const bool hopper = on_gpu() && runtime::current_device().cc_major == 9;
    std::vector<Fp8Case> fp8 = {
        {32, 16, 64, hopper ? "tensor cores wgmma 64x128x128 s8, partial tiles" : "SIMT ("}};
    if (on_gpu() &&
        runtime::current_device().cc_major * 10 + runtime::current_device().cc_minor >= 89) {
      fp8.push_back({256, 256, 128,
                     hopper ? "tensor cores wgmma 128x128x128 s6, B transposed to (N, K) first"
                            : "tensor cores 128x256x64 w64x64 s3"});
      fp8.push_back({320, 128, 64, "tensor cores 64x128x64"});
      // fp8 tilings need K % 64: SIMT, or on sm_90 partial tiles.
      fp8.push_back(
          {384, 384, 160,
           hopper ? "tensor cores wgmma 128x128x128 s6, partial tiles, B transposed" : "SIMT ("});
      if (hopper)
        fp8.push_back({200, 264, 4112, "tensor cores wgmma 128x128x128 s6, partial tiles"});
    }
    for (const Fp8Case& c : fp8) {
      CAPTURE(t.name());
      CAPTURE(c.m);
      auto a = random_values(static_cast<std::size_t>(c.m * c.k), t, -2, 2);
      auto b = random_values(static_cast<std::size_t>(c.k * c.n), t, -2, 2);
      Tensor A = Tensor::from_doubles(a, {c.m, c.k}, t, device());
      Tensor B = Tensor::from_doubles(b, {c.k, c.n}, t, device());
      const std::string plan = ops::matmul_plan(A, B);
      CAPTURE(plan);
      CHECK(plan.rfind(on_gpu() ? c.plan : "SIMT (the host", 0) == 0);
      Tensor C = ops::matmul(A, B);
      CHECK(C.dtype() == f32);
      CHECK(gemm_error(a, b, C.to_doubles(), c.m, c.n, c.k, 0x1p-24, fp8_mag_rel(plan)) <= 1.0);
    }
  }
  // An empty sum is zero.
  Tensor Z =
      ops::matmul(Tensor::empty({3, 0}, bf16, device()), Tensor::empty({0, 5}, bf16, device()));
  for (double v : Z.to_doubles()) CHECK(v == 0.0);
  if (on_gpu()) {
    // Tuning times the tilings that divide the shape and keeps a correct one.
    // (A shape class none of the cases above has: its winner is remembered in
    // the cache folder's autotune.txt and would change their plans in a later
    // run on the same folder.)
    const std::int64_t M = 512, N = 512, K = 256;
    auto a = random_values(static_cast<std::size_t>(M * K), bf16, -1, 1);
    auto b = random_values(static_cast<std::size_t>(K * N), bf16, -1, 1);
    Tensor A = Tensor::from_doubles(a, {M, K}, bf16, device());
    Tensor B = Tensor::from_doubles(b, {K, N}, bf16, device());
    Tensor C = ops::matmul(A, B, {.tune = true});
    CHECK(ops::matmul_plan(A, B).rfind("tensor cores", 0) == 0);
    CHECK(gemm_error(a, b, C.to_doubles(), M, N, K, ulp_of(bf16)) <= 1.0);
  }
  auto error_of = [](const std::function<void()>& f) -> std::string {
    try {
      f();
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  Tensor x = Tensor::empty({4, 8}, bf16, device()), y = Tensor::empty({6, 2}, bf16, device());
  std::string e = error_of([&] { ops::matmul(x, y); });
  CHECK(e.find("tx.ops.matmul") != std::string::npos);
  CHECK(e.find("inner extents differ: a is (4, 8) and b is (6, 2)") != std::string::npos);
  CHECK(e.find("gemm_cases.hpp") != std::string::npos);  // the caller's line
  CHECK(error_of([&] {
          ops::matmul(Tensor::empty({2, 2, 2}, bf16, device()), x);
        }).find("rank 3") != std::string::npos);
  CHECK(error_of([&] {
          ops::matmul(Tensor::empty({4, 8}, i32, device()), Tensor::empty({8, 4}, i32, device()));
        }).find("dtype int32: matmul takes float32, float64") != std::string::npos);
  CHECK(error_of([&] {
          ops::matmul(Tensor::empty({4, 8}, f32, device()), Tensor::empty({8, 4}, bf16, device()));
        }).find("dtype bfloat16 differs from a's float32") != std::string::npos);
  CHECK(error_of([&] {
          ops::matmul(x, Tensor::empty({8, 4}, f16, device()));
        }).find("differs from a's") != std::string::npos);
  CHECK(error_of([&] { ops::matmul(x.transpose(0, 1), x); }).find("strided") != std::string::npos);
}

TEST_CASE("tx::ops::matmul with B as the transpose of an (N, K) tensor (torch's b.t())") {
  // B stored (N, K) row-major and passed as its (K, N) transpose: the wgmma
  // kernel reads it as given (K-major tiles, transpose_b); the warp-MMA and
  // SIMT kernels read a row-major copy, and matmul_plan says so.
  struct Case {
    std::int64_t m, n, k;
    DType t;
    const char* plan;  // the start of matmul_plan on the GPU
  };
  const bool hopper = on_gpu() && runtime::current_device().cc_major == 9;
  // (24, 16, 64) in fp8: no tiling divides it; on sm_90 partial tiles.
  std::vector<Case> cases = {
      {17, 9, 24, bf16, "SIMT ("},
      {24, 16, 64, f8e4m3, hopper ? "tensor cores wgmma 64x128x128 s8, partial tiles" : "SIMT ("}};
  if (hopper) {
    cases.push_back({256, 256, 128, bf16, "tensor cores wgmma 128x256x64 s3 tma"});
    cases.push_back({384, 512, 256, f8e4m3, "tensor cores wgmma 128x128x128 s6"});
    cases.push_back({256, 256, 512, f8e5m2, "tensor cores wgmma 128x128x128 s6"});
    // K = 4096: 32 K steps, where an accumulator of 14 bits would drift
    // past the bound (promotion keeps it at one step's error).
    cases.push_back({128, 256, 4096, f8e4m3, "tensor cores wgmma 64x128x128 s8"});
    cases.push_back({200, 264, 144, f8e4m3, "tensor cores wgmma 128x128x128 s6, partial tiles"});
    cases.push_back({72, 520, 208, bf16, "tensor cores wgmma 128x256x64 s3 tma, partial tiles"});
    cases.push_back({1024, 640, 384, f16, "tensor cores wgmma 128x128x64 s6"});
  }
  if (on_gpu()) cases.push_back({512, 384, 96, f16, "tensor cores 256x128x32"});
  for (const Case& c : cases) {
    CAPTURE(c.t.name());
    CAPTURE(c.m);
    CAPTURE(c.n);
    CAPTURE(c.k);
    const double range = c.t.is_fp8() ? 2 : 1;
    auto a = random_values(static_cast<std::size_t>(c.m * c.k), c.t, -range, range);
    auto bt = random_values(static_cast<std::size_t>(c.n * c.k), c.t, -range, range);
    std::vector<double> b(bt.size());  // B = bt^T, (K, N) row-major for the reference
    for (std::int64_t j = 0; j < c.n; ++j)
      for (std::int64_t p = 0; p < c.k; ++p)
        b[static_cast<std::size_t>(p * c.n + j)] = bt[static_cast<std::size_t>(j * c.k + p)];
    Tensor A = Tensor::from_doubles(a, {c.m, c.k}, c.t, device());
    Tensor B = Tensor::from_doubles(bt, {c.n, c.k}, c.t, device()).transpose(0, 1);
    REQUIRE(!B.is_contiguous());
    const std::string plan = ops::matmul_plan(A, B);
    CAPTURE(plan);
    const std::string want = on_gpu() ? c.plan : "SIMT (the host";
    CHECK(plan.rfind(want, 0) == 0);
    // The wgmma kernel reads B^T's storage; the others a row-major copy.
    const bool copied = plan.find("wgmma") == std::string::npos;
    CHECK((plan.find("B copied to row-major first") != std::string::npos) == copied);
    Tensor C = ops::matmul(A, B);
    CHECK(C.dtype() == (c.t.is_fp8() ? f32 : c.t));
    CHECK(gemm_error(a, b, C.to_doubles(), c.m, c.n, c.k, ulp_of(c.t),
                     c.t.is_fp8() ? fp8_mag_rel(plan) : 0.0) <= 1.0);
  }
  // Other strided views of B are refused with what to pass instead.
  Tensor x = Tensor::empty({4, 8}, bf16, device());
  Tensor wide = Tensor::empty({8, 8}, bf16, device());
  try {
    ops::matmul(x, wide.slice(1, 0, 8, 2));
    FAIL("a strided B was accepted");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("the transpose of a row-major (N, K) tensor") !=
          std::string::npos);
  }
}

// float32 and float64 (PyTorch runs both; it uses TF32 tensor cores for
// float32 only when torch.backends.cuda.matmul.allow_tf32 is set, off by
// default): the tiled SIMT kernel, products and sums in the operands' own
// precision. Shapes the 64 x 64 x 16 tiles divide and shapes with partial
// tiles on every side; B as a transposed (N, K) tensor too.
TEST_CASE("tx::ops::matmul in float32 and float64, against float64 (float128 for f64)") {
  struct Case {
    std::int64_t m, n, k;
  };
  const Case cases[] = {{64, 64, 16}, {128, 192, 64}, {1, 1, 1},
                        {17, 9, 24},  {100, 70, 37},  {65, 129, 200}};
  for (DType t : {f32, f64})
    for (const Case& c : cases) {
      CAPTURE(t.name());
      CAPTURE(c.m);
      CAPTURE(c.n);
      CAPTURE(c.k);
      auto a = random_values(static_cast<std::size_t>(c.m * c.k), t, -1, 1);
      auto b = random_values(static_cast<std::size_t>(c.k * c.n), t, -1, 1);
      Tensor A = Tensor::from_doubles(a, {c.m, c.k}, t, device());
      Tensor B = Tensor::from_doubles(b, {c.k, c.n}, t, device());
      const std::string plan = ops::matmul_plan(A, B);
      CAPTURE(plan);
      CHECK(plan.rfind("SIMT tiled 64x64x16", 0) == 0);
      Tensor C = ops::matmul(A, B);
      CHECK(C.dtype() == t);
      CHECK(C.shape() == std::vector<std::int64_t>{c.m, c.n});
      const std::vector<double> got = C.to_doubles();
      if (t == f32) {
        // f32 products and sums: K 2^-24 sum |a b| (plus the output's rounding).
        CHECK(gemm_error(a, b, got, c.m, c.n, c.k, 0x1p-24) <= 1.0);
      } else {
        // f64 sums: the error a float64 accumulation allows, far below what
        // an f32 one would leave (checked against a long double reference).
        double worst = 0;
        for (std::int64_t i = 0; i < c.m; ++i)
          for (std::int64_t j = 0; j < c.n; ++j) {
            long double want = 0, mag = 0;
            for (std::int64_t p = 0; p < c.k; ++p) {
              const long double x =
                  static_cast<long double>(a[static_cast<std::size_t>(i * c.k + p)]) *
                  b[static_cast<std::size_t>(p * c.n + j)];
              want += x;
              mag += x < 0 ? -x : x;
            }
            const double tol =
                static_cast<double>(c.k + 1) * 0x1p-53 * static_cast<double>(mag) + 1e-300;
            worst = std::max(worst, std::fabs(got[static_cast<std::size_t>(i * c.n + j)] -
                                              static_cast<double>(want)) /
                                        tol);
          }
        CHECK(worst <= 1.0);
      }
      // B given as the transpose of an (N, K) tensor: the same products.
      std::vector<double> bt(b.size());
      for (std::int64_t p = 0; p < c.k; ++p)
        for (std::int64_t j = 0; j < c.n; ++j)
          bt[static_cast<std::size_t>(j * c.k + p)] = b[static_cast<std::size_t>(p * c.n + j)];
      Tensor Bt = Tensor::from_doubles(bt, {c.n, c.k}, t, device()).transpose(0, 1);
      CHECK(ops::matmul(A, Bt).to_bytes() == C.to_bytes());
    }
  // The empty sum, in f32.
  Tensor Z =
      ops::matmul(Tensor::empty({3, 0}, f32, device()), Tensor::empty({0, 5}, f32, device()));
  CHECK(Z.dtype() == f32);
  for (double v : Z.to_doubles()) CHECK(v == 0.0);
}
