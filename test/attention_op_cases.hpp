// tx::ops::attention on the device TX_ATTN_DEVICE (host_attention.cpp: the
// host JIT, the kernel as fibers; gpu_attention_op.cpp: an sm_90 GPU):
// both storage layouts and their mixes, strided views, GQA, causal both
// ways, Sq != Sk, partial tiles, variable-length batches, empty sequences,
// NaN propagation and the errors -- against float64 with the bound of
// attention_cases.hpp, on fresh random inputs with poisoned outputs.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "attention_cases.hpp"
#include "test_support.hpp"
#include "tx/ops/attention.hpp"
#include "tx/tx.hpp"

#ifndef TX_ATTN_DEVICE
#error "define TX_ATTN_DEVICE before including attention_op_cases.hpp"
#endif

namespace attncase {

using namespace tx;
using tx::test::random_values;

inline Device device() { return TX_ATTN_DEVICE; }

// A (B, H, S, D) logical tensor of `vals` stored (B, H, S, D) or (B, S, H, D).
inline Tensor logical(const std::vector<double>& vals, std::int64_t B, std::int64_t H,
                      std::int64_t S, std::int64_t D, DType t, bool tokens_major) {
  if (!tokens_major) return Tensor::from_doubles(vals, {B, H, S, D}, t, device());
  std::vector<double> bshd(vals.size());
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < H; ++h)
      for (std::int64_t s = 0; s < S; ++s)
        for (std::int64_t d = 0; d < D; ++d)
          bshd[static_cast<std::size_t>(((b * S + s) * H + h) * D + d)] =
              vals[static_cast<std::size_t>(((b * H + h) * S + s) * D + d)];
  return Tensor::from_doubles(bshd, {B, S, H, D}, t, device()).transpose(1, 2);
}

// float64 attention of one sequence: q (H, Sq, D), k and v (Hk, Sk, D)
// given by accessors; writes o(h, i, d) and lse(h, i).
struct Seq {
  std::int64_t H, Hk, Sq, Sk, D;
};
template <class Q, class K, class V, class O, class L>
void reference(const Seq& s, bool causal, bool bottom_right, double scale, Q q, K k, V v, O o,
               L lse) {
  const std::int64_t diag = bottom_right ? s.Sk - s.Sq : 0;
  std::vector<double> p(static_cast<std::size_t>(s.Sk));
  for (std::int64_t h = 0; h < s.H; ++h)
    for (std::int64_t i = 0; i < s.Sq; ++i) {
      const std::int64_t hk = h / (s.H / s.Hk);
      const std::int64_t keys = causal ? std::clamp<std::int64_t>(i + diag + 1, 0, s.Sk) : s.Sk;
      double mx = -INFINITY, sum = 0;
      for (std::int64_t j = 0; j < keys; ++j) {
        double dot = 0;
        for (std::int64_t d = 0; d < s.D; ++d) dot += q(h, i, d) * k(hk, j, d);
        p[static_cast<std::size_t>(j)] = dot * scale;
        mx = std::max(mx, dot * scale);
      }
      for (std::int64_t j = 0; j < keys; ++j)
        sum += (p[static_cast<std::size_t>(j)] = std::exp(p[static_cast<std::size_t>(j)] - mx));
      lse(h, i) = keys > 0 ? mx + std::log(sum) : -INFINITY;
      for (std::int64_t d = 0; d < s.D; ++d) {
        double acc = 0;
        for (std::int64_t j = 0; j < keys; ++j) acc += p[static_cast<std::size_t>(j)] * v(hk, j, d);
        o(h, i, d) = keys > 0 ? acc / sum : 0.0;
      }
    }
}

struct Fixed {
  std::int64_t B, H, Hk, Sq, Sk, D;
  bool causal = false, bottom_right = false;
  DType t = bf16;
  bool q_tokens_major = false, kv_tokens_major = false;
};

