// The Hopper primitives on an sm_90 GPU (H100 / H200): TMA copies through
// every swizzle mode, an mbarrier pipeline whose producer and consumers run
// at their own paces over many phases, and the warp-specialized wgmma GEMM
// of samples/gemm_hopper.cpp against float64 -- fresh random inputs,
// poisoned outputs. On another GPU each case says why it does not run.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <string>

#include "gpu_support.hpp"
#include "hopper_cases.hpp"
#include "test_support.hpp"
#include "tx/runtime/cuda_driver.hpp"
#include "tx/tx.hpp"

#define TX_SAMPLE_NO_MAIN
#include "../samples/gemm_hopper.cpp"

using namespace tx;
using tx::test::gemm_error;
using tx::test::random_values;

using tx::test::hopper_gpu;

TEST_CASE("copy_async/tma moves tiles through every swizzle mode exactly") {
  if (!hopper_gpu("the TMA")) return;
  struct Case {
    std::int64_t rows, cols;
    DType t;
    bool swizzle;
  };
  const Case cases[] = {{128, 64, bf16, true}, {64, 256, bf16, true}, {32, 32, bf16, true},
                        {16, 16, bf16, true},  {16, 8, f32, true},    {64, 128, f8e4m3, true},
                        {16, 64, bf16, false}, {8, 256, f16, false}};
  for (const Case& c : cases) {
    CAPTURE(c.rows);
    CAPTURE(c.cols);
    CAPTURE(c.t.name());
    CAPTURE(c.swizzle);
    const std::int64_t R = c.rows, C = c.cols, blocks = 3;
    auto f = T::prim_func("tma_tile", [&](Handle g_ptr, Handle o_ptr) {
      auto G = T::match_buffer(g_ptr, {blocks * R, C}, c.t);
      auto O = T::match_buffer(o_ptr, {blocks * R, C}, c.t);
      T::device_entry();
      auto blk = T::cta_id({blocks});
      auto tid = T::thread_id({128});
      auto S = T::alloc_buffer(
          {R, C}, c.t, scope::shared,
          c.swizzle ? layouts::swizzled_tiles({R, C}, c.t) : TileLayout::row_major({R, C}));
      auto bar = T::alloc_buffer({1}, u64, scope::shared);
      T::if_(tid == 0, [&] {
        T::cuda::mbarrier_init(bar(0), 1);
        T::cuda::fence_barrier_init();
      });
      T::cuda::cta_sync();
      Tx::cta::copy_async(S.all(), G[region(span(blk * R, R), {0, C})], {.barrier = bar(0)});
      T::if_(tid == 0, [&] { T::cuda::mbarrier_arrive(bar(0)); });
      T::cuda::mbarrier_wait(bar(0), 0);
      Tx::cta::copy(O[region(span(blk * R, R), {0, C})], S.all());
    });
    Kernel k = compile(f, {.device = Device::cuda()});
    bool tma = false;
    for (const auto& r : k.info().dispatched) tma = tma || r.variant == "copy_async/tma";
    CHECK(tma);
    auto v = random_values(static_cast<std::size_t>(blocks * R * C), c.t, -8, 8);
    Tensor G = Tensor::from_doubles(v, {blocks * R, C}, c.t, Device::cuda());
    Tensor O = Tensor::empty({blocks * R, C}, c.t, Device::cuda());
    O.fill_bits(tx::test::poison_bits(c.t));
    k(G, O);
    CHECK(O.to_doubles() == G.to_doubles());
  }
}

TEST_CASE("copy_async/tma_store stores tiles through every swizzle mode, clipped at the end") {
  if (!hopper_gpu("TMA stores")) return;
  struct Case {
    std::int64_t rows, cols;
    DType t;
    bool swizzle;
  };
  const Case cases[] = {{128, 64, bf16, true}, {64, 256, bf16, true},   {32, 32, bf16, true},
                        {16, 8, f32, true},    {64, 128, f8e4m3, true}, {16, 64, bf16, false},
                        {8, 256, f16, false}};
  for (const Case& c : cases) {
    CAPTURE(c.rows);
    CAPTURE(c.cols);
    CAPTURE(c.t.name());
    CAPTURE(c.swizzle);
    const TileLayout layout = c.swizzle ? layouts::swizzled_tiles({c.rows, c.cols}, c.t)
                                        : TileLayout::row_major({c.rows, c.cols});
    std::vector<std::string> variants;
    // Three tiles, the outputs 3 rows short of the last one's end.
    CHECK(tx::test::run_tma_store_tiles(c.rows, c.cols, c.t, layout, 3, 3 * c.rows - 3,
                                        Device::cuda(), &variants));
    CHECK(std::count(variants.begin(), variants.end(), "copy_async/tma_store") == 2);
  }
}

