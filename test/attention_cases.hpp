// The attention forward against float64, shared by the host suite
// (test_attention.cpp: the sample's kernel as fibers) and the GPU suite
// (gpu_attention.cpp).
//
// Tolerance, derived: S = Q K^T is exact to f32 rounding (|err| ~ D 2^-24
// |q||k|, far below what follows); P = exp2(S c - m c) is f32 (ex2.approx:
// 2 ulp) and then rounded to the input dtype for the second MMA, a relative
// error of u per probability (u = 2^-9 for bf16, 2^-11 for f16) while the
// row sum l adds the unrounded ones; so |O - O_ref| <= u max|v| from P plus
// u |O_ref| from rounding O. The bound checked is twice that (f32 sums of
// up to seq_k terms and the exp2 approximation stay far inside the margin).
// The log-sum-exp is f32 throughout: 1e-5 absolute plus 1e-5 relative.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "test_support.hpp"
#include "tx/tx.hpp"

#define TX_SAMPLE_NO_MAIN
#include "../samples/attention_hopper.cpp"
#undef TX_SAMPLE_NO_MAIN

namespace tx::test {

struct AttentionRef {
  std::vector<double> out;  // (batch, seq_q, heads, head_dim)
  std::vector<double> lse;  // (batch, heads, seq_q); -inf for a row with no key
};

// softmax(Q K^T scale, masked) V in float64; q (b, sq, h, d), k and v (b,
// sk, hkv, d). A row whose keys are all masked is 0 (lse -inf), as the
// kernel documents.
inline AttentionRef attention_reference(const AttentionShape& p, const std::vector<double>& q,
                                        const std::vector<double>& k,
                                        const std::vector<double>& v) {
  const std::int64_t D = p.head_dim, group = p.heads / p.kv_heads;
  const std::int64_t diagonal = p.bottom_right ? p.seq_k - p.seq_q : 0;
  const double scale = p.scale > 0 ? p.scale : 1.0 / std::sqrt(static_cast<double>(D));
  AttentionRef r{std::vector<double>(static_cast<std::size_t>(p.batch * p.seq_q * p.heads * D)),
                 std::vector<double>(static_cast<std::size_t>(p.batch * p.heads * p.seq_q))};
  std::vector<double> s(static_cast<std::size_t>(p.seq_k));
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t h = 0; h < p.heads; ++h)
      for (std::int64_t i = 0; i < p.seq_q; ++i) {
        const std::int64_t hk = h / group;
        const std::int64_t keys =
            p.causal ? std::clamp<std::int64_t>(i + diagonal + 1, 0, p.seq_k) : p.seq_k;
        double mx = -INFINITY, sum = 0;
        for (std::int64_t j = 0; j < keys; ++j) {
          double dot = 0;
          for (std::int64_t d = 0; d < D; ++d)
            dot += q[static_cast<std::size_t>(((b * p.seq_q + i) * p.heads + h) * D + d)] *
                   k[static_cast<std::size_t>(((b * p.seq_k + j) * p.kv_heads + hk) * D + d)];
          s[static_cast<std::size_t>(j)] = dot * scale;
          mx = std::max(mx, dot * scale);
        }
        for (std::int64_t j = 0; j < keys; ++j)
          sum += (s[static_cast<std::size_t>(j)] = std::exp(s[static_cast<std::size_t>(j)] - mx));
        r.lse[static_cast<std::size_t>((b * p.heads + h) * p.seq_q + i)] =
            keys > 0 ? mx + std::log(sum) : -INFINITY;
        for (std::int64_t d = 0; d < D; ++d) {
          double o = 0;
          for (std::int64_t j = 0; j < keys; ++j)
            o += s[static_cast<std::size_t>(j)] *
                 v[static_cast<std::size_t>(((b * p.seq_k + j) * p.kv_heads + hk) * D + d)];
          r.out[static_cast<std::size_t>(((b * p.seq_q + i) * p.heads + h) * D + d)] =
              keys > 0 ? o / sum : 0.0;
        }
      }
  return r;
}

struct AttentionError {
  double out = 0, lse = 0;  // worst error over the bound (<= 1 passes); NaN: infinite
};

// The derived bound (above) for outputs of dtype t with |v| <= vmax.
inline AttentionError attention_error(const AttentionRef& want, const std::vector<double>& out,
                                      const std::vector<double>& lse, DType t, double vmax) {
  const double u = t == f16 ? 0x1p-11 : 0x1p-9;
  AttentionError e;
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (std::isnan(out[i])) return {INFINITY, INFINITY};
    const double tol = 2 * (u * vmax + u * std::fabs(want.out[i])) + 1e-30;
    e.out = std::max(e.out, std::fabs(out[i] - want.out[i]) / tol);
  }
  for (std::size_t i = 0; i < lse.size(); ++i) {
    if (std::isinf(want.lse[i])) {
      if (!(std::isinf(lse[i]) && lse[i] < 0)) return {e.out, INFINITY};
      continue;
    }
    if (std::isnan(lse[i])) return {e.out, INFINITY};
    e.lse =
        std::max(e.lse, std::fabs(lse[i] - want.lse[i]) / (1e-5 + 1e-5 * std::fabs(want.lse[i])));
  }
  return e;
}