// Runs ops::attention on a fixed-length batch; returns the errors over the bound.
inline tx::test::AttentionError run_fixed(const Fixed& f, std::string* plan = nullptr) {
  const std::int64_t nq = f.B * f.H * f.Sq * f.D, nk = f.B * f.Hk * f.Sk * f.D;
  auto q = random_values(static_cast<std::size_t>(nq), f.t, -2, 2);
  auto k = random_values(static_cast<std::size_t>(nk), f.t, -2, 2);
  auto v = random_values(static_cast<std::size_t>(nk), f.t, -1, 1);
  Tensor Q = logical(q, f.B, f.H, f.Sq, f.D, f.t, f.q_tokens_major);
  Tensor K = logical(k, f.B, f.Hk, f.Sk, f.D, f.t, f.kv_tokens_major);
  Tensor V = logical(v, f.B, f.Hk, f.Sk, f.D, f.t, f.kv_tokens_major);
  ops::AttentionOptions opt{.causal = f.causal, .bottom_right = f.bottom_right};
  if (plan) *plan = ops::attention_plan(Q, K, V, opt);
  auto [O, L] = ops::attention(Q, K, V, opt);
  tx::test::AttentionRef want{std::vector<double>(static_cast<std::size_t>(nq)),
                              std::vector<double>(static_cast<std::size_t>(f.B * f.H * f.Sq))};
  const double scale = 1.0 / std::sqrt(static_cast<double>(f.D));
  for (std::int64_t b = 0; b < f.B; ++b) {
    auto at = [&](const std::vector<double>& x, std::int64_t heads, std::int64_t S) {
      return [&x, b, heads, S, D = f.D](std::int64_t h, std::int64_t i, std::int64_t d) {
        return x[static_cast<std::size_t>(((b * heads + h) * S + i) * D + d)];
      };
    };
    reference(
        {f.H, f.Hk, f.Sq, f.Sk, f.D}, f.causal, f.bottom_right, scale, at(q, f.H, f.Sq),
        at(k, f.Hk, f.Sk), at(v, f.Hk, f.Sk),
        [&](std::int64_t h, std::int64_t i, std::int64_t d) -> double& {
          return want.out[static_cast<std::size_t>(((b * f.H + h) * f.Sq + i) * f.D + d)];
        },
        [&](std::int64_t h, std::int64_t i) -> double& {
          return want.lse[static_cast<std::size_t>((b * f.H + h) * f.Sq + i)];
        });
  }
  CHECK(O.shape() == std::vector<std::int64_t>{f.B, f.H, f.Sq, f.D});
  CHECK(L.shape() == std::vector<std::int64_t>{f.B, f.H, f.Sq});
  return tx::test::attention_error(want, O.to_doubles(), L.to_doubles(), f.t, 1.0);
}

// One fixed-length case against float64, the shape and the op's plan in the
// report; plan_check adds checks of the plan.
inline void check_fixed(const Fixed& f,
                        const std::function<void(const std::string&)>& plan_check = {}) {
  CAPTURE(f.D);
  CAPTURE(f.Sq);
  CAPTURE(f.Sk);
  CAPTURE(f.causal);
  CAPTURE(f.q_tokens_major);
  CAPTURE(f.kv_tokens_major);
  std::string plan;
  auto e = run_fixed(f, &plan);
  CAPTURE(plan);
  if (plan_check) plan_check(plan);
  CHECK(e.out <= 1.0);
  CHECK(e.lse <= 1.0);
}

