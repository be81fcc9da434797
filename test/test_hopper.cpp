// The Hopper primitives without a GPU: copy_async/tma's box derivation and
// its reasons, gemm/wgmma's descriptor and accumulator checks, the mbarrier
// operand rules, the pipeline's parities, the code generator's parameters,
// and the same kernels on the host, as fibers. (gpu_hopper.cpp runs them on
// an sm_90 GPU.)
#include <doctest/doctest.h>

#include <set>
#include <string>

#include "hopper_cases.hpp"
#include "test_support.hpp"
#include "tx/lowering/codegen_cuda.hpp"
#include "tx/ops/matmul.hpp"
#include "tx/runtime/nvrtc.hpp"
#include "tx/tx.hpp"

#define TX_SAMPLE_NO_MAIN
#include "../samples/gemm_hopper.cpp"

using namespace tx;

namespace {

lowering::LoweredKernel lower90(const PrimFunc& f) {
  return lowering::lower(f, {.arch = "sm_90a"});
}

std::string variant_of(const lowering::LoweredKernel& k, const std::string& family) {
  for (const auto& r : k.dispatched)
    if (r.variant.rfind(family, 0) == 0) return r.variant;
  return "";
}

// A global (R, C) tile into a shared `layout` through copy_async, with or
// without an mbarrier.
PrimFunc tile_copy(std::int64_t R, std::int64_t C, DType t, const TileLayout& layout, bool barrier,
                   std::string variant = {}) {
  return T::prim_func("tile_copy", [&](Handle g_ptr, Handle o_ptr) {
    auto G = T::match_buffer(g_ptr, {4 * R, C}, t);
    auto O = T::match_buffer(o_ptr, {R, C}, t);
    T::device_entry();
    auto blk = T::cta_id({4});
    T::thread_id({128});
    auto S = T::alloc_buffer({R, C}, t, scope::shared, layout);
    auto bar = T::alloc_buffer({1}, u64, scope::shared);
    TileAttrs a;
    a.variant = variant;
    if (barrier) a.barrier = bar(0);
    Tx::cta::copy_async(S.all(), G[region(span(blk * R, R), {0, C})], a);
    T::cuda::cta_sync();
    Tx::cta::copy(O.all(), S.all());
  });
}

}  // namespace

TEST_CASE("copy_async/tma derives boxes from swizzled layouts, one thread issues them") {
  // 128 x 64 bf16, 128-byte rows: one box. 64 x 256: four 64 x 64 boxes (panels).
  auto k1 = lower90(tile_copy(128, 64, bf16, layouts::swizzled_tiles({128, 64}, bf16), true));
  CHECK(variant_of(k1, "copy_async") == "copy_async/tma");
  REQUIRE(k1.tensor_maps.size() == 1);
  CHECK(k1.tensor_maps[0].map.box == std::vector<std::int64_t>{128, 64});
  CHECK(k1.tensor_maps[0].map.swizzle_bytes == 128);
  CHECK(k1.tensor_maps[0].param == 0);
  auto k2 = lower90(tile_copy(64, 256, bf16, layouts::swizzled_tiles({64, 256}, bf16), true));
  REQUIRE(k2.tensor_maps.size() == 1);
  CHECK(k2.tensor_maps[0].map.box == std::vector<std::int64_t>{64, 64});
  const std::string cuda = lowering::codegen_cuda(k2);
  CHECK(cuda.find("const __grid_constant__ tx_tensor_map tx_tmap0") != std::string::npos);
  // Four boxes, at panel offsets, in one thread; the expected bytes once.
  std::size_t loads = 0;
  for (std::size_t p = cuda.find("tx_tma_load("); p != std::string::npos;
       p = cuda.find("tx_tma_load(", p + 1))
    ++loads;
  CHECK(loads == 4 + 5);  // four calls and the helper's five overloads
  CHECK(cuda.find("tx_mbarrier_expect_tx(") != std::string::npos);
  CHECK(cuda.find(", (unsigned)(32768))") != std::string::npos);
  CHECK(cuda.find("if (((int)threadIdx.x) == 0) {") != std::string::npos);
  // 64-byte and 32-byte swizzles and f32 / fp8 elements.
  auto k3 = lower90(tile_copy(32, 32, bf16, layouts::swizzled_tiles({32, 32}, bf16), true));
  REQUIRE(k3.tensor_maps.size() == 1);
  CHECK(k3.tensor_maps[0].map.swizzle_bytes == 64);
  auto k4 = lower90(tile_copy(16, 8, f32, layouts::swizzled_tiles({16, 8}, f32), true));
  REQUIRE(k4.tensor_maps.size() == 1);
  CHECK(k4.tensor_maps[0].map.swizzle_bytes == 32);
  auto k5 = lower90(tile_copy(64, 128, f8e4m3, layouts::swizzled_tiles({64, 128}, f8e4m3), true));
  REQUIRE(k5.tensor_maps.size() == 1);
  CHECK(k5.tensor_maps[0].map.box == std::vector<std::int64_t>{64, 128});
  // Row-major (no swizzle): one dense box.
  auto k6 = lower90(tile_copy(16, 64, bf16, TileLayout::row_major({16, 64}), true));
  REQUIRE(k6.tensor_maps.size() == 1);
  CHECK(k6.tensor_maps[0].map.swizzle_bytes == 0);
}

TEST_CASE("copy_async/tma reasons: padded rows, no barrier, older GPUs, the host") {
  // Padded rows are not a dense box: the reason names the element.
  TileLayout padded(S({32, 64}, {72, 1}));
  CHECK_THROWS_WITH_AS(lower90(tile_copy(32, 64, bf16, padded, true, "tma")),
                       doctest::Contains("not a sequence of dense boxes"), Error);
  // No barrier: cp.async does it (ldgsts), the TMA says why not.
  auto k = lower90(tile_copy(32, 64, bf16, layouts::swizzled_tiles({32, 64}, bf16), false));
  CHECK(variant_of(k, "copy_async") == "copy_async/ldgsts");
  CHECK(k.tensor_maps.empty());
  CHECK_THROWS_WITH_AS(
      lower90(tile_copy(32, 64, bf16, layouts::swizzled_tiles({32, 64}, bf16), false, "tma")),
      doctest::Contains("completes on an mbarrier"), Error);
  // sm_80: no TMA, and cp.async groups do not signal a barrier: the copy is
  // synchronous (exact under the barrier's semantics).
  auto k80 = lowering::lower(tile_copy(32, 64, bf16, layouts::swizzled_tiles({32, 64}, bf16), true),
                             {.arch = "sm_80"});
  CHECK(variant_of(k80, "copy_async") == "copy_async/sync");
  CHECK_THROWS_WITH_AS(
      lowering::lower(
          tile_copy(32, 64, bf16, layouts::swizzled_tiles({32, 64}, bf16), true, "ldgsts"),
          {.arch = "sm_90a"}),
      doctest::Contains("which cp.async groups do not signal"), Error);
  // barrier= on a plain copy is refused.
  auto f = T::prim_func("k", [&](Handle g_ptr) {
    auto G = T::match_buffer(g_ptr, {32, 64}, bf16);
    T::device_entry();
    T::cta_id({1});
    T::thread_id({128});
    auto S = T::alloc_buffer({32, 64}, bf16, scope::shared);
    auto bar = T::alloc_buffer({1}, u64, scope::shared);
    Tx::cta::copy(S.all(), G.all(), {.barrier = bar(0)});
  });
  CHECK_THROWS_WITH_AS(lower90(f), doctest::Contains("barrier= belongs to copy_async"), Error);
}