// Runs the sample's kernel on device d with fresh random inputs (|q|, |k| <=
// 2, |v| <= 1, never zero) and poisoned outputs; returns its error.
inline AttentionError run_attention_sample(const AttentionShape& p, DType t,
                                           const AttentionTiling& tiling, Device d) {
  Kernel kern = compile(attention_hopper(p, t, tiling), {.device = d, .approx_math = true});
  const std::int64_t D = p.head_dim;
  auto q = random_values(static_cast<std::size_t>(p.batch * p.seq_q * p.heads * D), t, -2, 2);
  auto k = random_values(static_cast<std::size_t>(p.batch * p.seq_k * p.kv_heads * D), t, -2, 2);
  auto v = random_values(static_cast<std::size_t>(p.batch * p.seq_k * p.kv_heads * D), t, -1, 1);
  Tensor Q = Tensor::from_doubles(q, {p.batch, p.seq_q, p.heads, D}, t, d);
  Tensor K = Tensor::from_doubles(k, {p.batch, p.seq_k, p.kv_heads, D}, t, d);
  Tensor V = Tensor::from_doubles(v, {p.batch, p.seq_k, p.kv_heads, D}, t, d);
  Tensor O = Tensor::empty({p.batch, p.seq_q, p.heads, D}, t, d);
  Tensor L = Tensor::empty({p.batch, p.heads, p.seq_q}, f32, d);
  O.fill_bits(poison_bits(t));
  L.fill_bits(poison_bits(f32));
  kern(Q, K, V, O, L);
  return attention_error(attention_reference(p, q, k, v), O.to_doubles(), L.to_doubles(), t, 1.0);
}

// ------------------------------------------------------------ primitives
// The softmax of one (64, N) score tile held as a wgmma accumulator, with
// every primitive attention adds: scores above the diagonal (col > row + 3)
// masked by where=, the row max and row sum (reductions along the
// accumulator's rows into frag::wgmma_row vectors: register folds, then
// shuffles across each quad), exp2 with the scale and a per-row bias,
// division by the per-row sum (a row vector broadcast against the tile), and
// the conversion of the f32 accumulator into the bf16 register A of a next
// wgmma (frag::wgmma_a). Out: P (64, N) in t, the row max and row sum.
inline PrimFunc row_softmax_kernel(std::int64_t N, DType t, double scale) {
  return T::prim_func("row_softmax", [&](Handle s_ptr, Handle p_ptr, Handle m_ptr, Handle l_ptr) {
    auto Sg = T::match_buffer(s_ptr, {64, N}, f32);
    auto Pg = T::match_buffer(p_ptr, {64, N}, t);
    auto Mg = T::match_buffer(m_ptr, {64, 1}, f32);
    auto Lg = T::match_buffer(l_ptr, {64, 1}, f32);
    T::device_entry();
    T::cta_id({1});
    T::thread_id({128});
    auto S = T::alloc_buffer({64, N}, f32, scope::local, frag::wgmma_c(64, N));
    auto P = T::alloc_buffer({64, N}, t, scope::local, frag::wgmma_a(64, N, t));
    auto m = T::alloc_buffer({64, 1}, f32, scope::local, frag::wgmma_row(64));
    auto neg_m = T::alloc_buffer({64, 1}, f32, scope::local, frag::wgmma_row(64));
    auto l = T::alloc_buffer({64, 1}, f32, scope::local, frag::wgmma_row(64));
    Tx::warpgroup::copy(S, Sg.all());
    Tx::warpgroup::fill(S, -INFINITY, {.where = [](Expr r, Expr c) { return c > r + 3; }});
    Tx::warpgroup::max(m, S);
    Tx::warpgroup::mul(neg_m, m, -scale);
    Tx::warpgroup::exp2(S, S, {.scale = scale, .bias = neg_m.all()});
    Tx::warpgroup::sum(l, S);
    Tx::warpgroup::fdiv(S, S, l);
    Tx::warpgroup::cast(P, S);
    Tx::warpgroup::copy(Pg.all(), P);
    Tx::warpgroup::copy(Mg.all(), m);
    Tx::warpgroup::copy(Lg.all(), l);
  });
}