TEST_CASE("ops::attention against float64: layouts, GQA, causal both ways, partial tiles") {
  const Fixed cases[] = {
      {.B = 2, .H = 2, .Hk = 2, .Sq = 150, .Sk = 150, .D = 64},
      {.B = 1,
       .H = 4,
       .Hk = 2,
       .Sq = 130,
       .Sk = 200,
       .D = 64,
       .causal = true,
       .q_tokens_major = true,
       .kv_tokens_major = true},
      {.B = 2,
       .H = 2,
       .Hk = 1,
       .Sq = 200,
       .Sk = 77,
       .D = 64,
       .causal = true,
       .bottom_right = true,
       .kv_tokens_major = true},
      {.B = 1, .H = 3, .Hk = 1, .Sq = 1, .Sk = 333, .D = 64, .q_tokens_major = true},
      {.B = 1, .H = 1, .Hk = 1, .Sq = 129, .Sk = 129, .D = 128, .causal = true, .t = f16},
      {.B = 1, .H = 2, .Hk = 2, .Sq = 70, .Sk = 90, .D = 256, .q_tokens_major = true},
      // Causal row blocks go in mirrored pairs: several pairs per CTA on the
      // host's few CTAs, and an odd number of row blocks (a pair of one).
      {.B = 1, .H = 3, .Hk = 1, .Sq = 400, .Sk = 400, .D = 64, .causal = true},
      {.B = 2,
       .H = 3,
       .Hk = 3,
       .Sq = 300,
       .Sk = 330,
       .D = 64,
       .causal = true,
       .bottom_right = true},
  };
  for (const Fixed& f : cases) check_fixed(f);
}

TEST_CASE("ops::attention at head_dim 64 with three consumer warpgroups (192-row blocks)") {
  // Long dense calls take this form (the rule below); forced here so that
  // small shapes run it: partial row and key blocks, fewer rows than one
  // block, causal both ways (key blocks of 112), GQA, both layouts.
  struct Force {
    Force() { ops::detail::force_attention_consumers(3); }
    ~Force() { ops::detail::force_attention_consumers(0); }
  } force;
  const Fixed cases[] = {
      {.B = 2, .H = 2, .Hk = 1, .Sq = 400, .Sk = 300, .D = 64},
      {.B = 1, .H = 2, .Hk = 2, .Sq = 100, .Sk = 250, .D = 64, .q_tokens_major = true},
      {.B = 1, .H = 3, .Hk = 1, .Sq = 500, .Sk = 500, .D = 64, .causal = true},
      {.B = 2,
       .H = 2,
       .Hk = 2,
       .Sq = 200,
       .Sk = 260,
       .D = 64,
       .causal = true,
       .bottom_right = true,
       .t = f16,
       .kv_tokens_major = true},
  };
  for (const Fixed& f : cases)
    check_fixed(f, [&](const std::string& plan) {
      CHECK(plan.find("3 consumer warpgroups (192 query rows a tile)") != std::string::npos);
      CHECK(plan.find(f.causal ? "key blocks of 112" : "key blocks of 128") != std::string::npos);
    });
}

TEST_CASE("ops::attention: three consumers at head_dim 64 from 2k keys, 8k when causal") {
  // The plan only (nothing runs).
  auto plan = [](std::int64_t S, std::int64_t D, bool causal) {
    Tensor q = Tensor::empty({1, 1, S, D}, bf16, device());
    return ops::attention_plan(q, q, q, {.causal = causal});
  };
  auto three = [](const std::string& p) {
    return p.find("3 consumer warpgroups") != std::string::npos;
  };
  CHECK(three(plan(2048, 64, false)));
  CHECK_FALSE(three(plan(1024, 64, false)));
  CHECK_FALSE(three(plan(4096, 64, true)));
  CHECK(three(plan(8192, 64, true)));
  CHECK(plan(8192, 64, true).find("key blocks of 112") != std::string::npos);
  CHECK_FALSE(three(plan(16384, 128, false)));
  CHECK(plan(16384, 128, false).find("2 consumer warpgroups (128 query rows a tile)") !=
        std::string::npos);
  CHECK_THROWS_WITH_AS(ops::detail::force_attention_consumers(4), doctest::Contains("consumers"),
                       Error);
}