TEST_CASE("copy_async/tma_store: shared -> global boxes, the fence, one commit, the waits") {
  // 64 x 256 bf16 in 128-byte swizzled panels: four 64 x 64 boxes, one group.
  auto k = lower90(
      test::tma_store_tiles(64, 256, bf16, layouts::swizzled_tiles({64, 256}, bf16), 3, 150));
  CHECK(variant_of(k, "copy_async") == "copy_async/tma_store");
  REQUIRE(k.tensor_maps.size() == 2);  // O1 and O2, each its own map
  CHECK(k.tensor_maps[0].map.box == std::vector<std::int64_t>{64, 64});
  CHECK(k.tensor_maps[0].map.swizzle_bytes == 128);
  CHECK(k.tensor_maps[0].param == 2);
  const std::string ir = to_string(k.lowered);
  CHECK(ir.find("T.ptx.tma_store(T.tensor_map(O1, box=[64, 64], swizzle=128)") !=
        std::string::npos);
  CHECK(ir.find("T.ptx.cp_async.bulk.commit_group()") != std::string::npos);
  CHECK(ir.find("T.ptx.cp_async.bulk.wait_group_read(0)") != std::string::npos);
  const std::string cuda = lowering::codegen_cuda(k);
  std::size_t stores = 0;
  for (std::size_t p = cuda.find("tx_tma_store(&"); p != std::string::npos;
       p = cuda.find("tx_tma_store(&", p + 1))
    ++stores;
  CHECK(stores == 8);  // four boxes per tile, two tiles
  // The kernel's end waits for the TMA's reads of shared memory.
  CHECK(cuda.rfind("tx_tma_store_wait<0>();\n}") != std::string::npos);
  const std::string ptx =
      runtime::nvrtc_compile(cuda, "tma_store_tiles.cu", "sm_90a", runtime::NvrtcTarget::ptx).ptx;
  CHECK(ptx.find("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group") != std::string::npos);
  CHECK(ptx.find("cp.async.bulk.commit_group") != std::string::npos);
  CHECK(ptx.find("cp.async.bulk.wait_group.read 0") != std::string::npos);
  CHECK(ptx.find("fence.proxy.async") != std::string::npos);
  // Unswizzled rows, f32: boxes of at most 256 elements.
  auto plain = lower90(test::tma_store_tiles(16, 64, f32, TileLayout::row_major({16, 64}), 2, 32));
  CHECK(variant_of(plain, "copy_async") == "copy_async/tma_store");
  CHECK(plain.tensor_maps[0].map.box == std::vector<std::int64_t>{16, 64});
}

TEST_CASE(
    "copy_async/tma_store reasons: a barrier, older GPUs, and the host stores synchronously") {
  auto with_barrier = T::prim_func("store_bar", [&](Handle g_ptr, Handle o_ptr) {
    auto G = T::match_buffer(g_ptr, {64, 64}, bf16);
    auto O = T::match_buffer(o_ptr, {64, 64}, bf16);
    T::device_entry();
    T::cta_id({1});
    T::thread_id({128});
    auto S =
        T::alloc_buffer({64, 64}, bf16, scope::shared, layouts::swizzled_tiles({64, 64}, bf16));
    auto bar = T::alloc_buffer({1}, u64, scope::shared);
    Tx::cta::copy(S.all(), G.all());
    Tx::cta::copy_async(O.all(), S.all(), {.variant = "tma_store", .barrier = bar(0)});
  });
  try {
    lower90(with_barrier);
    FAIL("a TMA store with barrier= lowered");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("completes in a bulk group, not on an mbarrier") !=
          std::string::npos);
  }
  auto k80 = lowering::lower(
      test::tma_store_tiles(64, 64, bf16, layouts::swizzled_tiles({64, 64}, bf16), 2, 100),
      {.arch = "sm_80"});
  CHECK(variant_of(k80, "copy_async") == "copy_async/sync");
  // The host: the same kernel, copies complete when issued, the waits no-ops.
  if (!runtime::host_jit_available()) return;
  std::vector<std::string> variants;
  CHECK(test::run_tma_store_tiles(64, 256, bf16, layouts::swizzled_tiles({64, 256}, bf16), 3, 150,
                                  Device::host(), &variants));
  CHECK(std::find(variants.begin(), variants.end(), "copy_async/sync") != variants.end());
}

TEST_CASE("mbarrier operands are shared u64 elements, counts and waits are checked") {
  auto bad = [](DType t, MemScope s) {
    return T::prim_func("k", [&](Handle) {
      T::device_entry();
      T::cta_id({1});
      T::thread_id({32});
      auto b = T::alloc_buffer({2}, t, s);
      T::cuda::mbarrier_arrive(b(0));
    });
  };
  CHECK_THROWS_WITH_AS(bad(u32, MemScope::shared), doctest::Contains("shared u64 buffer"), Error);
  CHECK_THROWS_WITH_AS(bad(u64, MemScope::local), doctest::Contains("shared u64 buffer"), Error);
  CHECK_THROWS_WITH_AS(T::prim_func("k",
                                    [&](Handle) {
                                      T::device_entry();
                                      T::cta_id({1});
                                      T::thread_id({128});
                                      T::cuda::increase_registers(250);
                                    }),
                       doctest::Contains("multiple of 8"), Error);
  CHECK_THROWS_WITH_AS(T::prim_func("k",
                                    [&](Handle) {
                                      T::device_entry();
                                      T::cta_id({1});
                                      T::thread_id({128});
                                      T::pipeline({.stages = 0});
                                    }),
                       doctest::Contains("stages = 0"), Error);
}

TEST_CASE("T::pipeline: stage and parity of a position, initialization by thread 0") {
  // A consumer waits on parity (it / stages) % 2 of full; a producer on the
  // opposite parity of empty (its first round passes a fresh barrier).
  auto f = T::prim_func("pipe", [&](Handle o_ptr) {
    auto O = T::match_buffer(o_ptr, {4}, i32);
    T::device_entry();
    T::cta_id({1});
    auto tid = T::thread_id({256});
    auto pipe = T::pipeline({.stages = 3, .consumer_arrivals = 2});
    for (Var it : T::serial(7, "it")) {
      pipe.producer_acquire(it);
      pipe.consumer_wait(it);
    }
    T::if_(tid == 0, [&] { O(0) = 1; });
  });
  const std::string ir = to_string(f);
  CHECK(ir.find("T.ptx.mbarrier_init(pipe_full[0], 1)") != std::string::npos);
  CHECK(ir.find("T.ptx.mbarrier_init(pipe_empty[2], 2)") != std::string::npos);
  CHECK(ir.find("T.ptx.fence_barrier_init()") != std::string::npos);
  CHECK(ir.find("T.ptx.mbarrier_wait(pipe_empty[T.floormod(it, 3)], T.floormod(it // 3 + 1, 2))") !=
        std::string::npos);
  CHECK(ir.find("T.ptx.mbarrier_wait(pipe_full[T.floormod(it, 3)], T.floormod(it // 3, 2))") !=
        std::string::npos);
  auto k = lower90(f);
  const std::string cuda = lowering::codegen_cuda(k);
  CHECK(cuda.find("mbarrier.try_wait.parity.shared::cta.b64") != std::string::npos);
  // The barriers are 8-byte aligned in shared memory, after nothing else.
  REQUIRE(k.shared.size() == 2);
  CHECK(k.shared[0].offset % 8 == 0);
  CHECK(k.shared[1].offset % 8 == 0);
}

