// The Hopper primitives on an sm_90 GPU (H100 / H200): TMA copies through
// every swizzle mode, an mbarrier pipeline whose producer and consumers run
// at their own paces over many phases, and the warp-specialized wgmma GEMM
// of samples/gemm_hopper.cpp against float64 -- fresh random inputs,
// poisoned outputs. On another GPU each case says why it does not run.
#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include "test_support.hpp"
#include "tx/runtime/cuda_driver.hpp"
#include "tx/tx.hpp"

#define TX_SAMPLE_NO_MAIN
#include "../samples/gemm_hopper.cpp"

using namespace tx;
using tx::test::random_values;

namespace {

bool hopper(const char* what) {
  const runtime::DeviceInfo& d = runtime::current_device();
  if (d.cc_major == 9) return true;
  MESSAGE("not run: " << what << " needs an sm_90 GPU; this one is " << d.name << " (" << d.arch()
                      << ")");
  return false;
}

// |C - C_exact| <= K 2^-23 sum |a b| + one rounding of the output.
double gemm_error(const std::vector<double>& a, const std::vector<double>& b,
                  const std::vector<double>& c, std::int64_t M, std::int64_t N, std::int64_t K,
                  double ulp) {
  double worst = 0;
  for (std::int64_t i = 0; i < M; ++i)
    for (std::int64_t j = 0; j < N; ++j) {
      double want = 0, mag = 0;
      for (std::int64_t p = 0; p < K; ++p) {
        const double x =
            a[static_cast<std::size_t>(i * K + p)] * b[static_cast<std::size_t>(p * N + j)];
        want += x;
        mag += std::fabs(x);
      }
      const double got = c[static_cast<std::size_t>(i * N + j)];
      if (std::isnan(got)) return INFINITY;
      const double tol = static_cast<double>(K) * 0x1p-23 * mag + ulp * std::fabs(want) + 1e-30;
      worst = std::max(worst, std::fabs(got - want) / tol);
    }
  return worst;
}

}  // namespace

TEST_CASE("copy_async/tma moves tiles through every swizzle mode exactly") {
  if (!hopper("the TMA")) return;
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

TEST_CASE("T::pipeline: a producer warpgroup runs ahead of two consumers over many phases") {
  if (!hopper("mbarrier pipelines")) return;
  // The producer writes position it into stage it % 2 (plain stores); each
  // consumer warpgroup copies the stage out. Every thread arrives for its own
  // accesses (128 producer and 256 consumer arrivals per phase), so the
  // barriers alone order them -- as compute-sanitizer racecheck checks (it
  // does not follow a warpgroup barrier followed by one thread's arrive,
  // which the memory model also orders). 2 stages, 11 positions: every
  // barrier goes through 5-6 phases; a wrong parity deadlocks or reads a
  // stage twice or too early.
  const std::int64_t P = 11;
  auto f = T::prim_func("pipeline_phases", [&](Handle o_ptr) {
    auto O = T::match_buffer(o_ptr, {P, 2, 128}, i32);
    T::device_entry();
    T::cta_id({1});
    auto wg = T::warpgroup_id({3});
    auto tid = T::thread_id_in_wg({128});
    auto S = T::alloc_buffer({2, 128}, i32, scope::shared);
    auto pipe = T::pipeline({.stages = 2, .producer_arrivals = 128, .consumer_arrivals = 256});
    T::if_(wg == 0, [&] {
      for (Var it : T::serial(P, "it")) {
        pipe.producer_acquire(it);
        S(pipe.stage(it), tid) = it * 1000 + tid;
        pipe.producer_commit(it);
      }
    }).else_([&] {
      auto c = T::let(max(wg - 1, 0));
      for (Var it : T::serial(P, "it")) {
        pipe.consumer_wait(it);
        O(it, c, tid) = S(pipe.stage(it), tid);
        pipe.consumer_release(it);
      }
    });
  });
  Kernel k = compile(f, {.device = Device::cuda()});
  Tensor O = Tensor::empty({P, 2, 128}, i32, Device::cuda());
  O.fill_bits(tx::test::poison_bits(i32));
  for (int rep = 0; rep < 20; ++rep) {
    k(O);
    std::vector<double> got = O.to_doubles();
    bool ok = true;
    for (std::int64_t it = 0; it < P; ++it)
      for (std::int64_t c = 0; c < 2; ++c)
        for (std::int64_t t = 0; t < 128; ++t)
          ok = ok && got[static_cast<std::size_t>((it * 2 + c) * 128 + t)] ==
                         static_cast<double>(it * 1000 + t);
    REQUIRE(ok);
  }
}

TEST_CASE("samples/gemm_hopper: the warp-specialized wgmma GEMM against float64") {
  if (!hopper("wgmma")) return;
  struct Case {
    std::int64_t m, n, k;
    HopperGemmConfig cfg;
  };
  const Case cases[] = {
      {128, 256, 64, {.ctas = 1}},     // one tile, one K step
      {512, 768, 384, {}},             // the sample's shape
      {1024, 1024, 512, {.ctas = 3}},  // 32 tiles on 3 CTAs: 11 rounds
      {256, 512, 256, {.bm = 64, .bn = 256, .bk = 64, .stages = 4, .ctas = 5}},
      {384, 256, 448, {.bm = 128, .bn = 128, .bk = 64, .stages = 6, .ctas = 4}},
  };
  for (DType t : {bf16, f16})
    for (const Case& c : cases) {
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
      C.fill_bits(tx::test::poison_bits(t));
      k(A, B, C);
      CHECK(gemm_error(a, b, C.to_doubles(), c.m, c.n, c.k, t == bf16 ? 0x1p-8 : 0x1p-11) <= 1.0);
      // A second launch on the same tensors reuses the encoded tensor maps.
      C.fill_bits(tx::test::poison_bits(t));
      k(A, B, C);
      CHECK(gemm_error(a, b, C.to_doubles(), c.m, c.n, c.k, t == bf16 ? 0x1p-8 : 0x1p-11) <= 1.0);
    }
}