TEST_CASE("T::pipeline: a producer warpgroup runs ahead of two consumers over many phases") {
  if (!hopper_gpu("mbarrier pipelines")) return;
  // Every thread arrives for its own accesses, which compute-sanitizer
  // racecheck follows (it does not follow a warpgroup barrier followed by one
  // thread's arrive, which the memory model also orders).
  const std::int64_t P = 11;
  PrimFunc f = tx::test::pipeline_phases(P);
  Kernel k = compile(f, {.device = Device::cuda()});
  Tensor O = Tensor::empty({1, P, 2, 128}, i32, Device::cuda());
  O.fill_bits(tx::test::poison_bits(i32));
  for (int rep = 0; rep < 20; ++rep) {
    k(O);
    REQUIRE(tx::test::pipeline_phases_ok(O.to_doubles(), P));
  }
}

namespace {

struct HopperCase {
  std::int64_t m, n, k;
  HopperGemmConfig cfg;
};

// Each case in bf16 and f16, launched twice on the same tensors (the second
// launch reuses the encoded tensor maps), against float64.
void run_hopper_cases(std::initializer_list<HopperCase> cases) {
  for (DType t : {bf16, f16})
    for (const HopperCase& c : cases) {
      CAPTURE(t.name());
      CAPTURE(c.m);
      CAPTURE(c.n);
      CAPTURE(c.k);
      CAPTURE(c.cfg.bm);
      CAPTURE(c.cfg.bn);
      Kernel k = compile(gemm_hopper(c.m, c.n, c.k, t, c.cfg), {.device = Device::cuda()});
      auto a = random_values(static_cast<std::size_t>(c.m * c.k), t, -1, 1);
      auto b = random_values(static_cast<std::size_t>(c.k * c.n), t, -1, 1);
      Tensor A = Tensor::from_doubles(a, {c.m, c.k}, t, Device::cuda());
      Tensor B = Tensor::from_doubles(b, {c.k, c.n}, t, Device::cuda());
      Tensor C = Tensor::empty({c.m, c.n}, t, Device::cuda());
      for (int launch = 0; launch < 2; ++launch) {
        CAPTURE(launch);
        C.fill_bits(tx::test::poison_bits(t));
        k(A, B, C);
        CHECK(gemm_error(a, b, C.to_doubles(), c.m, c.n, c.k, t == bf16 ? 0x1p-8 : 0x1p-11) <= 1.0);
      }
    }
}

}  // namespace

TEST_CASE("samples/gemm_hopper: the warp-specialized wgmma GEMM against float64") {
  if (!hopper_gpu("wgmma")) return;
  run_hopper_cases({
      {128, 256, 64, {.ctas = 1}},     // one tile, one K step
      {512, 768, 384, {}},             // the sample's shape
      {1024, 1024, 512, {.ctas = 3}},  // 32 tiles on 3 CTAs: 11 rounds
      {256, 512, 256, {.bm = 64, .bn = 256, .bk = 64, .stages = 4, .ctas = 5}},
      {384, 256, 448, {.bm = 128, .bn = 128, .bk = 64, .stages = 6, .ctas = 4}},
      {1000, 1000, 1000, {}},
  });
}

// Separate so that compute-sanitizer (racecheck, synccheck) can run just these.
TEST_CASE("samples/gemm_hopper: partial tiles in M, N and K (TMA zero fill, masked stores)") {
  if (!hopper_gpu("wgmma")) return;
  run_hopper_cases({
      {200, 264, 136, {.bm = 128, .bn = 128, .bk = 64, .stages = 4, .ctas = 3}},
      {72, 520, 200, {.ctas = 2}},
  });
}

TEST_CASE("gemm/wgmma with A in registers: D = 0.5 A B against float64") {
  if (!hopper_gpu("wgmma")) return;
  for (DType t : {bf16, f16, f8e4m3, f8e5m2}) {
    for (std::int64_t n : {64, 256}) {
      CAPTURE(t.name());
      CAPTURE(n);
      const std::int64_t K = t.is_fp8() ? 128 : 64;
      // fp8: the tensor cores' ~14-bit accumulation over K = 128 (docs/gemm.md).
      const double fp8_extra = t.is_fp8() ? 4 * 0x1p-13 : 0.0;
      CHECK(tx::test::run_wgmma_register_a(n, K, t, Device::cuda(), fp8_extra) <= 1.0);
    }
  }
}

TEST_CASE("gemm/wgmma with A through TileBuffer::transposed (M-major): D = A B against float64") {
  if (!hopper_gpu("wgmma")) return;
  CHECK(tx::test::run_gemm_transposed_a(64, 64, 64, Device::cuda()) <= 1.0);
  CHECK(tx::test::run_gemm_transposed_a(64, 128, 64, Device::cuda()) <= 1.0);
}

TEST_CASE("atomic_add of a shared tile by TMA reductions from many CTAs") {
  for (std::int64_t rows : {64, 50})
    for (std::int64_t ctas : {4, 264}) {
      CAPTURE(rows);
      CAPTURE(ctas);
      Kernel k = compile(test::shared_tile_atomic_add(rows, ctas), {.device = Device::cuda()});
      CHECK(test::run_shared_tile_atomic_add(k, Device::cuda(), rows, ctas) <= 1.0);
    }
}