TEST_CASE("ops::attention: one kernel serves every batch and sequence length") {
  // Two shapes of one configuration: the second call compiles nothing.
  CHECK(run_fixed({.B = 1, .H = 2, .Hk = 2, .Sq = 64, .Sk = 100, .D = 64}).out <= 1.0);
  const auto before = ops::detail::attention_kernels_built();
  CHECK(run_fixed({.B = 3, .H = 2, .Hk = 2, .Sq = 200, .Sk = 31, .D = 64}).out <= 1.0);
  CHECK(ops::detail::attention_kernels_built() == before);
}

TEST_CASE("ops::attention copies other strided views first, and says so") {
  // (S, B, H, D) storage seen as (B, H, S, D).
  const std::int64_t B = 2, H = 2, S = 70, D = 64;
  auto q = random_values(static_cast<std::size_t>(B * H * S * D), bf16, -2, 2);
  Tensor Qs = Tensor::from_doubles(q, {S, B, H, D}, bf16, device()).permute({1, 2, 0, 3});
  Tensor K = Tensor::from_doubles(random_values(static_cast<std::size_t>(B * H * S * D), bf16),
                                  {B, H, S, D}, bf16, device());
  const std::string plan = ops::attention_plan(Qs, K, K);
  CHECK(plan.find("q copied to (batch, seq, heads, dim)") != std::string::npos);
  auto [O, L] = ops::attention(Qs, K, K);
  auto [O2, L2] = ops::attention(Qs.contiguous(), K, K);
  CHECK(O.to_doubles() == O2.to_doubles());
}

TEST_CASE("ops::attention on variable-length batches (cu_seqlens), causal and not") {
  for (bool causal : {false, true}) {
    CAPTURE(causal);
    const std::vector<std::int32_t> lq = {5, 130, 1, 70}, lk = {40, 130, 200, 0};
    const std::int64_t H = 4, Hk = 2, D = 64, nb = 4;
    std::vector<std::int32_t> cq = {0}, ck = {0};
    for (std::int64_t b = 0; b < nb; ++b) {
      cq.push_back(cq.back() + lq[static_cast<std::size_t>(b)]);
      ck.push_back(ck.back() + lk[static_cast<std::size_t>(b)]);
    }
    const std::int64_t tq = cq.back(), tk = ck.back();
    auto q = random_values(static_cast<std::size_t>(tq * H * D), bf16, -2, 2);
    auto k = random_values(static_cast<std::size_t>(tk * Hk * D), bf16, -2, 2);
    auto v = random_values(static_cast<std::size_t>(tk * Hk * D), bf16, -1, 1);
    Tensor Q = Tensor::from_doubles(q, {tq, H, D}, bf16, device());
    Tensor K = Tensor::from_doubles(k, {tk, Hk, D}, bf16, device());
    Tensor V = Tensor::from_doubles(v, {tk, Hk, D}, bf16, device());
    Tensor CQ = Tensor::from_vector(cq, {nb + 1}, device());
    Tensor CK = Tensor::from_vector(ck, {nb + 1}, device());
    ops::AttentionOptions opt{.causal = causal,
                              .bottom_right = causal,
                              .cu_seqlens_q = &CQ,
                              .cu_seqlens_k = &CK,
                              .max_seqlen_q = 130,
                              .max_seqlen_k = 200};
    auto [O, L] = ops::attention(Q, K, V, opt);
    CHECK(O.shape() == std::vector<std::int64_t>{tq, H, D});
    CHECK(L.shape() == std::vector<std::int64_t>{H, tq});
    tx::test::AttentionRef want{std::vector<double>(q.size()),
                                std::vector<double>(static_cast<std::size_t>(H * tq))};
    for (std::int64_t b = 0; b < nb; ++b) {
      const std::int64_t q0 = cq[static_cast<std::size_t>(b)], k0 = ck[static_cast<std::size_t>(b)];
      auto tok = [&](const std::vector<double>& x, std::int64_t start, std::int64_t heads) {
        return [&x, start, heads, D](std::int64_t h, std::int64_t i, std::int64_t d) {
          return x[static_cast<std::size_t>(((start + i) * heads + h) * D + d)];
        };
      };
      reference(
          {H, Hk, lq[static_cast<std::size_t>(b)], lk[static_cast<std::size_t>(b)], D}, causal,
          true, 1.0 / std::sqrt(static_cast<double>(D)), tok(q, q0, H), tok(k, k0, Hk),
          tok(v, k0, Hk),
          [&](std::int64_t h, std::int64_t i, std::int64_t d) -> double& {
            return want.out[static_cast<std::size_t>(((q0 + i) * H + h) * D + d)];
          },
          [&](std::int64_t h, std::int64_t i) -> double& {
            return want.lse[static_cast<std::size_t>(h * tq + q0 + i)];
          });
    }
    auto e = tx::test::attention_error(want, O.to_doubles(), L.to_doubles(), bf16, 1.0);
    CHECK(e.out <= 1.0);
    CHECK(e.lse <= 1.0);
  }
}