// Runs row_softmax_kernel on d; the worst error over its bound: the row max
// exactly, the row sum to 1e-6 relative (f32 sums of <= 256 terms, ex2), P
// to two roundings of t.
inline double run_row_softmax(std::int64_t N, DType t, Device d) {
  const double scale = 0.3;
  Kernel k = compile(row_softmax_kernel(N, t, scale), {.device = d});
  auto s = random_values(static_cast<std::size_t>(64 * N), f32, -4, 4);
  Tensor St = Tensor::from_doubles(s, {64, N}, f32, d);
  Tensor Pt = Tensor::empty({64, N}, t, d), Mt = Tensor::empty({64, 1}, f32, d),
         Lt = Tensor::empty({64, 1}, f32, d);
  Pt.fill_bits(poison_bits(t));
  Mt.fill_bits(poison_bits(f32));
  Lt.fill_bits(poison_bits(f32));
  k(St, Pt, Mt, Lt);
  auto p = Pt.to_doubles(), m = Mt.to_doubles(), l = Lt.to_doubles();
  const double u = t == f16 ? 0x1p-11 : 0x1p-9;
  double worst = 0;
  for (std::int64_t i = 0; i < 64; ++i) {
    double mx = -INFINITY, sum = 0;
    for (std::int64_t j = 0; j <= std::min(N - 1, i + 3); ++j)
      mx = std::max(mx, s[static_cast<std::size_t>(i * N + j)]);
    for (std::int64_t j = 0; j <= std::min(N - 1, i + 3); ++j)
      sum += std::exp2((s[static_cast<std::size_t>(i * N + j)] - mx) * scale);
    const auto ii = static_cast<std::size_t>(i);
    if (std::isnan(m[ii]) || std::isnan(l[ii])) return INFINITY;
    worst = std::max(worst, m[ii] == mx ? 0.0 : INFINITY);
    worst = std::max(worst, std::fabs(l[ii] - sum) / (1e-6 * sum));
    for (std::int64_t j = 0; j < N; ++j) {
      const double want =
          j > i + 3 ? 0.0 : std::exp2((s[static_cast<std::size_t>(i * N + j)] - mx) * scale) / sum;
      const double got = p[static_cast<std::size_t>(i * N + j)];
      if (std::isnan(got)) return INFINITY;
      worst = std::max(worst, std::fabs(got - want) / (2 * u * want + 1e-30));
    }
  }
  return worst;
}

// Two warpgroups take turns K times through two named barriers (the
// pingpong schedule of attention's consumers): on its turn, warpgroup w's
// thread 0 writes the next number of a shared counter to log[2 it + w]. With
// the barriers the log is 0, 1, 2, ...; without them the order is a race.
inline PrimFunc pingpong_kernel(std::int64_t K) {
  return T::prim_func("pingpong", [&](Handle log_ptr) {
    auto Log = T::match_buffer(log_ptr, {2 * K}, i32);
    T::device_entry();
    T::cta_id({1});
    auto wg = T::warpgroup_id({2});
    auto tid = T::thread_id_in_wg({128});
    auto counter = T::alloc_buffer({1}, i32, scope::shared);
    T::if_(wg == 0 && tid == 0, [&] { counter(0) = 0; });
    T::cuda::cta_sync();
    auto turn = T::named_barriers({.count = 2, .threads = 256});
    T::if_(wg == 1, [&] { turn.arrive(0); });  // warpgroup 0 goes first
    for (Var it : T::serial(K, "it")) {
      turn.sync(wg);
      T::if_(tid == 0, [&] {
        Log(2 * it + wg) = counter(0);
        counter(0) = counter(0) + 1;
      });
      turn.arrive(1 - wg);
    }
  });
}

inline bool run_pingpong(std::int64_t K, Device d) {
  Kernel k = compile(pingpong_kernel(K), {.device = d});
  Tensor L = Tensor::empty({2 * K}, i32, d);
  L.fill_bits(poison_bits(i32));
  k(L);
  auto got = L.to_doubles();
  for (std::int64_t i = 0; i < 2 * K; ++i)
    if (got[static_cast<std::size_t>(i)] != static_cast<double>(i)) return false;
  return true;
}

