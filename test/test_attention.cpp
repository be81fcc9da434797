// Attention without a GPU: the primitives it adds (where= masks, row
// reductions into frag::wgmma_row vectors, per-row broadcasts, the f32
// accumulator -> register A conversion, named barriers), their code and
// their errors, and samples/attention_hopper.cpp on the host (fibers)
// against float64. (gpu_attention.cpp runs the same on an sm_90 GPU.)
#include <doctest/doctest.h>

#include <functional>
#include <sstream>
#include <string>

#include "attention_cases.hpp"
#include "test_support.hpp"
#include "tx/lowering/codegen_cuda.hpp"
#include "tx/ops/attention.hpp"
#include "tx/runtime/nvrtc.hpp"
#include "tx/tx.hpp"

using namespace tx;

namespace {

bool host_jit(const char* what) {
  std::string why;
  if (runtime::host_jit_available(&why)) return true;
  MESSAGE("not run: " << what << " needs the host JIT: " << why);
  return false;
}

std::string cuda_of(const PrimFunc& f) {
  return lowering::codegen_cuda(lowering::lower(f, {.arch = "sm_90a"}));
}

std::size_t count(const std::string& s, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

// A one-warpgroup kernel around `body` (S: a (64, 64) f32 accumulator).
PrimFunc with_tile(const std::function<void(TileBuffer, TileBuffer)>& body) {
  return T::prim_func("k", [&](Handle g_ptr) {
    auto G = T::match_buffer(g_ptr, {64, 64}, f32);
    T::device_entry();
    T::cta_id({1});
    T::thread_id({128});
    auto S = T::alloc_buffer({64, 64}, f32, scope::local, frag::wgmma_c(64, 64));
    Tx::warpgroup::copy(S, G.all());
    body(S, G);
  });
}

}  // namespace

TEST_CASE("row reductions of a wgmma accumulator: register folds, then two shuffles per row") {
  const std::string cuda = cuda_of(tx::test::row_softmax_kernel(64, bf16, 0.3));
  // max and sum: each thread folds its 16 registers of a row, then xor 2 and 1 across the quad.
  CHECK(count(cuda, "__shfl_xor_sync(0xffffffffu, m[spa], 2)") == 1);
  CHECK(count(cuda, "__shfl_xor_sync(0xffffffffu, m[spa], 1)") == 1);
  CHECK(count(cuda, "__shfl_xor_sync") == 4);
  CHECK(cuda.find("reduction/local (warp shuffle)") != std::string::npos);
  // The row vector broadcasts along the row: register f reads the row's own slot.
  CHECK(cuda.find("+ neg_m[") != std::string::npos);
  // The accumulator -> register A conversion never leaves the thread.
  CHECK(cuda.find("__shared__") == std::string::npos);
  CHECK(cuda.find("extern __shared__") == std::string::npos);
  // A row vector is 2 registers a thread (64 rows over 32 quads).
  CHECK(cuda.find("float m[2];") != std::string::npos);
}

TEST_CASE("frag::wgmma_row and mma_row: the accumulator's rows, replicated over a quad") {
  const TileLayout r = frag::wgmma_row(128);
  const TileLayout c = frag::wgmma_c(128, 64);
  // Every element of row i of the accumulator lives in a thread that holds row i of the vector.
  for (std::int64_t i : {0, 7, 8, 15, 16, 63, 64, 127}) {
    std::vector<Location> rows = r.apply({i, 0}, {128, 1});
    CHECK(rows.size() == 4);
    for (std::int64_t j : {0, 1, 9, 63}) {
      Location at = c.apply({i, j}, {128, 64})[0];
      bool found = false;
      for (const Location& l : rows)
        found = found ||
                (l[static_cast<int>(Axis::laneid)] == at[static_cast<int>(Axis::laneid)] &&
                 l[static_cast<int>(Axis::wid_in_wg)] == at[static_cast<int>(Axis::wid_in_wg)]);
      CHECK(found);
    }
  }
  CHECK(r.storage().cosize() == 4);
  CHECK(frag::mma_row(32).storage().cosize() == 4);
  CHECK_THROWS_WITH_AS(frag::wgmma_row(96), doctest::Contains("m = 96"), Error);
}

TEST_CASE("where=: a condition on the coordinates, printed as a lambda, lowered to a select") {
  auto f = with_tile([](TileBuffer S, TileBuffer) {
    Tx::warpgroup::fill(S, -INFINITY, {.where = [](Expr r, Expr c) { return c > r + 3; }});
  });
  std::ostringstream os;
  os << f;
  CHECK(os.str().find("where=lambda i0, i1: i1 > i0 + 3") != std::string::npos);
  const std::string cuda = cuda_of(f);
  CHECK(cuda.find("? (__uint_as_float(0xff800000u)) : S[") != std::string::npos);
  // Two kernels that differ only in their conditions are different kernels.
  auto g = with_tile([](TileBuffer S, TileBuffer) {
    Tx::warpgroup::fill(S, -INFINITY, {.where = [](Expr r, Expr c) { return c > r + 4; }});
  });
  CHECK(structural_hash(f) != structural_hash(g));
}

TEST_CASE("where= errors name the op and the reason") {
  // Not a condition.
  CHECK_THROWS_WITH_AS(with_tile([](TileBuffer S, TileBuffer) {
                         Tx::warpgroup::fill(S, 0.0f,
                                             {.where = [](Expr r, Expr) { return r + 1; }});
                       }),
                       doctest::Contains("where= must be a condition"), Error);
  // One coordinate per dimension of the destination region.
  CHECK_THROWS_WITH_AS(with_tile([](TileBuffer S, TileBuffer) {
                         Tx::warpgroup::fill(S, 0.0f, {.where = [](Expr r) { return r > 1; }});
                       }),
                       doctest::Contains("takes 1 coordinates, but the destination region has 2"),
                       Error);
  // Ops that do not write elementwise refuse it.
  CHECK_THROWS_WITH_AS(
      with_tile([](TileBuffer S, TileBuffer) {
        auto m = T::alloc_buffer({64, 1}, f32, scope::local, frag::wgmma_row(64));
        Tx::warpgroup::max(m, S, {.where = [](Expr r, Expr) { return r > 1; }});
      }),
      doctest::Contains(
          "where= (write only where a condition on the coordinates holds) applies to"),
      Error);
  // A variant that does not implement it says so (never drops the condition).
  auto copy = with_tile([](TileBuffer, TileBuffer G) {
    auto Ssm = T::alloc_buffer({64, 64}, f32, scope::shared);
    Tx::warpgroup::copy(Ssm.all(), G.all(), {.where = [](Expr r, Expr) { return r > 1; }});
  });
  CHECK_THROWS_WITH_AS(lowering::lower(copy, {.arch = "sm_90a"}),
                       doctest::Contains("does not take where="), Error);
  // A coordinate kept outside its lambda has no value there.
  Expr leaked;
  auto leak = with_tile([&](TileBuffer S, TileBuffer G) {
    Tx::warpgroup::fill(S, 0.0f, {.where = [&](Expr r, Expr) {
                          leaked = r;
                          return r > 1;
                        }});
    G(0, 0) = cast(leaked, f32);
  });
  CHECK_THROWS_WITH_AS(lowering::lower(leak, {.arch = "sm_90a"}),
                       doctest::Contains("used outside it"), Error);
}

TEST_CASE("named barriers: ids from 15 down, bar.sync / bar.arrive, divergence refused") {
  const std::string cuda = cuda_of(tx::test::pingpong_kernel(4));
  CHECK(cuda.find("\"bar.sync %0, %1;\" :: \"r\"(") != std::string::npos);
  CHECK(cuda.find("\"bar.arrive %0, %1;\" :: \"r\"(14)") != std::string::npos);
  CHECK(cuda.find("\"n\"(256)") != std::string::npos);
  // A barrier some lanes of a warp skip.
  auto lanes = T::prim_func("k", [&]() {
    T::device_entry();
    T::cta_id({1});
    auto tid = T::thread_id({64});
    auto b = T::named_barriers({.count = 1, .threads = 64});
    T::if_(tid < 16, [&] { b.sync(); });
  });
  CHECK_THROWS_WITH_AS(lowering::lower(lanes, {.arch = "sm_90a"}),
                       doctest::Contains("counts whole warps"), Error);
  // More threads than the CTA has.
  auto big = T::prim_func("k", [&]() {
    T::device_entry();
    T::cta_id({1});
    T::thread_id({64});
    T::named_barriers({.count = 1, .threads = 128}).sync();
  });
  CHECK_THROWS_WITH_AS(lowering::lower(big, {.arch = "sm_90a"}),
                       doctest::Contains("the CTA has 64"), Error);
  // Counts: whole warps; at most 7 barriers of the kernel's own.
  CHECK_THROWS_WITH_AS(T::prim_func("k",
                                    [&]() {
                                      T::device_entry();
                                      T::named_barriers({.count = 1, .threads = 48});
                                    }),
                       doctest::Contains("a positive multiple of 32"), Error);
  CHECK_THROWS_WITH_AS(T::prim_func("k",
                                    [&]() {
                                      T::device_entry();
                                      T::named_barriers({.count = 5, .threads = 64});
                                      T::named_barriers({.count = 3, .threads = 64});
                                    }),
                       doctest::Contains("asks for 3 barriers with 5 taken"), Error);
}

TEST_CASE("the primitives on the host: row softmax of an accumulator, pingpong turns") {
  if (!host_jit("attention's primitives")) return;
  for (DType t : {bf16, f16})
    for (std::int64_t n : {64, 256}) {
      CAPTURE(t.name());
      CAPTURE(n);
      CHECK(tx::test::run_row_softmax(n, t, Device::host()) <= 1.0);
    }
  CHECK(tx::test::run_pingpong(9, Device::host()));
}

TEST_CASE("a named barrier that never fills is a deadlock naming it") {
  if (!host_jit("the deadlock report")) return;
  // Warpgroup 0 waits for 256 threads; warpgroup 1 never comes.
  auto f = T::prim_func("stuck", [&](Handle o_ptr) {
    auto O = T::match_buffer(o_ptr, {256}, i32);
    T::device_entry();
    T::cta_id({1});
    auto wg = T::warpgroup_id({2});
    auto tid = T::thread_id({256});
    auto bar = T::named_barriers({.count = 1, .threads = 256});
    T::if_(wg == 0, [&] { bar.sync(); });
    O(tid) = tid;
  });
  Kernel k = compile(f, {.device = Device::host()});
  Tensor O = Tensor::empty({256}, i32, Device::host());
  CHECK_THROWS_WITH_AS(k(O), doctest::Contains("on named barrier 15 (128 of 256 threads arrived)"),
                       Error);
}

TEST_CASE("where= on copies out of registers: rows past a sequence's end are not written") {
  if (!host_jit("where= on copy/reg")) return;
  // A (64, 48) accumulator stored to rows [0, 37) of G; the condition reads
  // the row only, so the stores stay vectors.
  auto f = T::prim_func("store_rows", [&](Handle g_ptr, Handle o_ptr) {
    auto G = T::match_buffer(g_ptr, {64, 48}, f32);
    auto O = T::match_buffer(o_ptr, {64, 48}, f32);
    T::device_entry();
    T::cta_id({1});
    T::thread_id({128});
    auto S = T::alloc_buffer({64, 48}, f32, scope::local, frag::wgmma_c(64, 48));
    Tx::warpgroup::copy(S, G.all());
    Tx::warpgroup::copy(O.all(), S, {.where = [](Expr r, Expr) { return r < 37; }});
  });
  const std::string cuda = cuda_of(f);
  CHECK(cuda.find("*(uint2*)") != std::string::npos);  // 8-byte stores under the condition
  auto g = tx::test::random_values(64 * 48, f32, 1, 2);
  Kernel k = compile(f, {.device = Device::host()});
  Tensor G = Tensor::from_doubles(g, {64, 48}, f32, Device::host());
  Tensor O = Tensor::empty({64, 48}, f32, Device::host());
  O.fill_bits(tx::test::poison_bits(f32));
  k(G, O);
  auto got = O.to_doubles();
  for (std::int64_t r = 0; r < 64; ++r)
    for (std::int64_t c = 0; c < 48; ++c) {
      const double x = got[static_cast<std::size_t>(r * 48 + c)];
      if (r < 37)
        CHECK(x == g[static_cast<std::size_t>(r * 48 + c)]);
      else
        CHECK(std::isnan(x));  // never written
    }
}

TEST_CASE("where= on shared tiles: elementwise/smem writes element by element") {
  if (!host_jit("where= on shared tiles")) return;
  auto f = T::prim_func("band", [&](Handle g_ptr) {
    auto G = T::match_buffer(g_ptr, {32, 48}, f32);
    T::device_entry();
    T::cta_id({1});
    T::thread_id({128});
    auto Ssm = T::alloc_buffer({32, 48}, f32, scope::shared);
    Tx::cta::copy(Ssm.all(), G.all());
    T::cuda::cta_sync();
    // Keep a band |row - col| <= 2; zero elsewhere.
    Tx::cta::fill(Ssm, 0.0f, {.where = [](Expr r, Expr c) { return c > r + 2 || r > c + 2; }});
    Tx::cta::copy(G.all(), Ssm.all());
  });
  auto g = tx::test::random_values(32 * 48, f32, 1, 2);
  Kernel k = compile(f, {.device = Device::host()});
  Tensor G = Tensor::from_doubles(g, {32, 48}, f32, Device::host());
  k(G);
  auto got = G.to_doubles();
  for (std::int64_t r = 0; r < 32; ++r)
    for (std::int64_t c = 0; c < 48; ++c) {
      const double want = std::abs(r - c) <= 2 ? g[static_cast<std::size_t>(r * 48 + c)] : 0.0;
      CHECK(got[static_cast<std::size_t>(r * 48 + c)] == want);
    }
}

TEST_CASE("samples/attention_hopper.cpp on the host against float64") {
  if (!host_jit("the attention sample")) return;
  for (const auto& c : tx::test::attention_host_cases()) {
    CAPTURE(c.name);
    auto e = tx::test::run_attention_sample(c.shape, c.dtype, c.tiling, Device::host());
    CHECK(e.out <= 1.0);
    CHECK(e.lse <= 1.0);
  }
}

TEST_CASE("the attention sample lowers for sm_90a: wgmma from shared and from registers, TMA") {
  const AttentionShape p{.batch = 1,
                         .heads = 2,
                         .kv_heads = 1,
                         .seq_q = 1000,
                         .seq_k = 1000,
                         .head_dim = 128,
                         .causal = true};
  auto k = lowering::lower(attention_hopper(p), {.arch = "sm_90a"});
  const std::string cuda = lowering::codegen_cuda(k);
  CHECK(cuda.find("wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16") != std::string::npos);
  CHECK(count(cuda, "tx_tma_load(") >= 3 + 5);  // Q, K, V (and the helper's overloads)
  CHECK(k.tensor_maps.size() == 3);
  CHECK(cuda.find("setmaxnreg.dec.sync.aligned.u32 %0;\" :: \"n\"(24)") != std::string::npos);
  CHECK(count(cuda, "A in registers") == 2);  // O += P V, in the loop and after it
}

TEST_CASE("three consumer warpgroups: 192-row blocks, 512 threads, 160 registers a consumer") {
  const AttentionShape p{.seq_q = 1000, .seq_k = 1000, .head_dim = 64, .causal = true};
  auto k = lowering::lower(attention_hopper(p, bf16, {.consumers = 3}), {.arch = "sm_90a"});
  const std::string cuda = lowering::codegen_cuda(k);
  CHECK(cuda.find("__launch_bounds__(512)") != std::string::npos);
  CHECK(cuda.find("setmaxnreg.inc.sync.aligned.u32 %0;\" :: \"n\"(160)") != std::string::npos);
  auto out = runtime::nvrtc_compile(cuda, "attention_c3.cu", "sm_90a", runtime::NvrtcTarget::cubin);
  CHECK(out.cubin.size() > 4);
  CHECK(out.log.find("C7515") == std::string::npos);
  // Larger heads, or pingpong's two-way turns, are refused by name.
  CHECK_THROWS_WITH_AS(attention_hopper({.head_dim = 128}, bf16, {.consumers = 3}),
                       doctest::Contains("consumers"), Error);
  CHECK_THROWS_WITH_AS(attention_hopper({.head_dim = 64}, bf16, {.pingpong = true, .consumers = 3}),
                       doctest::Contains("without pingpong"), Error);
  CHECK_THROWS_WITH_AS(attention_hopper({.head_dim = 64}, bf16, {.consumers = 4}),
                       doctest::Contains("consumers"), Error);
}

TEST_CASE(
    "min_ctas_per_sm: __launch_bounds__(threads, n), so ptxas budgets each side of setmaxnreg") {
  const AttentionShape p{.seq_q = 256, .seq_k = 256, .head_dim = 64};
  auto k = lowering::lower(attention_hopper(p), {.arch = "sm_90a"});
  const std::string plain = lowering::codegen_cuda(k);
  const std::string one = lowering::codegen_cuda(k, {.min_ctas_per_sm = 1});
  CHECK(plain.find("__launch_bounds__(384) ") != std::string::npos);
  CHECK(one.find("__launch_bounds__(384, 1) ") != std::string::npos);
  auto out = runtime::nvrtc_compile(one, "attention_lb.cu", "sm_90a", runtime::NvrtcTarget::cubin);
  CHECK(out.cubin.size() > 4);
  // Through tx::compile: the option reaches the code, and a bad value is a tx error.
  CHECK_THROWS_WITH_AS(compile(attention_hopper(p),
                               {.device = Device::cuda(), .arch = "sm_90a", .min_ctas_per_sm = 33}),
                       doctest::Contains("min_ctas_per_sm"), Error);
}

TEST_CASE("overlap_tiles: the next tile's first Q K^T behind the last P V, lowered for sm_90a") {
  // Every path that meets another has no wgmma group in flight (else ptxas
  // serializes the kernel's wgmma, C7515): the conditional first Q K^T waits
  // inside its branch, the tail waits for both groups before the epilogue.
  for (bool causal : {false, true}) {
    CAPTURE(causal);
    const AttentionShape p{.batch = 2,
                           .heads = 4,
                           .kv_heads = 4,
                           .seq_q = 1000,
                           .seq_k = 1000,
                           .head_dim = 128,
                           .causal = causal};
    const std::string cuda = lowering::codegen_cuda(lowering::lower(
        attention_hopper(p, bf16, {.bn = causal ? 128 : 176, .overlap_tiles = true}),
        {.arch = "sm_90a"}));
    CHECK(cuda.find("ahead[0] = 1;") != std::string::npos);
    auto out =
        runtime::nvrtc_compile(cuda, "attention_ov.cu", "sm_90a", runtime::NvrtcTarget::cubin);
    CHECK(out.cubin.size() > 4);
    CHECK(out.log.find("C7515") == std::string::npos);
  }
  CHECK_THROWS_WITH_AS(
      attention_hopper({.head_dim = 64}, bf16, {.pingpong = true, .overlap_tiles = true}),
      doctest::Contains("overlap_tiles"), Error);
}

TEST_CASE("ops::attention's kernel lowers for sm_90a and builds as a cubin, every head dim") {
  for (std::int64_t D : {64, 128, 256})
    for (bool causal : {false, true}) {
      CAPTURE(D);
      CAPTURE(causal);
      const std::string cuda = ops::detail::attention_cuda(D, 8, 2, bf16, causal, !causal);
      // S = Q K^T from shared memory, O += P V with P from registers.
      CHECK(count(cuda, "wgmma.mma_async") >= 2);
      CHECK(count(cuda, "setmaxnreg") == 2);
      auto out =
          runtime::nvrtc_compile(cuda, "attention_fwd.cu", "sm_90a", runtime::NvrtcTarget::cubin);
      CHECK(out.cubin.size() > 4);
      CHECK(out.log.find("C7515") == std::string::npos);  // ptxas kept the MMAs pipelined
    }
  // Three consumer warpgroups at head_dim 64: 512 threads, 160 registers a consumer.
  for (bool causal : {false, true}) {
    CAPTURE(causal);
    const std::string cuda = ops::detail::attention_cuda(64, 8, 2, bf16, causal, false, 3);
    CHECK(cuda.find("__launch_bounds__(512") != std::string::npos);
    CHECK(cuda.find("setmaxnreg.inc.sync.aligned.u32 %0;\" :: \"n\"(160)") != std::string::npos);
    auto out =
        runtime::nvrtc_compile(cuda, "attention_fwd3.cu", "sm_90a", runtime::NvrtcTarget::cubin);
    CHECK(out.cubin.size() > 4);
    CHECK(out.log.find("C7515") == std::string::npos);
  }
  CHECK_THROWS_WITH_AS(ops::detail::attention_cuda(128, 8, 2, bf16, false, false, 3),
                       doctest::Contains("consumers"), Error);
}

TEST_CASE("ops::attention_backward's kernels lower for sm_90a and build as cubins") {
  for (std::int64_t D : {64, 128})
    for (bool causal : {false, true}) {
      CAPTURE(D);
      CAPTURE(causal);
      auto cuda = ops::detail::attention_backward_cuda(D, 8, 2, bf16, causal, !causal);
      REQUIRE(cuda.size() == 4);
      CHECK(count(cuda[0], "wgmma.mma_async") == 0);  // D = rowsum(dO * O): registers only
      // The fused kernel: S, dP; P^T and dS^T read transposed; dQ = dS K, staged in
      // shared memory and added by TMA reductions (atomic/tma_reduce).
      CHECK(count(cuda[1], "wgmma.mma_async") >= 5);
      CHECK(count(cuda[1], "cp.reduce.async.bulk.tensor") >= 1);
      CHECK(count(cuda[1], "atomicAdd(") == 0);
      // Deterministic: dq (S, dP from shared, dQ += dS K from registers), then dk/dv.
      CHECK(count(cuda[2], "wgmma.mma_async") >= 3);
      CHECK(count(cuda[3], "wgmma.mma_async") >= 4);
      CHECK(count(cuda[2] + cuda[3], "atomicAdd(") == 0);
      for (std::size_t i = 0; i < cuda.size(); ++i) {
        auto out = runtime::nvrtc_compile(cuda[i], "attention_bwd.cu", "sm_90a",
                                          runtime::NvrtcTarget::cubin);
        CHECK(out.cubin.size() > 4);
        CAPTURE(i);
        CHECK(out.log.find("C7515") == std::string::npos);
      }
    }
}