TEST_CASE("ops::attention over a paged KV cache (block_table, seqused_k): chunked prefill") {
  for (bool causal : {false, true}) {
    for (std::int64_t P : {16, 64}) {
      CAPTURE(causal);
      CAPTURE(P);
      // Queries are the last lq of each sequence's lk keys (a chunk of a
      // prefill, its keys already in the cache); sequence 3 has none.
      const std::vector<std::int32_t> lq = {5, 130, 1, 3}, lk = {40, 200, 17, 0};
      const std::int64_t H = 4, Hk = 2, D = 64, nb = 4;
      std::vector<std::int32_t> cq = {0};
      for (std::int64_t b = 0; b < nb; ++b)
        cq.push_back(cq.back() + lq[static_cast<std::size_t>(b)]);
      const std::int64_t tq = cq.back(), max_pages = (200 + P - 1) / P, pages = nb * max_pages + 1;
      // Pages scattered in random order; every row no sequence uses is NaN.
      std::vector<std::int32_t> ids(static_cast<std::size_t>(pages));
      for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int32_t>(i);
      std::shuffle(ids.begin(), ids.end(), tx::test::rng());
      auto q = random_values(static_cast<std::size_t>(tq * H * D), bf16, -2, 2);
      auto kc = random_values(static_cast<std::size_t>(pages * P * Hk * D), bf16, -2, 2);
      auto vc = random_values(static_cast<std::size_t>(pages * P * Hk * D), bf16, -1, 1);
      std::vector<char> used(static_cast<std::size_t>(pages * P), 0);
      for (std::int64_t b = 0; b < nb; ++b)
        for (std::int64_t j = 0; j < lk[static_cast<std::size_t>(b)]; ++j)
          used[static_cast<std::size_t>(ids[static_cast<std::size_t>(b * max_pages + j / P)] * P +
                                        j % P)] = 1;
      for (std::size_t r = 0; r < used.size(); ++r)
        if (!used[r])
          for (std::size_t e = 0; e < static_cast<std::size_t>(Hk * D); ++e)
            kc[r * static_cast<std::size_t>(Hk * D) + e] =
                vc[r * static_cast<std::size_t>(Hk * D) + e] =
                    std::numeric_limits<double>::quiet_NaN();
      Tensor Q = Tensor::from_doubles(q, {tq, H, D}, bf16, device());
      Tensor KC = Tensor::from_doubles(kc, {pages, P, Hk, D}, bf16, device());
      Tensor VC = Tensor::from_doubles(vc, {pages, P, Hk, D}, bf16, device());
      Tensor CQ = Tensor::from_vector(cq, {nb + 1}, device());
      Tensor BT =
          Tensor::from_vector(std::vector<std::int32_t>(ids.begin(), ids.begin() + nb * max_pages),
                              {nb, max_pages}, device());
      Tensor SK = Tensor::from_vector(lk, {nb}, device());
      ops::AttentionOptions opt{.causal = causal,
                                .bottom_right = causal,
                                .cu_seqlens_q = &CQ,
                                .max_seqlen_q = 130,
                                .block_table = &BT,
                                .seqused_k = &SK};
      CHECK(
          ops::attention_plan(Q, KC, VC, opt).find("paged cache (pages of " + std::to_string(P)) !=
          std::string::npos);
      auto [O, L] = ops::attention(Q, KC, VC, opt);
      CHECK(O.shape() == std::vector<std::int64_t>{tq, H, D});
      CHECK(L.shape() == std::vector<std::int64_t>{H, tq});
      tx::test::AttentionRef want{std::vector<double>(q.size()),
                                  std::vector<double>(static_cast<std::size_t>(H * tq))};
      for (std::int64_t b = 0; b < nb; ++b) {
        const std::int64_t q0 = cq[static_cast<std::size_t>(b)];
        auto cache = [&](const std::vector<double>& x) {
          return
              [&x, b, max_pages, P, Hk, D, &ids](std::int64_t h, std::int64_t j, std::int64_t d) {
                const std::int64_t id = ids[static_cast<std::size_t>(b * max_pages + j / P)];
                return x[static_cast<std::size_t>(((id * P + j % P) * Hk + h) * D + d)];
              };
        };
        reference(
            {H, Hk, lq[static_cast<std::size_t>(b)], lk[static_cast<std::size_t>(b)], D}, causal,
            true, 1.0 / std::sqrt(static_cast<double>(D)),
            [&](std::int64_t h, std::int64_t i, std::int64_t d) {
              return q[static_cast<std::size_t>(((q0 + i) * H + h) * D + d)];
            },
            cache(kc), cache(vc),
            [&](std::int64_t h, std::int64_t i, std::int64_t d) -> double& {
              return want.out[static_cast<std::size_t>(((q0 + i) * H + h) * D + d)];
            },
            [&](std::int64_t h, std::int64_t i) -> double& {
              return want.lse[static_cast<std::size_t>(h * tq + q0 + i)];
            });
      }
      auto e = tx::test::attention_error(want, O.to_doubles(), L.to_doubles(), bf16, 1.0);
      CHECK(e.out <= 1.0);
      CHECK(e.lse <= 1.0);
    }
  }
  // What a paged cache needs, as errors.
  Tensor Q = Tensor::from_doubles(random_values(4 * 2 * 64, bf16), {4, 2, 64}, bf16, device());
  Tensor KC = Tensor::empty({3, 16, 1, 64}, bf16, device());
  Tensor CQ = Tensor::from_vector(std::vector<std::int32_t>{0, 4}, {2}, device());
  Tensor BT = Tensor::from_vector(std::vector<std::int32_t>{0, 1}, {1, 2}, device());
  ops::AttentionOptions no_lengths{.cu_seqlens_q = &CQ, .max_seqlen_q = 4, .block_table = &BT};
  CHECK_THROWS_WITH_AS(ops::attention(Q, KC, KC, no_lengths), doctest::Contains("seqused_k"),
                       tx::Error);
  Tensor K24 = Tensor::empty({3, 24, 1, 64}, bf16, device());
  Tensor SK = Tensor::from_vector(std::vector<std::int32_t>{20}, {1}, device());
  ops::AttentionOptions ok{
      .cu_seqlens_q = &CQ, .max_seqlen_q = 4, .block_table = &BT, .seqused_k = &SK};
  CHECK_THROWS_WITH_AS(ops::attention(Q, K24, K24, ok), doctest::Contains("page_size 24"),
                       tx::Error);
}