TEST_CASE("a swizzled shared tile after a pipeline's barriers starts on its swizzle's period") {
  // The hardware swizzles by address bits (TMA writes, wgmma reads), tx's
  // own loads and stores by offsets from the tile's start: the two agree only
  // when the tile starts on a multiple of the period (1 KiB for 128-byte
  // rows). Flattening drops the layout, so the placement must read it first.
  auto f = T::prim_func("after_barriers", [&](Handle o_ptr) {
    auto O = T::match_buffer(o_ptr, {64, 64}, bf16);
    T::device_entry();
    T::cta_id({1});
    T::thread_id({128});
    auto pipe = T::pipeline({.stages = 3, .consumer_arrivals = 1});
    pipe.producer_acquire(0);
    auto S8 = T::alloc_buffer({64, 128}, f8e4m3, scope::shared,
                              layouts::swizzled_tiles({64, 128}, f8e4m3));
    auto S16 =
        T::alloc_buffer({64, 64}, bf16, scope::shared, layouts::swizzled_tiles({64, 64}, bf16));
    Tx::cta::fill(S8, 1.0f);
    T::cuda::cta_sync();
    Tx::cta::cast(S16, S8[region({0, 64}, {0, 64})]);
    T::cuda::cta_sync();
    Tx::cta::copy(O.all(), S16);
  });
  auto k = lower90(f);
  int swizzled = 0;
  for (const auto& s : k.shared)
    if (s.buffer->name == "S8" || s.buffer->name == "S16") {
      CAPTURE(s.buffer->name);
      CHECK(s.offset % 1024 == 0);
      ++swizzled;
    }
  CHECK(swizzled == 2);
}

TEST_CASE("gemm/wgmma: descriptors read off swizzled layouts, the accumulator checked") {
  // The sample's kernel: A K-major (one 128-byte row per 64 k), B N-major in
  // 64-column panels (LBO = the panel stride, 8 KiB at BK = 64).
  auto k = lower90(gemm_hopper(256, 512, 128, bf16, {.ctas = 4}));
  CHECK(variant_of(k, "gemm") == "gemm/wgmma");
  CHECK(variant_of(k, "copy_async") == "copy_async/tma");
  const std::string ir = to_string(k.lowered);
  CHECK(ir.find("swizzle=128, lbo=16, sbo=1024)") != std::string::npos);
  CHECK(ir.find("swizzle=128, lbo=8192, sbo=1024, mn_major=True)") != std::string::npos);
  CHECK(ir.find("T.ptx.wgmma.m64n256k16.f32.bf16.bf16(") != std::string::npos);
  CHECK(ir.find("T.ptx.wgmma.wait_group(1)") != std::string::npos);
  CHECK(ir.find("T.ptx.setmaxnreg(232, 1)") != std::string::npos);
  // A, B, and C (the TMA-store epilogue: 64 x 64 boxes of C).
  REQUIRE(k.tensor_maps.size() == 3);
  CHECK(k.tensor_maps[1].param == 1);
  CHECK(k.tensor_maps[2].param == 2);
  CHECK(k.tensor_maps[2].map.box == std::vector<std::int64_t>{64, 64});
  // Swizzled tiles are aligned to their pattern's period (1 KiB).
  for (const auto& s : k.shared)
    if (s.buffer->dtype == bf16) CHECK(s.offset % 1024 == 0);

  // Rejections, each with its reason (forced onto the variant).
  auto one = [](const TileLayout& acc_layout, const TileLayout& a_layout, ExecScope scope,
                int pending = 0) {
    return T::prim_func("one_wgmma", [&](Handle d_ptr) {
      auto D = T::match_buffer(d_ptr, {64, 64}, f32);
      T::device_entry();
      T::cta_id({1});
      T::thread_id({128});
      auto As = T::alloc_buffer({64, 64}, bf16, scope::shared, a_layout);
      auto Bs =
          T::alloc_buffer({64, 64}, bf16, scope::shared, layouts::swizzled_tiles({64, 64}, bf16));
      auto acc = T::alloc_buffer({64, 64}, f32, scope::local, acc_layout);
      TileAttrs at;
      at.variant = "wgmma";
      at.pending = pending;
      if (scope == ExecScope::warpgroup)
        Tx::warpgroup::gemm(acc, As, Bs, at);
      else
        Tx::warp::gemm(acc, As, Bs, at);
      (void)D;
    });
  };
  const TileLayout sw = layouts::swizzled_tiles({64, 64}, bf16);
  CHECK_NOTHROW(lower90(one(frag::wgmma_c(64, 64), sw, ExecScope::warpgroup)));
  // The accumulator's registers are fenced after a wait that retires the
  // call's group, never while it is in flight (ptxas would serialize every
  // wgmma of the kernel): 32 registers a thread at 64 x 64.
  auto fences = [&](int pending) {
    const std::string ir =
        to_string(lower90(one(frag::wgmma_c(64, 64), sw, ExecScope::warpgroup, pending)).lowered);
    int n = 0;
    for (auto at = ir.find("T.ptx.register_fence("); at != std::string::npos;
         at = ir.find("T.ptx.register_fence(", at + 1))
      ++n;
    return n;
  };
  CHECK(fences(0) == 32);
  CHECK(fences(1) == 0);
  CHECK_THROWS_WITH_AS(
      lower90(one(frag::wgmma_c(64, 64), TileLayout::row_major({64, 64}), ExecScope::warpgroup)),
      doctest::Contains("without a swizzle"), Error);
  CHECK_THROWS_WITH_AS(lower90(one(frag::mma_c(64, 64), sw, ExecScope::warpgroup)),
                       doctest::Contains("use frag::wgmma_c"), Error);
  CHECK_THROWS_WITH_AS(lower90(one(frag::wgmma_c(64, 64), sw, ExecScope::warp)),
                       doctest::Contains("wgmma is a warpgroup instruction"), Error);
  CHECK_THROWS_WITH_AS(
      lowering::lower(one(frag::wgmma_c(64, 64), sw, ExecScope::warpgroup), {.arch = "sm_80"}),
      doctest::Contains("wgmma is an sm_90a instruction"), Error);
  CHECK_THROWS_WITH_AS(frag::wgmma_c(32, 64), doctest::Contains("m = 32"), Error);
}