// Shapes both suites run: partial tiles (S not a multiple of 128), Sq != Sk,
// GQA, causal both ways (bottom-right with Sq > Sk leaves rows with no key),
// S = 1, every head dim, both dtypes, and few persistent CTAs (many rounds:
// the pipelines' phases carry across tiles).
struct AttentionCase {
  std::string name;
  AttentionShape shape;
  DType dtype = bf16;
  AttentionTiling tiling{};
};
inline std::vector<AttentionCase> attention_host_cases() {
  return {
      {"d64 gqa non-causal, partial tiles",
       {.batch = 1, .heads = 2, .kv_heads = 1, .seq_q = 150, .seq_k = 190, .head_dim = 64}},
      {"d64 causal Sq < Sk",
       {.batch = 2,
        .heads = 2,
        .kv_heads = 2,
        .seq_q = 200,
        .seq_k = 300,
        .head_dim = 64,
        .causal = true}},
      {"d64 causal bottom-right Sq > Sk (rows with no key)",
       {.batch = 1,
        .heads = 1,
        .kv_heads = 1,
        .seq_q = 130,
        .seq_k = 70,
        .head_dim = 64,
        .causal = true,
        .bottom_right = true}},
      {"S = 1",
       {.batch = 1,
        .heads = 1,
        .kv_heads = 1,
        .seq_q = 1,
        .seq_k = 1,
        .head_dim = 64,
        .causal = true}},
      {"one query, many keys",
       {.batch = 1, .heads = 4, .kv_heads = 1, .seq_q = 1, .seq_k = 700, .head_dim = 64}},
      {"d128 f16 causal, BN 64",
       {.batch = 1,
        .heads = 1,
        .kv_heads = 1,
        .seq_q = 197,
        .seq_k = 197,
        .head_dim = 128,
        .causal = true},
       f16,
       {.bn = 64}},
      {"d256 bf16, BN 64, one stage",
       {.batch = 1, .heads = 1, .kv_heads = 1, .seq_q = 100, .seq_k = 160, .head_dim = 256},
       bf16,
       {.bn = 64, .stages = 1}},
      {"two CTAs, nine rounds each, causal, longest first",
       {.batch = 2,
        .heads = 3,
        .kv_heads = 3,
        .seq_q = 300,
        .seq_k = 300,
        .head_dim = 64,
        .causal = true},
       bf16,
       {.ctas = 2, .causal_pairs = false}},
      // Mirrored pairs (row blocks 2 and 0, then 1 alone: a round without a
      // tile between rounds with one) on three CTAs; and an even count.
      {"causal pairs, three CTAs, an odd count of row blocks",
       {.batch = 2,
        .heads = 2,
        .kv_heads = 1,
        .seq_q = 300,
        .seq_k = 300,
        .head_dim = 64,
        .causal = true},
       bf16,
       {.ctas = 3, .causal_pairs = true}},
      {"causal pairs bottom-right, four row blocks",
       {.batch = 1,
        .heads = 3,
        .kv_heads = 3,
        .seq_q = 450,
        .seq_k = 500,
        .head_dim = 64,
        .causal = true,
        .bottom_right = true},
       bf16,
       {.ctas = 2, .causal_pairs = true}},
      // Three consumer warpgroups: row blocks of 192 (FA3's D 64 tiling).
      {"three consumers, causal pairs, partial row and key blocks",
       {.batch = 1,
        .heads = 2,
        .kv_heads = 1,
        .seq_q = 500,
        .seq_k = 520,
        .head_dim = 64,
        .causal = true},
       bf16,
       {.ctas = 2, .consumers = 3}},
      {"three consumers, non-causal, fewer rows than one block",
       {.batch = 2, .heads = 2, .kv_heads = 2, .seq_q = 100, .seq_k = 333, .head_dim = 64},
       f16,
       {.consumers = 3}},
      // overlap_tiles: the next tile's first S issued before the epilogue --
      // across many rounds, across a round without a tile (a pair of one),
      // into tiles with no key block (bottom-right, Sq > Sk), at 3 consumers.
      {"overlap tiles, two CTAs, non-causal GQA, partial blocks",
       {.batch = 2, .heads = 4, .kv_heads = 2, .seq_q = 300, .seq_k = 270, .head_dim = 64},
       bf16,
       {.ctas = 2, .overlap_tiles = true}},
      {"overlap tiles, causal pairs, an odd count of row blocks",
       {.batch = 2,
        .heads = 2,
        .kv_heads = 1,
        .seq_q = 300,
        .seq_k = 300,
        .head_dim = 64,
        .causal = true},
       bf16,
       {.ctas = 3, .overlap_tiles = true}},
      {"overlap tiles, bottom-right Sq > Sk (tiles with no key block)",
       {.batch = 1,
        .heads = 3,
        .kv_heads = 1,
        .seq_q = 400,
        .seq_k = 90,
        .head_dim = 128,
        .causal = true,
        .bottom_right = true},
       f16,
       {.bn = 64, .ctas = 2, .causal_pairs = false, .overlap_tiles = true}},
      {"overlap tiles, three consumers, longest first",
       {.batch = 1,
        .heads = 3,
        .kv_heads = 3,
        .seq_q = 450,
        .seq_k = 450,
        .head_dim = 64,
        .causal = true},
       bf16,
       {.ctas = 2, .causal_pairs = false, .consumers = 3, .overlap_tiles = true}},
  };
}

}  // namespace tx::test