TEST_CASE("ops::attention: empty sequences and NaN inputs give PyTorch's results") {
  const std::int64_t D = 64;
  // No keys: O = 0 (softmax over nothing times nothing), lse = -inf.
  Tensor Q = Tensor::from_doubles(random_values(2 * 5 * D, bf16), {1, 2, 5, D}, bf16, device());
  Tensor K0 = Tensor::empty({1, 2, 0, D}, bf16, device());
  auto [O, L] = ops::attention(Q, K0, K0);
  for (double x : O.to_doubles()) CHECK(x == 0.0);
  for (double x : L.to_doubles()) CHECK((std::isinf(x) && x < 0));
  // No queries: empty results.
  Tensor Q0 = Tensor::empty({1, 2, 0, D}, bf16, device());
  Tensor K = Tensor::from_doubles(random_values(2 * 9 * D, bf16), {1, 2, 9, D}, bf16, device());
  CHECK(ops::attention(Q0, K, K).out.numel() == 0);
  // A NaN in query row 3 of head 1: that row is NaN, every other row finite.
  auto q = random_values(2 * 9 * D, bf16);
  q[static_cast<std::size_t>((9 + 3) * D + 7)] = std::numeric_limits<double>::quiet_NaN();
  Tensor Qn = Tensor::from_doubles(q, {1, 2, 9, D}, bf16, device());
  auto on = ops::attention(Qn, K, K).out.to_doubles();
  for (std::int64_t h = 0; h < 2; ++h)
    for (std::int64_t i = 0; i < 9; ++i) {
      const double x = on[static_cast<std::size_t>((h * 9 + i) * D)];
      CHECK(std::isnan(x) == (h == 1 && i == 3));
    }
}