TEST_CASE("T::tile_scheduler: persistent CTAs cover every tile once, in groups of tile rows") {
  // 6 x 5 tiles, groups of 4 rows (clamped to gcd(4, 6) = 2), on 7 CTAs: 5
  // rounds, the last one partial. Each CTA writes (cta, round) into its tiles.
  const auto sched = T::tile_scheduler({.tiles_m = 6, .tiles_n = 5, .group = 4, .ctas = 7});
  CHECK(sched.group() == 2);
  CHECK(sched.ctas() == 7);
  CHECK(sched.rounds() == 5);
  CHECK(T::tile_scheduler({.tiles_m = 3, .tiles_n = 2}).ctas() == 6);  // one CTA per tile
  CHECK_THROWS_WITH_AS(T::tile_scheduler({.tiles_m = 0, .tiles_n = 2}),
                       doctest::Contains("needs 1 to 2^31 - 1 tiles"), Error);
  PrimFunc f = T::prim_func("schedule", [&](Handle o_ptr) {
    auto O = T::match_buffer(o_ptr, {6, 5}, i32);
    T::device_entry();
    auto cta = T::cta_id({sched.ctas()});
    T::thread_id({1});
    for (Var r : T::serial(sched.rounds(), "r")) {
      auto [valid, m, n] = sched.tile(cta, r);
      T::if_(valid, [&] { O(m, n) = cta * 100 + r; });
    }
  });
  std::string why;
  if (!runtime::host_jit_available(&why)) {
    MESSAGE("not run on the host: " << why);
    return;
  }
  Kernel k = compile(f, {.device = Device::host()});
  Tensor O = Tensor::empty({6, 5}, i32, Device::host());
  O.fill_bits(tx::test::poison_bits(i32));
  k(O);
  std::vector<double> got = O.to_doubles();
  for (std::int64_t t = 0; t < 30; ++t) {
    // Tile t in the swizzled order: group t / 10 of 2 rows, column-major inside it.
    const std::int64_t m = t / 10 * 2 + t % 2, n = t % 10 / 2;
    CHECK(got[static_cast<std::size_t>(m * 5 + n)] == static_cast<double>(t % 7 * 100 + t / 7));
  }
}

TEST_CASE("T::tile_scheduler pairs: a row and its mirror back to back, column by column") {
  // 5 x 3 tiles on 4 CTAs: 3 pairs per column ((4, 0), (3, 1), (2) alone),
  // 9 pairs, 3 pair rounds = 6 rounds; the middle row's second round is idle.
  const auto sched = T::tile_scheduler({.tiles_m = 5, .tiles_n = 3, .ctas = 4, .pairs = true});
  CHECK(sched.pair_count() == 9);
  CHECK(sched.ctas() == 4);
  CHECK(sched.rounds() == 6);
  CHECK(T::tile_scheduler({.tiles_m = 4, .tiles_n = 1, .pairs = true}).ctas() == 2);
  PrimFunc f = T::prim_func("pairs", [&](Handle o_ptr) {
    auto O = T::match_buffer(o_ptr, {5, 3}, i32);
    T::device_entry();
    auto cta = T::cta_id({sched.ctas()});
    T::thread_id({1});
    for (Var r : T::serial(sched.rounds(), "r")) {
      auto [valid, m, n] = sched.tile(cta, r);
      // += : a tile taken twice would show as a sum.
      T::if_(valid, [&] { O(m, n) = O(m, n) + cta * 100 + r + 1000; });
    }
  });
  std::string why;
  if (!runtime::host_jit_available(&why)) {
    MESSAGE("not run on the host: " << why);
    return;
  }
  Kernel k = compile(f, {.device = Device::host()});
  Tensor O = Tensor::from_doubles(std::vector<double>(15, 0.0), {5, 3}, i32, Device::host());
  k(O);
  std::vector<double> got = O.to_doubles();
  for (std::int64_t p = 0; p < 9; ++p) {
    const std::int64_t n = p / 3, j = p % 3, cta = p % 4, round = p / 4 * 2;
    CAPTURE(p);
    CHECK(got[static_cast<std::size_t>((4 - j) * 3 + n)] == 1000 + cta * 100 + round);
    if (j != 2) CHECK(got[static_cast<std::size_t>(j * 3 + n)] == 1000 + cta * 100 + round + 1);
  }
}

TEST_CASE("partial tiles on sm_90: TMA boxes past the end, masked stores, reasons elsewhere") {
  // 72 x 520 x 200: the one tile row is 128 rows of a 72-row A and C, the
  // last K step reaches past K = 200, the last tile column past N = 520.
  // (The epilogue straight from the registers: masked stores.)
  lowering::LoweredKernel k =
      lower90(gemm_hopper(72, 520, 200, bf16, {.ctas = 2, .tma_store = false}));
  CHECK(variant_of(k, "copy_async") == "copy_async/tma");
  CHECK(variant_of(k, "copy/") == "copy/reg");
  const std::string cuda = lowering::codegen_cuda(k, {"g", false});
  CHECK(cuda.find("< 72") != std::string::npos);   // rows of C masked
  CHECK(cuda.find("< 520") != std::string::npos);  // columns of C masked
  // Without partial=, a region past the end is refused with every reason;
  // partial= applies to copies only.
  auto tail = [](bool partial) {
    return T::prim_func("tail", [&](Handle g_ptr, Handle o_ptr) {
      auto G = T::match_buffer(g_ptr, {100}, f32);
      auto O = T::match_buffer(o_ptr, {128}, f32);
      T::device_entry();
      T::thread_id({128});
      auto R = T::alloc_buffer({128}, f32, scope::local, TileLayout(S({128}, {1 * axes::tx})));
      auto blk = T::cta_id({1});
      Tx::cta::copy(R, G[region(span(blk * 64, 128))], {.partial = partial});
      Tx::cta::copy(O.all(), R);
    });
  };
  CHECK_THROWS_WITH_AS(lower90(tail(false)), doctest::Contains("outside the extent 100"), Error);
  lowering::LoweredKernel ok = lower90(tail(true));
  CHECK(variant_of(ok, "copy/") == "copy/reg");
  CHECK_THROWS_WITH_AS(
      T::prim_func("bad",
                   [&](Handle g_ptr) {
                     auto G = T::match_buffer(g_ptr, {100}, f32);
                     T::thread_id({1});
                     Tx::sqrt(G[region({0, 100})], G[region({0, 100})], {.partial = true});
                   }),
      doctest::Contains("applies to copy, copy_async and atomic_add"), Error);
}

// ---------------------------------------------------------------- the host
// Kernels with mbarriers run on the host with every thread as a fiber.

namespace {
bool host_jit(const char* what) {
  std::string why;
  if (runtime::host_jit_available(&why)) return true;
  MESSAGE("not run: " << what << " needs the host JIT: " << why);
  return false;
}
}  // namespace

TEST_CASE("the host runs mbarrier pipelines as fibers: phases in order, CTAs in parallel") {
  if (!host_jit("pipelines on the host")) return;
  // One CTA over 11 positions; then 200 CTAs (76,800 threads: the launch
  // splits them over worker threads, each with its own fibers).
  for (auto [P, ctas] : {std::pair<std::int64_t, std::int64_t>{11, 1}, {23, 200}}) {
    CAPTURE(P);
    CAPTURE(ctas);
    Kernel k = compile(tx::test::pipeline_phases(P, ctas), {.device = Device::host()});
    Tensor O = Tensor::empty({ctas, P, 2, 128}, i32, Device::host());
    O.fill_bits(tx::test::poison_bits(i32));
    k(O);
    CHECK(tx::test::pipeline_phases_ok(O.to_doubles(), P, ctas));
  }
}

