// Kernels and checks shared by the Hopper tests on the GPU (gpu_hopper.cpp)
// and on the host, where the same kernels run as fibers (test_hopper.cpp).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "test_support.hpp"
#include "tx/tx.hpp"

namespace tx::test {

// A producer warpgroup writes position it (it * 1000 + thread + CTA * 100000)
// into stage it % 2 with plain stores; each of two consumer warpgroups copies
// the stage out to O[cta, it, consumer, thread]. Every thread arrives for its
// own accesses (128 producer and 256 consumer arrivals per phase), so the
// barriers alone order them. 2 stages over P positions: every barrier goes
// through about P / 2 phases; a wrong parity deadlocks or reads a stage twice
// or too early.
inline PrimFunc pipeline_phases(std::int64_t P, std::int64_t ctas = 1) {
  return T::prim_func("pipeline_phases", [&](Handle o_ptr) {
    auto O = T::match_buffer(o_ptr, {ctas, P, 2, 128}, i32);
    T::device_entry();
    auto cta = T::cta_id({ctas});
    auto wg = T::warpgroup_id({3});
    auto tid = T::thread_id_in_wg({128});
    auto S = T::alloc_buffer({2, 128}, i32, scope::shared);
    auto pipe = T::pipeline({.stages = 2, .producer_arrivals = 128, .consumer_arrivals = 256});
    T::if_(wg == 0, [&] {
      for (Var it : T::serial(P, "it")) {
        pipe.producer_acquire(it);
        S(pipe.stage(it), tid) = it * 1000 + tid + cta * 100000;
        pipe.producer_commit(it);
      }
    }).else_([&] {
      auto c = T::let(max(wg - 1, 0));
      for (Var it : T::serial(P, "it")) {
        pipe.consumer_wait(it);
        O(cta, it, c, tid) = S(pipe.stage(it), tid);
        pipe.consumer_release(it);
      }
    });
  });
}

inline bool pipeline_phases_ok(const std::vector<double>& got, std::int64_t P,
                               std::int64_t ctas = 1) {
  for (std::int64_t b = 0; b < ctas; ++b)
    for (std::int64_t it = 0; it < P; ++it)
      for (std::int64_t c = 0; c < 2; ++c)
        for (std::int64_t t = 0; t < 128; ++t)
          if (got[static_cast<std::size_t>(((b * P + it) * 2 + c) * 128 + t)] !=
              static_cast<double>(it * 1000 + t + b * 100000))
            return false;
  return true;
}

// D = scale * A B with A in registers (gemm/wgmma's register form): one
// warpgroup loads A (64 x K, row-major in global) into frag::wgmma_a, scales
// it there (what the register form is for: A transformed before the MMA),
// copies B (K x N) into a swizzled shared tile and multiplies; D (64 x N,
// f32). K: a multiple of 16 (32 for fp8); B as (N, K) with transpose_b for
// fp8, which wgmma reads K-major only.
inline PrimFunc wgmma_register_a(std::int64_t N, std::int64_t K, DType t, double scale) {
  const bool bt = t.is_fp8();
  return T::prim_func("wgmma_register_a", [&](Handle a_ptr, Handle b_ptr, Handle d_ptr) {
    auto A = T::match_buffer(a_ptr, {64, K}, t);
    auto B = bt ? T::match_buffer(b_ptr, {N, K}, t) : T::match_buffer(b_ptr, {K, N}, t);
    auto D = T::match_buffer(d_ptr, {64, N}, f32);
    T::device_entry();
    T::cta_id({1});
    T::thread_id({128});
    auto Ar = T::alloc_buffer({64, K}, t, scope::local, frag::wgmma_a(64, K, t), "Ar");
    const std::int64_t rows = bt ? N : K, cols = bt ? K : N;
    auto Bs =
        T::alloc_buffer({rows, cols}, t, scope::shared, layouts::swizzled_tiles({rows, cols}, t));
    auto acc = T::alloc_buffer({64, N}, f32, scope::local, frag::wgmma_c(64, N));
    Tx::warpgroup::copy(Ar, A.all());
    Tx::warpgroup::mul(Ar, Ar, scale);
    Tx::warpgroup::copy(Bs, B.all());
    // Plain stores to shared memory, read by the MMA's async proxy: each
    // thread's fence, then the barrier.
    T::cuda::fence_proxy_async();
    T::cuda::cta_sync();
    Tx::warpgroup::gemm(acc, Ar, Bs, {.transpose_b = bt});
    Tx::warpgroup::copy(D.all(), acc);
  });
}

// Runs wgmma_register_a (scale 0.5) on device d with fresh random A and B
// and returns its gemm_error against float64 (<= 1 passes). The reference
// rounds 0.5 A to t, as the kernel does in registers (fp8 subnormals lose a
// bit), and reads B as (K, N) (fp8's kernel reads it stored (N, K)).
// mag_rel: gemm_error's allowance for fp8 on the tensor cores.
inline double run_wgmma_register_a(std::int64_t N, std::int64_t K, DType t, Device d,
                                   double mag_rel = 0) {
  Kernel k = compile(wgmma_register_a(N, K, t, 0.5), {.device = d});
  auto a = random_values(static_cast<std::size_t>(64 * K), t, -2, 2);
  auto bs = random_values(static_cast<std::size_t>(K * N), t, -2, 2);
  std::vector<double> b(bs.size()), half_a(a.size());
  for (std::int64_t p = 0; p < K; ++p)
    for (std::int64_t j = 0; j < N; ++j)
      b[static_cast<std::size_t>(p * N + j)] =
          bs[static_cast<std::size_t>(t.is_fp8() ? j * K + p : p * N + j)];
  for (std::size_t i = 0; i < a.size(); ++i) half_a[i] = 0.5 * a[i];
  half_a = Tensor::from_doubles(half_a, {64 * K}, t, Device::host()).to_doubles();
  Tensor A = Tensor::from_doubles(a, {64, K}, t, d);
  Tensor B = Tensor::from_doubles(
      bs, t.is_fp8() ? std::vector<std::int64_t>{N, K} : std::vector<std::int64_t>{K, N}, t, d);
  Tensor D = Tensor::empty({64, N}, f32, d);
  D.fill_bits(poison_bits(f32));
  k(A, B, D);
  return gemm_error(half_a, b, D.to_doubles(), 64, N, K, 0x1p-24, mag_rel);
}

// D = A B with A given as its transpose At (K, M) in a swizzled shared tile
// and read through TileBuffer::transposed: wgmma takes the view M-major (the
// attention backward's dV = P^T dO and dK = dS^T Q).
inline PrimFunc gemm_transposed_a(std::int64_t M, std::int64_t N, std::int64_t K) {
  return T::prim_func("gemm_transposed_a", [&](Handle at_ptr, Handle b_ptr, Handle d_ptr) {
    auto At = T::match_buffer(at_ptr, {K, M}, bf16);
    auto B = T::match_buffer(b_ptr, {K, N}, bf16);
    auto D = T::match_buffer(d_ptr, {M, N}, f32);
    T::device_entry();
    T::cta_id({1});
    T::thread_id({128});
    auto Ats = T::alloc_buffer({K, M}, bf16, scope::shared, layouts::swizzled_tiles({K, M}, bf16));
    auto Bs = T::alloc_buffer({K, N}, bf16, scope::shared, layouts::swizzled_tiles({K, N}, bf16));
    auto acc = T::alloc_buffer({M, N}, f32, scope::local, frag::wgmma_c(M, N));
    Tx::cta::copy(Ats, At.all());
    Tx::cta::copy(Bs, B.all());
    T::cuda::fence_proxy_async();
    T::cuda::cta_sync();
    Tx::warpgroup::gemm(acc, Ats.transposed(), Bs);
    Tx::warpgroup::copy(D.all(), acc);
  });
}

// Runs gemm_transposed_a on device d (the checked host mode if `checked`)
// with fresh random inputs; its gemm_error against float64 (<= 1 passes).
inline double run_gemm_transposed_a(std::int64_t M, std::int64_t N, std::int64_t K, Device d,
                                    bool checked = false) {
  Kernel k = compile(gemm_transposed_a(M, N, K), {.device = d, .checked = checked});
  auto at = random_values(static_cast<std::size_t>(K * M), bf16, -2, 2);
  auto b = random_values(static_cast<std::size_t>(K * N), bf16, -2, 2);
  std::vector<double> a(at.size());
  for (std::int64_t i = 0; i < M; ++i)
    for (std::int64_t p = 0; p < K; ++p)
      a[static_cast<std::size_t>(i * K + p)] = at[static_cast<std::size_t>(p * M + i)];
  Tensor At = Tensor::from_doubles(at, {K, M}, bf16, d);
  Tensor B = Tensor::from_doubles(b, {K, N}, bf16, d);
  Tensor D = Tensor::empty({M, N}, f32, d);
  D.fill_bits(poison_bits(f32));
  k(At, B, D);
  return gemm_error(a, b, D.to_doubles(), M, N, K, 0x1p-24);
}

// TMA stores (copy_async/tma_store): each of `blocks` CTAs copies its R x C
// tile of G1 into a shared tile of `layout` (a plain copy), stores it to O1
// with copy_async, waits until the TMA has read it (tma_store_wait, then the
// barrier), overwrites the tile with its tile of G2 and stores that to O2.
// O1 and O2 have `rows` rows (<= blocks * R): the last tile reaches past
// them (partial=), and the TMA clips it. A missing wait lets G2's values
// into O1.
inline PrimFunc tma_store_tiles(std::int64_t R, std::int64_t C, DType t, const TileLayout& layout,
                                std::int64_t blocks, std::int64_t rows) {
  return T::prim_func("tma_store_tiles",
                      [&](Handle g1_ptr, Handle g2_ptr, Handle o1_ptr, Handle o2_ptr) {
                        auto G1 = T::match_buffer(g1_ptr, {blocks * R, C}, t);
                        auto G2 = T::match_buffer(g2_ptr, {blocks * R, C}, t);
                        auto O1 = T::match_buffer(o1_ptr, {rows, C}, t);
                        auto O2 = T::match_buffer(o2_ptr, {rows, C}, t);
                        T::device_entry();
                        auto blk = T::cta_id({blocks});
                        T::thread_id({128});
                        auto S = T::alloc_buffer({R, C}, t, scope::shared, layout);
                        auto tile = [&] { return region(span(blk * R, R), {0, C}); };
                        Tx::cta::copy(S.all(), G1[tile()]);
                        Tx::cta::copy_async(O1[tile()], S.all(), {.partial = true});
                        T::cuda::tma_store_wait(0);
                        T::cuda::cta_sync();
                        Tx::cta::copy(S.all(), G2[tile()]);
                        Tx::cta::copy_async(O2[tile()], S.all(), {.partial = true});
                      });
}

// Runs tma_store_tiles on `d` with random inputs and poisoned outputs;
// whether both outputs hold exactly their inputs' first `rows` rows.
inline bool run_tma_store_tiles(std::int64_t R, std::int64_t C, DType t, const TileLayout& layout,
                                std::int64_t blocks, std::int64_t rows, Device d,
                                std::vector<std::string>* variants = nullptr) {
  Kernel k = compile(tma_store_tiles(R, C, t, layout, blocks, rows), {.device = d});
  if (variants)
    for (const auto& r : k.info().dispatched) variants->push_back(r.variant);
  auto g1 = random_values(static_cast<std::size_t>(blocks * R * C), t, -8, 8);
  auto g2 = random_values(static_cast<std::size_t>(blocks * R * C), t, -8, 8);
  Tensor G1 = Tensor::from_doubles(g1, {blocks * R, C}, t, d);
  Tensor G2 = Tensor::from_doubles(g2, {blocks * R, C}, t, d);
  Tensor O1 = Tensor::empty({rows, C}, t, d), O2 = Tensor::empty({rows, C}, t, d);
  O1.fill_bits(poison_bits(t));
  O2.fill_bits(poison_bits(t));
  k(G1, G2, O1, O2);
  g1.resize(static_cast<std::size_t>(rows * C));
  g2.resize(static_cast<std::size_t>(rows * C));
  return O1.to_doubles() == g1 && O2.to_doubles() == g2;
}

// atomic_add of a shared tile: each of `ctas` CTAs (one warpgroup) writes
// X[cta] (rows x 32 f32) into a 128-byte swizzled shared tile and adds it
// into G's first 64 rows at once (atomic/tma_reduce on sm_90, one TMA
// reduction per box; atomic/fallback elsewhere); G has `rows` rows, so
// rows < 64 clips the tile (partial=). G ends as G0 + sum over CTAs of X.
// hopper = false: no bulk-group wait (a kernel for GPUs before sm_90).
inline PrimFunc shared_tile_atomic_add(std::int64_t rows, std::int64_t ctas, bool hopper = true) {
  return T::prim_func("shared_tile_atomic_add", [&](Handle x_ptr, Handle g_ptr) {
    auto X = T::match_buffer(x_ptr, {ctas, 64, 32}, f32);
    auto G = T::match_buffer(g_ptr, {rows, 32}, f32);
    T::device_entry();
    auto cta = T::cta_id({ctas});
    auto tid = T::thread_id({128});
    auto S = T::alloc_buffer({64, 32}, f32, scope::shared, layouts::swizzled_tiles({64, 32}, f32));
    for (Var e : T::serial(64 * 32 / 128, "e")) {
      auto i = T::let((tid + e * 128) / 32), j = T::let((tid + e * 128) % 32);
      S(i, j) = X(cta, i, j);
    }
    T::cuda::cta_sync();
    Tx::warpgroup::atomic_add(G[region({0, 64}, {0, 32})], S, {.partial = rows < 64});
    if (hopper) T::cuda::tma_store_wait(0);  // (the kernel's end waits anyway)
  });
}

// Runs it on `d` from fresh random X and G0; the worst error against float64
// (f32 sums of `ctas` terms: <= 1 passes).
inline double run_shared_tile_atomic_add(const Kernel& k, const Device& d, std::int64_t rows,
                                         std::int64_t ctas) {
  std::vector<double> x = random_values(static_cast<std::size_t>(ctas * 64 * 32), f32, -1, 1);
  std::vector<double> g = random_values(static_cast<std::size_t>(rows * 32), f32, -1, 1);
  Tensor X = Tensor::from_doubles(x, {ctas, 64, 32}, f32, d);
  Tensor G = Tensor::from_doubles(g, {rows, 32}, f32, d);
  k(X, G);
  const std::vector<double> got = G.to_doubles();
  double worst = 0;
  for (std::int64_t i = 0; i < rows; ++i)
    for (std::int64_t j = 0; j < 32; ++j) {
      double want = g[static_cast<std::size_t>(i * 32 + j)], mag = std::fabs(want);
      for (std::int64_t c = 0; c < ctas; ++c) {
        const double v = x[static_cast<std::size_t>((c * 64 + i) * 32 + j)];
        want += v;
        mag += std::fabs(v);
      }
      const double e = std::fabs(got[static_cast<std::size_t>(i * 32 + j)] - want) /
                       (static_cast<double>(ctas + 1) * 0x1p-23 * mag + 1e-30);
      worst = std::max(worst, std::isnan(e) ? INFINITY : e);
    }
  return worst;
}

}  // namespace tx::test