TEST_CASE("ops::attention errors name the operand and the reason") {
  const std::int64_t D = 64;
  auto t = [&](std::vector<std::int64_t> s, DType dt = bf16) {
    std::int64_t n = 1;
    for (auto e : s) n *= e;
    return Tensor::from_doubles(random_values(static_cast<std::size_t>(n), dt), s, dt, device());
  };
  Tensor q = t({1, 4, 8, D}), k = t({1, 2, 8, D});
  auto err = [&](const std::function<void()>& f, const char* what) {
    CAPTURE(what);
    CHECK_THROWS_WITH_AS(f(), doctest::Contains(what), Error);
  };
  err([&] { ops::attention(t({4, 8, D}), k, k); }, "rank 3");
  err([&] { ops::attention(q, t({1, 2, 8, D}, f16), k); }, "dtype float16 differs from q's");
  err(
      [&] {
        ops::attention(t({1, 4, 8, 96}), t({1, 2, 8, 96}), t({1, 2, 8, 96}));
      },
      "head_dim 96: the kernel takes 64, 128 or 256");
  err([&] { ops::attention(q, t({1, 3, 8, D}), t({1, 3, 8, D})); }, "3 K/V heads do not divide");
  err([&] { ops::attention(q, t({2, 2, 8, D}), t({2, 2, 8, D})); }, "batch 2 differs");
  err([&] { ops::attention(t({1, 4, 8, D}, f32), k, k); }, "attention takes bfloat16 or float16");
  err([&] { ops::attention(q, k, k, {.bottom_right = true}); }, "applies to causal masking");
  Tensor cu = Tensor::from_vector(std::vector<std::int32_t>{0, 8}, {2}, device());
  Tensor cu64 = Tensor::from_vector(std::vector<std::int64_t>{0, 8}, {2}, device());
  Tensor qv = t({8, 4, D}), kv = t({8, 2, D});
  err([&] { ops::attention(qv, kv, kv, {.cu_seqlens_q = &cu}); },
      "take both cu_seqlens_q and cu_seqlens_k");
  err(
      [&] {
        ops::attention(
            qv, kv, kv,
            {.cu_seqlens_q = &cu64, .cu_seqlens_k = &cu64, .max_seqlen_q = 8, .max_seqlen_k = 8});
      },
      "an int32 (batch + 1) tensor");
  err([&] { ops::attention(qv, kv, kv, {.cu_seqlens_q = &cu, .cu_seqlens_k = &cu}); },
      "need max_seqlen_q and max_seqlen_k");
}

}  // namespace attncase