namespace {
struct HostGemmCase {
  std::int64_t m, n, k;
  HopperGemmConfig cfg;
};
// Runs the Hopper GEMM sample on the host against float64. Unchecked: the
// host's variants (gemm/fallback); checked: the GPU's TMA and wgmma through
// the checked mode's model, which must find nothing.
void host_gemm_case(const HostGemmCase& c, DType t, bool checked) {
  CAPTURE(t.name());
  CAPTURE(c.m);
  CAPTURE(c.n);
  CAPTURE(c.k);
  Kernel k =
      compile(gemm_hopper(c.m, c.n, c.k, t, c.cfg), {.device = Device::host(), .checked = checked});
  std::set<std::string> variants;
  for (const auto& r : k.info().dispatched) variants.insert(r.variant);
  if (checked) {
    CHECK(variants.count("gemm/wgmma"));
    CHECK(variants.count("copy_async/tma"));
  } else {
    CHECK(variants.count("gemm/fallback"));
  }
  auto a = tx::test::random_values(static_cast<std::size_t>(c.m * c.k), t, -1, 1);
  auto b = tx::test::random_values(static_cast<std::size_t>(c.k * c.n), t, -1, 1);
  Tensor A = Tensor::from_doubles(a, {c.m, c.k}, t, Device::host());
  Tensor B = Tensor::from_doubles(b, {c.k, c.n}, t, Device::host());
  Tensor C = Tensor::empty({c.m, c.n}, t, Device::host());
  C.fill_bits(tx::test::poison_bits(t));
  CHECK_NOTHROW(k(A, B, C));
  CHECK(tx::test::gemm_error(a, b, C.to_doubles(), c.m, c.n, c.k, t == bf16 ? 0x1p-8 : 0x1p-11) <=
        1.0);
}
}  // namespace

TEST_CASE("samples/gemm_hopper on the host: fibers, synchronous copies, MMA in registers") {
  if (!host_jit("the Hopper GEMM on the host")) return;
  const HostGemmCase cases[] = {
      {128, 256, 64, {.ctas = 1}},  // one tile, one K step
      {256, 512, 256, {.bm = 64, .bn = 256, .bk = 64, .stages = 4, .ctas = 5}},
      {384, 256, 448, {.bm = 128, .bn = 128, .bk = 64, .stages = 6, .ctas = 4}},  // 2 rounds
      // Partial tiles in M, N and K: zeros loaded past the ends, masked stores.
      {200, 264, 136, {.bm = 128, .bn = 128, .bk = 64, .stages = 4, .ctas = 3}},
      {72, 520, 200, {.ctas = 2}},
  };
  for (DType t : {bf16, f16})
    for (const HostGemmCase& c : cases) host_gemm_case(c, t, /*checked=*/false);
}

TEST_CASE("samples/gemm_hopper with the TMA-store epilogue: lowered for sm_90, right on the host") {
  const HopperGemmConfig cfg{.stages = 3, .ctas = 4, .tma_store = true};
  auto k = lower90(gemm_hopper(200, 520, 192, bf16, cfg));
  CHECK(variant_of(k, "copy_async/tma_store") == "copy_async/tma_store");
  const std::string cuda = lowering::codegen_cuda(k);
  CHECK(cuda.find("tx_tma_store(&") != std::string::npos);
  CHECK(cuda.find("tx_tma_store_wait<0>();") != std::string::npos);
  if (!runtime::host_jit_available()) return;
  const std::int64_t M = 200, N = 520, K = 192;
  Kernel h = compile(gemm_hopper(M, N, K, bf16, cfg), {.device = Device::host()});
  auto a = tx::test::random_values(static_cast<std::size_t>(M * K), bf16, -1, 1);
  auto b = tx::test::random_values(static_cast<std::size_t>(K * N), bf16, -1, 1);
  Tensor A = Tensor::from_doubles(a, {M, K}, bf16, Device::host());
  Tensor B = Tensor::from_doubles(b, {K, N}, bf16, Device::host());
  Tensor C = Tensor::empty({M, N}, bf16, Device::host());
  C.fill_bits(tx::test::poison_bits(bf16));
  h(A, B, C);
  CHECK(tx::test::gemm_error(a, b, C.to_doubles(), M, N, K, 0x1p-8) <= 1.0);
}

TEST_CASE("samples/gemm_hopper in the checked mode: the GPU's TMA and wgmma, modelled, silent") {
  if (!host_jit("the Hopper GEMM checked")) return;
  // Persistent CTAs over several rounds (the pipeline's phases run on across
  // tiles) and partial tiles (the TMA's zero fill past the ends).
  const HostGemmCase cases[] = {
      {256, 512, 256, {.bm = 64, .bn = 256, .bk = 64, .stages = 4, .ctas = 5}},
      {384, 256, 448, {.bm = 128, .bn = 128, .bk = 64, .stages = 6, .ctas = 4}},
      {200, 264, 136, {.bm = 128, .bn = 128, .bk = 64, .stages = 4, .ctas = 3}},
  };
  for (DType t : {bf16, f16})
    for (const HostGemmCase& c : cases) host_gemm_case(c, t, /*checked=*/true);
}

TEST_CASE("fibers: warp shuffles and warp barriers inside a pipeline's consumer") {
  if (!host_jit("shuffles in fibers")) return;
  // Warpgroup 0 stages A[it] (128 x 4) into a 2-stage ring; in warpgroup 1
  // each warp sums its 32 rows across lanes (a shfl_xor butterfly) while the
  // producer may already fill the next stage.
  const std::int64_t P = 5;
  PrimFunc f = T::prim_func("pipelined_warp_sums", [&](Handle a_ptr, Handle o_ptr) {
    auto A = T::match_buffer(a_ptr, {P, 128, 4}, f32);
    auto O = T::match_buffer(o_ptr, {P, 4, 4}, f32);
    T::device_entry();
    T::cta_id({1});
    auto wg = T::warpgroup_id({2});
    auto tid = T::thread_id_in_wg({128});
    auto warp = T::warp_id({8});
    T::lane_id({32});
    auto St = T::alloc_buffer({2, 128, 4}, f32, scope::shared);
    auto Rt = T::alloc_buffer({32, 4}, f32, scope::local, TileLayout(S({32, 4}, {1 * laneid, 1})));
    auto Sum = T::alloc_buffer({4}, f32, scope::local, TileLayout(S({4}), R({32}, {1 * laneid})));
    auto pipe = T::pipeline({.stages = 2, .producer_arrivals = 128, .consumer_arrivals = 128});
    T::if_(wg == 0, [&] {
      for (Var it : T::serial(P, "it")) {
        pipe.producer_acquire(it);
        for (Var c : T::serial(4, "c")) St(pipe.stage(it), tid, c) = A(it, tid, c);
        pipe.producer_commit(it);
      }
    }).else_([&] {
      auto w = T::let(max(warp - 4, 0));
      for (Var it : T::serial(P, "it")) {
        pipe.consumer_wait(it);
        Tx::warp::copy(Rt, St[region(span(pipe.stage(it), 1), span(w * 32, 32), {0, 4})]);
        Tx::warp::sum(Sum, Rt, {.axes = {0}});
        Tx::warp::copy(O[region(span(it, 1), span(w, 1), {0, 4})], Sum);
        pipe.consumer_release(it);
      }
    });
  });
  Kernel k = compile(f, {.device = Device::host()});
  auto a = tx::test::random_values(static_cast<std::size_t>(P * 128 * 4), f32, -1, 1);
  Tensor A = Tensor::from_doubles(a, {P, 128, 4}, f32, Device::host());
  Tensor O = Tensor::empty({P, 4, 4}, f32, Device::host());
  O.fill_bits(tx::test::poison_bits(f32));
  k(A, O);
  std::vector<double> want(static_cast<std::size_t>(P * 16), 0.0);
  for (std::int64_t it = 0; it < P; ++it)
    for (std::int64_t r = 0; r < 128; ++r)
      for (std::int64_t c = 0; c < 4; ++c)
        want[static_cast<std::size_t>(it * 16 + (r / 32) * 4 + c)] +=
            a[static_cast<std::size_t>((it * 128 + r) * 4 + c)];
  std::vector<double> got = O.to_doubles();
  for (std::size_t i = 0; i < want.size(); ++i)
    CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-5));
}

TEST_CASE("fibers: a deadlock and misused mbarriers are tx errors naming the line") {
  if (!host_jit("fiber errors")) return;
  // kind 0: the consumers wait for one position more than the producer makes
  // (a hang on the GPU); 1: a wait on a barrier never initialized.
  auto kernel = [](int kind) {
    return T::prim_func("bad_pipeline", [&](Handle o_ptr) {
      auto O = T::match_buffer(o_ptr, {128}, i32);
      T::device_entry();
      T::cta_id({1});
      auto wg = T::warpgroup_id({2});
      auto tid = T::thread_id_in_wg({128});
      auto bar = T::alloc_buffer({1}, u64, scope::shared);
      if (kind == 1) {
        T::cuda::mbarrier_wait(bar(0), 0);  // line A
        return;
      }
      auto pipe = T::pipeline({.stages = 2, .producer_arrivals = 1, .consumer_arrivals = 1});
      T::if_(wg == 0, [&] {
        for (Var it : T::serial(3, "it")) {
          pipe.producer_acquire(it);
          T::if_(tid == 0, [&] { pipe.producer_commit(it); });
        }
      }).else_([&] {
        for (Var it : T::serial(4, "it")) {
          pipe.consumer_wait(it);
          O(tid) = it;
          T::if_(tid == 0, [&] { pipe.consumer_release(it); });
        }
      });
    });
  };
  Tensor O = Tensor::empty({128}, i32, Device::host());
  auto run = [&](int kind) {
    Kernel k = compile(kernel(kind), {.device = Device::host()});
    k(O);
  };
  std::string deadlock;
  try {
    run(0);
  } catch (const Error& e) {
    deadlock = e.what();
  }
  CHECK(deadlock.find("deadlock in CTA 0") != std::string::npos);
  CHECK(deadlock.find("threads 128-255: T.ptx.mbarrier_wait(pipe_full[") != std::string::npos);
  CHECK(deadlock.find("test_hopper.cpp") != std::string::npos);
  CHECK_THROWS_WITH_AS(run(1), doctest::Contains("was never initialized"), Error);
  // The checked mode follows the mbarrier phases (vector clocks): the
  // correct pipeline runs silent and writes what the unchecked run writes.
  Tensor plain = Tensor::empty({1, 3, 2, 128}, i32, Device::host());
  Tensor checked = Tensor::empty({1, 3, 2, 128}, i32, Device::host());
  plain.fill_bits(0x7fffffff);
  checked.fill_bits(0x7fffffff);
  compile(tx::test::pipeline_phases(3), {.device = Device::host()})(plain);
  CHECK_NOTHROW(
      compile(tx::test::pipeline_phases(3), {.device = Device::host(), .checked = true})(checked));
  CHECK(checked.to_doubles() == plain.to_doubles());
}

TEST_CASE("gemm/wgmma with A in registers: frag::wgmma_a, the register form, the host") {
  // On sm_90: the register form (four words of A per thread, no A
  // descriptor), for 16-bit types and fp8 (B as (N, K)), and a cubin.
  for (auto [t, instr] :
       {std::pair{bf16, "m64n64k16.f32.bf16.bf16"}, std::pair{f16, "m64n64k16.f32.f16.f16"},
        std::pair{f8e4m3, "m64n64k32.f32.e4m3.e4m3"}}) {
    CAPTURE(t.name());
    lowering::LoweredKernel k = lower90(test::wgmma_register_a(64, 64, t, 0.5));
    CHECK(variant_of(k, "gemm") == "gemm/wgmma");
    const std::string ir = to_string(k.lowered);
    CHECK(ir.find("A in registers") != std::string::npos);
    CHECK(ir.find(std::string("T.ptx.wgmma.") + instr + "(acc[") != std::string::npos);
    // The first K step's words: rows g / g + 8, columns E t / E t + 4E.
    CHECK(ir.find(t.is_fp8() ? "Ar[words 0, 4, 8, 12]" : "Ar[words 0, 2, 4, 6]") !=
          std::string::npos);
    const std::string cuda = lowering::codegen_cuda(k, {"wgmma_ra", false});
    CHECK(cuda.find("}, {%32, %33, %34, %35}, %36, p, 1, 1") != std::string::npos);
    auto out = runtime::nvrtc_compile(cuda, "wgmma_ra.cu", "sm_90a", runtime::NvrtcTarget::cubin);
    REQUIRE(out.cubin.size() > 4);
    CHECK(out.log.find("C7515") == std::string::npos);  // ptxas kept the MMAs pipelined
  }
  // A register tile in another layout is refused with the layout to use.
  auto wrong = T::prim_func("wrong_a", [&](Handle d_ptr) {
    auto D = T::match_buffer(d_ptr, {64, 64}, f32);
    T::device_entry();
    T::cta_id({1});
    T::thread_id({128});
    auto Ar = T::alloc_buffer({64, 16}, bf16, scope::local, frag::mma_a(64, 16, bf16));
    auto Bs =
        T::alloc_buffer({16, 64}, bf16, scope::shared, layouts::swizzled_tiles({16, 64}, bf16));
    auto acc = T::alloc_buffer({64, 64}, f32, scope::local, frag::wgmma_c(64, 64));
    Tx::warpgroup::gemm(acc, Ar, Bs, {.variant = "wgmma"});
    (void)D;
  });
  CHECK_THROWS_WITH_AS(lower90(wrong), doctest::Contains("use frag::wgmma_a"), Error);
  CHECK_THROWS_WITH_AS(frag::wgmma_a(64, 24, bf16), doctest::Contains("k = 24"), Error);

  // On the host (gemm/fallback) against float64: D = 0.5 A B.
  if (!host_jit("wgmma with A in registers on the host")) return;
  for (DType t : {bf16, f8e4m3}) {
    CAPTURE(t.name());
    CHECK(test::run_wgmma_register_a(64, t.is_fp8() ? 64 : 32, t, Device::host()) <= 1.0);
  }
}

TEST_CASE("ops::matmul's wgmma kernel with B as (N, K): K-major tiles, fp8, a cubin, the host") {
  auto tiling = [](const std::string& name) {
    for (const ops::MatmulTiling& t : ops::matmul_tilings())
      if (t.str() == name) return t;
    FAIL("no tiling " << name);
    return ops::matmul_tilings().front();
  };
  const ops::MatmulTiling fp8_tile = tiling("wgmma 128x128x128 s6");
  const ops::MatmulTiling half_tile = tiling("wgmma 128x256x64 s4");
  // On sm_90: both operands K-major (128-byte swizzle, LBO unused, SBO = 8
  // rows of 128 bytes), the fp8 instruction, and PTX that ptxas accepts.
  for (auto [t, tile, instr] : {std::tuple{f8e4m3, fp8_tile, "m64n128k32.f32.e4m3.e4m3"},
                                std::tuple{f8e5m2, fp8_tile, "m64n128k32.f32.e5m2.e5m2"},
                                std::tuple{bf16, half_tile, "m64n256k16.f32.bf16.bf16"}}) {
    CAPTURE(t.name());
    lowering::LoweredKernel k =
        lower90(ops::detail::matmul_kernel(256, 512, 512, t, tile, 1, 4, /*b_nk=*/true));
    CHECK(variant_of(k, "gemm") == "gemm/wgmma");
    CHECK(variant_of(k, "copy_async") == "copy_async/tma");
    const std::string ir = to_string(k.lowered);
    CHECK(ir.find(std::string("T.ptx.wgmma.") + instr + "(") != std::string::npos);
    CHECK(ir.find("mn_major=True") == std::string::npos);
    CHECK(ir.find("B K-major, transpose_b") != std::string::npos);
    // fp8: each K step's partial tile is complete before it joins the f32
    // total (promotion); 16-bit types keep one MMA group in flight.
    const bool promoted = ir.find("total") != std::string::npos;
    CHECK(promoted == t.is_fp8());
    const std::string cuda = lowering::codegen_cuda(k, {"matmul_nt", false});
    auto out = runtime::nvrtc_compile(cuda, "matmul_nt.cu", "sm_90a", runtime::NvrtcTarget::cubin);
    REQUIRE(out.cubin.size() > 4);
    CHECK(out.log.find("C7515") == std::string::npos);
    CHECK(std::string(out.cubin.data() + 1, 3) == "ELF");
  }
  // fp8 with B as (K, N) is MN-major, which the instruction cannot read: the
  // wgmma variant says why (forced onto it).
  auto fp8_mn = T::prim_func("fp8_mn", [&](Handle d_ptr) {
    auto D = T::match_buffer(d_ptr, {64, 64}, f32);
    T::device_entry();
    T::cta_id({1});
    T::thread_id({128});
    auto As = T::alloc_buffer({64, 128}, f8e4m3, scope::shared,
                              layouts::swizzled_tiles({64, 128}, f8e4m3));
    auto Bs = T::alloc_buffer({128, 64}, f8e4m3, scope::shared,
                              layouts::swizzled_tiles({128, 64}, f8e4m3));
    auto acc = T::alloc_buffer({64, 64}, f32, scope::local, frag::wgmma_c(64, 64));
    Tx::warpgroup::gemm(acc, As, Bs, {.variant = "wgmma"});
    Tx::warpgroup::copy(D.all(), acc);
  });
  CHECK_THROWS_WITH_AS(lower90(fp8_mn), doctest::Contains("fp8 wgmma reads K-major operands only"),
                       Error);
  // transpose_b on mma.sync is refused with what to do instead.
  auto warp_bt = T::prim_func("warp_bt", [&](Handle d_ptr) {
    auto D = T::match_buffer(d_ptr, {16, 8}, f32);
    T::device_entry();
    T::cta_id({1});
    T::thread_id({32});
    auto Af = T::alloc_buffer({16, 16}, bf16, scope::local, frag::mma_a(16, 16, bf16));
    auto Bf = T::alloc_buffer({8, 16}, bf16, scope::local);
    auto acc = T::alloc_buffer({16, 8}, f32, scope::local, frag::mma_c(16, 8));
    Tx::warp::gemm(acc, Af, Bf, {.variant = "mma_sync", .transpose_b = true});
    (void)D;
  });
  CHECK_THROWS_WITH_AS(lower90(warp_bt), doctest::Contains("transpose_b: mma.sync reads B"), Error);
  // transpose_b belongs to gemm.
  CHECK_THROWS_WITH_AS(T::prim_func("bt_copy",
                                    [&](Handle g_ptr) {
                                      auto G = T::match_buffer(g_ptr, {64}, f32);
                                      T::device_entry();
                                      T::thread_id({32});
                                      auto S = T::alloc_buffer({64}, f32, scope::shared);
                                      Tx::warp::copy(S.all(), G.all(), {.transpose_b = true});
                                    }),
                       doctest::Contains("transpose_b= (B given as (N, K)) applies to gemm"),
                       Error);

  // On the host (fibers, gemm/fallback with B read transposed) against float64.
  if (!host_jit("the wgmma kernel with B as (N, K) on the host")) return;
  // Partial tiles in M, N and K (zero fill past the ends, masked stores).
  const std::int64_t M = 200, N = 264, K = 400;
  for (auto [t, tile] :
       {std::pair{f8e4m3, fp8_tile}, std::pair{f8e5m2, fp8_tile}, std::pair{bf16, half_tile}}) {
    CAPTURE(t.name());
    Kernel k = compile(ops::detail::matmul_kernel(M, N, K, t, tile, 1, 2, true),
                       {.device = Device::host()});
    auto a = tx::test::random_values(static_cast<std::size_t>(M * K), t, -2, 2);
    auto bt = tx::test::random_values(static_cast<std::size_t>(N * K), t, -2, 2);
    std::vector<double> b(bt.size());
    for (std::int64_t j = 0; j < N; ++j)
      for (std::int64_t p = 0; p < K; ++p)
        b[static_cast<std::size_t>(p * N + j)] = bt[static_cast<std::size_t>(j * K + p)];
    const DType out_t = t.is_fp8() ? f32 : t;
    Tensor A = Tensor::from_doubles(a, {M, K}, t, Device::host());
    Tensor Bt = Tensor::from_doubles(bt, {N, K}, t, Device::host());
    Tensor C = Tensor::empty({M, N}, out_t, Device::host());
    C.fill_bits(tx::test::poison_bits(out_t));
    k(A, Bt, C);
    CHECK(tx::test::gemm_error(a, b, C.to_doubles(), M, N, K, t == bf16 ? 0x1p-8 : 0x1p-24) <= 1.0);
  }
}

TEST_CASE("TileBuffer::transposed: A stored (K, M) read M-major by wgmma, right on the host") {
  auto k = lower90(test::gemm_transposed_a(64, 64, 64));
  CHECK(variant_of(k, "gemm") == "gemm/wgmma");
  CHECK(to_string(k.lowered).find("A M-major") != std::string::npos);
  const std::string cuda = lowering::codegen_cuda(k);
  REQUIRE(runtime::nvrtc_compile(cuda, "gemm_at.cu", "sm_90a", runtime::NvrtcTarget::cubin)
              .cubin.size() > 4);

  // The view's errors name the tile and the reason.
  auto bad = [](MemScope sc, std::vector<std::int64_t> shape) {
    return T::prim_func("bad_view", [&](Handle d_ptr) {
      auto D = T::match_buffer(d_ptr, {4}, f32);
      T::device_entry();
      T::cta_id({1});
      T::thread_id({128});
      auto X = T::alloc_buffer(shape, bf16, sc, std::nullopt, "X");
      (void)X.transposed();
      (void)D;
    });
  };
  CHECK_THROWS_WITH_AS(bad(scope::local, {8, 8}), doctest::Contains("T.transposed"), Error);
  CHECK_THROWS_WITH_AS(bad(scope::shared, {2, 8, 8}), doctest::Contains("3 dimensions"), Error);

  // On the host (gemm/fallback through the view's layout), and in the checked
  // mode (the GPU's wgmma with an M-major descriptor, modelled).
  if (!host_jit("a transposed view on the host")) return;
  for (bool checked : {false, true}) {
    CAPTURE(checked);
    CHECK(test::run_gemm_transposed_a(64, 64, 64, Device::host(), checked) <= 1.0);
    CHECK(test::run_gemm_transposed_a(64, 128, 64, Device::host(), checked) <= 1.0);
  }
}

TEST_CASE("ops::grouped_matmul's Hopper kernel lowers for sm_90a and builds as cubins") {
  auto count = [](const std::string& s, const std::string& what) {
    std::size_t n = 0;
    for (std::size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
    return n;
  };
  // N 192: a partial column tile (16-bit: clipped by the TMA store; fp8:
  // 64-column tiles, f32 leaves from registers and cannot be clipped).
  for (DType t : {bf16, f8e4m3})
    for (bool small : {false, true})
      for (std::int64_t N : {512, 192}) {
        CAPTURE(t.name());
        CAPTURE(small);
        CAPTURE(N);
        const ops::MatmulTiling& tiling = ops::detail::grouped_matmul_tiling(t, small, N);
        if (t.is_fp8()) CHECK(tiling.bn == (N % 128 == 0 ? 128 : 64));
        auto k = lower90(ops::detail::grouped_matmul_kernel(8, N, 384, t, tiling, 132,
                                                            /*b_nk=*/t.is_fp8()));
        CHECK(variant_of(k, "gemm") == "gemm/wgmma");
        CHECK(variant_of(k, "copy_async") == "copy_async/tma");
        const std::string cuda = lowering::codegen_cuda(k);
        CHECK(count(cuda, "wgmma.mma_async") >= 1);
        // 16-bit: full 64-row blocks leave through a TMA store, the rest masked.
        if (!t.is_fp8()) CHECK(count(cuda, "cp.async.bulk.tensor.2d.global.shared") >= 1);
        auto out =
            runtime::nvrtc_compile(cuda, "grouped.cu", "sm_90a", runtime::NvrtcTarget::cubin);
        CHECK(out.cubin.size() > 4);
        CHECK(out.log.find("C7515") == std::string::npos);
      }
  // A tiling that is not wgmma's, and fp8 with b (K, N): errors naming why.
  CHECK_THROWS_WITH_AS(ops::detail::grouped_matmul_kernel(8, 512, 384, bf16,
                                                          ops::matmul_tilings().back(), 132, false),
                       doctest::Contains("the grouped kernel takes wgmma tilings"), Error);
  CHECK_THROWS_WITH_AS(
      ops::detail::grouped_matmul_kernel(
          8, 512, 384, f8e4m3, ops::detail::grouped_matmul_tiling(f8e4m3, false), 132, false),
      doctest::Contains("K-major"), Error);
}

TEST_CASE("ops::scaled_matmul's Hopper kernel lowers for sm_90a and builds as cubins") {
  using ops::detail::ScaleForm;
  for (auto [a, b] : {std::pair{ScaleForm::blocks, ScaleForm::blocks},
                      std::pair{ScaleForm::rows, ScaleForm::tensor},
                      std::pair{ScaleForm::tensor, ScaleForm::blocks},
                      std::pair{ScaleForm::rows, ScaleForm::rows}}) {
    CAPTURE(static_cast<int>(a));
    CAPTURE(static_cast<int>(b));
    auto k = lower90(
        ops::detail::scaled_matmul_kernel(1000, 1536, 1024, f8e4m3, bf16, a, b, false, 132));
    CHECK(variant_of(k, "gemm") == "gemm/wgmma");
    const std::string cuda = lowering::codegen_cuda(k);
    auto out = runtime::nvrtc_compile(cuda, "scaled.cu", "sm_90a", runtime::NvrtcTarget::cubin);
    CHECK(out.cubin.size() > 4);
    CHECK(out.log.find("C7515") == std::string::npos);
  }
  // quantize_fp8's kernels: the row kernel (warp shuffles) and the per-thread one.
  for (std::int64_t K : {1024, 1000}) {
    CAPTURE(K);
    auto q = lower90(ops::detail::quantize_fp8_kernel(256, K, bf16, f8e4m3));
    const std::string cuda = lowering::codegen_cuda(q);
    if (K % 128 == 0) CHECK(cuda.find("__shfl_xor_sync") != std::string::npos);
    CHECK(runtime::nvrtc_compile(cuda, "quantize.cu", "sm_90a", runtime::NvrtcTarget::cubin)
              .cubin.size() > 4);
  }
  // ... and the CTA-per-block kernel of a weight's 128 x 128 blocks.
  auto w = lower90(ops::detail::quantize_fp8_tiles_kernel(300, 200, bf16, f8e4m3, 128, 128));
  CHECK(runtime::nvrtc_compile(lowering::codegen_cuda(w), "quantize_tiles.cu", "sm_90a",
                               runtime::NvrtcTarget::cubin)
            .cubin.size() > 4);
}

TEST_CASE("atomic_add of a shared tile: atomic/tma_reduce on sm_90a, atomic/fallback on the host") {
  for (std::int64_t rows : {64, 50}) {
    CAPTURE(rows);
    auto k = lower90(test::shared_tile_atomic_add(rows, 4));
    CHECK(variant_of(k, "atomic") == "atomic/tma_reduce");
    const std::string cuda = lowering::codegen_cuda(k);
    CHECK(cuda.find("cp.reduce.async.bulk.tensor.2d.global.shared::cta.add") != std::string::npos);
    CHECK(runtime::nvrtc_compile(cuda, "tma_reduce.cu", "sm_90a", runtime::NvrtcTarget::cubin)
              .cubin.size() > 4);
    // Before Hopper: element by element.
    auto k80 = lowering::lower(test::shared_tile_atomic_add(rows, 4, false), {.arch = "sm_80"});
    CHECK(variant_of(k80, "atomic") == "atomic/fallback");
    if (!host_jit("atomic_add of a shared tile on the host")) continue;
    Kernel h = compile(test::shared_tile_atomic_add(rows, 4), {.device = Device::host()});
    CHECK(test::run_shared_tile_atomic_add(h, Device::host(), rows, 4) <= 1.0);
  }
}
