// tx::ops::attention_backward on the device TX_ATTN_DEVICE (host_attention:
// the host JIT; gpu_attention_op: an sm_90 GPU), after tx's own forward:
// dq, dk, dv against float64 gradients on fresh random inputs -- both
// layouts, GQA (dk, dv summed over a group), causal both ways, Sq != Sk,
// partial tiles, head dims 64 and 128, f16, variable lengths with empty
// sequences; the same bits on every run; the errors. (attention_op_cases.hpp:
// the helpers logical, Fixed, Seq, device.)
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "attention_op_cases.hpp"

namespace attncase {

// float64 gradients of one sequence (accessors as reference()'s): with
// P = softmax(Q K^T scale, masked), O = P V, D_i = dO_i . O_i:
// dV = P^T dO, dS = P * (dO V^T - D), dQ = scale dS K, dK = scale dS^T Q.
template <class Q, class K, class V, class G, class DQ, class DK, class DV>
void backward_reference(const Seq& s, bool causal, bool bottom_right, double scale, Q q, K k, V v,
                        G dout, DQ dq, DK dk, DV dv) {
  const std::int64_t diag = bottom_right ? s.Sk - s.Sq : 0;
  std::vector<double> p(static_cast<std::size_t>(s.Sk)), dp(p.size()),
      o(static_cast<std::size_t>(s.D));
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
      for (std::int64_t j = 0; j < keys; ++j) p[static_cast<std::size_t>(j)] /= sum;
      double Di = 0;
      for (std::int64_t d = 0; d < s.D; ++d) {
        double acc = 0;
        for (std::int64_t j = 0; j < keys; ++j) acc += p[static_cast<std::size_t>(j)] * v(hk, j, d);
        Di += acc * dout(h, i, d);
      }
      for (std::int64_t d = 0; d < s.D; ++d) dq(h, i, d) = 0;
      for (std::int64_t j = 0; j < keys; ++j) {
        const double pj = p[static_cast<std::size_t>(j)];
        double dpj = 0;
        for (std::int64_t d = 0; d < s.D; ++d) dpj += dout(h, i, d) * v(hk, j, d);
        const double ds = pj * (dpj - Di);
        for (std::int64_t d = 0; d < s.D; ++d) {
          dv(hk, j, d) += pj * dout(h, i, d);
          dk(hk, j, d) += scale * ds * q(h, i, d);
          dq(h, i, d) += scale * ds * k(hk, j, d);
        }
      }
    }
}

// The worst error of `got` against `want` over the bound, <= 1 passing:
// |got - want| <= 2^-6 (bf16; 2^-8 f16) of the largest |want| of the tensor
// plus as much of the element's own magnitude. P and dS enter the matrix
// products rounded to the input dtype (2^-9 / 2^-12 relative), O and the
// inputs were rounded before; a wrong element or a missed block is off by
// the gradient's own size.
inline double grad_error(const std::vector<double>& want, const std::vector<double>& got, DType t) {
  REQUIRE(want.size() == got.size());
  double top = 0, e = 0;
  for (double w : want) top = std::max(top, std::fabs(w));
  const double u = t == f16 ? 0x1p-8 : 0x1p-6;
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    e = std::max(e, std::fabs(got[i] - want[i]) / (u * (top + std::fabs(want[i])) + 1e-30));
  }
  return e;
}

struct BackwardCase {
  Fixed f;
  double scale = 0;  // 0: 1 / sqrt(head_dim)
  ops::DqSum dq_sum = ops::DqSum::deterministic;
};

// Runs tx's forward then backward on a fixed-length batch; the errors of
// dq, dk, dv (each over the bound).
inline std::array<double, 3> run_backward(const BackwardCase& bc, std::string* plan = nullptr) {
  const Fixed& f = bc.f;
  const std::int64_t nq = f.B * f.H * f.Sq * f.D, nk = f.B * f.Hk * f.Sk * f.D;
  auto q = random_values(static_cast<std::size_t>(nq), f.t, -2, 2);
  auto k = random_values(static_cast<std::size_t>(nk), f.t, -2, 2);
  auto v = random_values(static_cast<std::size_t>(nk), f.t, -1, 1);
  auto g = random_values(static_cast<std::size_t>(nq), f.t, -1, 1);
  Tensor Q = logical(q, f.B, f.H, f.Sq, f.D, f.t, f.q_tokens_major);
  Tensor K = logical(k, f.B, f.Hk, f.Sk, f.D, f.t, f.kv_tokens_major);
  Tensor V = logical(v, f.B, f.Hk, f.Sk, f.D, f.t, f.kv_tokens_major);
  Tensor G = logical(g, f.B, f.H, f.Sq, f.D, f.t, f.q_tokens_major);
  ops::AttentionOptions opt{
      .causal = f.causal, .bottom_right = f.bottom_right, .scale = bc.scale, .dq_sum = bc.dq_sum};
  auto [O, L] = ops::attention(Q, K, V, opt);
  if (plan) *plan = ops::attention_backward_plan(G, Q, K, V, O, L, opt);
  auto [dQ, dK, dV] = ops::attention_backward(G, Q, K, V, O, L, opt);
  CHECK(dQ.shape() == Q.shape());
  CHECK(dK.shape() == K.shape());
  CHECK(dV.shape() == V.shape());
  std::vector<double> wq(q.size()), wk(k.size()), wv(v.size());
  const double scale = bc.scale > 0 ? bc.scale : 1.0 / std::sqrt(static_cast<double>(f.D));
  for (std::int64_t b = 0; b < f.B; ++b) {
    auto idx = [&](std::int64_t heads, std::int64_t S, std::int64_t h, std::int64_t i,
                   std::int64_t d) {
      return static_cast<std::size_t>(((b * heads + h) * S + i) * f.D + d);
    };
    auto in = [&](const std::vector<double>& x, std::int64_t heads, std::int64_t S) {
      return [&x, &idx, heads, S](std::int64_t h, std::int64_t i, std::int64_t d) {
        return x[idx(heads, S, h, i, d)];
      };
    };
    auto out = [&](std::vector<double>& x, std::int64_t heads, std::int64_t S) {
      return [&x, &idx, heads, S](std::int64_t h, std::int64_t i, std::int64_t d) -> double& {
        return x[idx(heads, S, h, i, d)];
      };
    };
    backward_reference({f.H, f.Hk, f.Sq, f.Sk, f.D}, f.causal, f.bottom_right, scale,
                       in(q, f.H, f.Sq), in(k, f.Hk, f.Sk), in(v, f.Hk, f.Sk), in(g, f.H, f.Sq),
                       out(wq, f.H, f.Sq), out(wk, f.Hk, f.Sk), out(wv, f.Hk, f.Sk));
  }
  return {grad_error(wq, dQ.to_doubles(), f.t), grad_error(wk, dK.to_doubles(), f.t),
          grad_error(wv, dV.to_doubles(), f.t)};
}

TEST_CASE(
    "ops::attention_backward against float64: layouts, GQA, causal both ways, partial tiles") {
  const BackwardCase cases[] = {
      {{.B = 2, .H = 2, .Hk = 2, .Sq = 150, .Sk = 150, .D = 64}},
      {{.B = 1,
        .H = 4,
        .Hk = 2,
        .Sq = 130,
        .Sk = 200,
        .D = 64,
        .causal = true,
        .q_tokens_major = true,
        .kv_tokens_major = true}},
      {{.B = 2,
        .H = 2,
        .Hk = 1,
        .Sq = 200,
        .Sk = 77,
        .D = 64,
        .causal = true,
        .bottom_right = true,
        .q_tokens_major = true}},
      {{.B = 1, .H = 2, .Hk = 1, .Sq = 100, .Sk = 260, .D = 128, .kv_tokens_major = true}},
      {{.B = 1, .H = 1, .Hk = 1, .Sq = 190, .Sk = 190, .D = 128, .causal = true, .t = f16}, 0.3},
      // Causal blocks go in mirrored pairs (query blocks in the dq kernel, key
      // blocks in the dk/dv kernel): an odd count (a pair of one), several
      // pairs per CTA on the host's few CTAs.
      {{.B = 1, .H = 4, .Hk = 2, .Sq = 300, .Sk = 300, .D = 64, .causal = true}},
  };
  for (BackwardCase bc : cases)
    for (bool dq_atomics : {false, true}) {
      bc.dq_sum = dq_atomics ? ops::DqSum::atomics : ops::DqSum::deterministic;
      const Fixed& f = bc.f;
      CAPTURE(dq_atomics);
      CAPTURE(f.B);
      CAPTURE(f.H);
      CAPTURE(f.Hk);
      CAPTURE(f.Sq);
      CAPTURE(f.Sk);
      CAPTURE(f.D);
      CAPTURE(f.causal);
      CAPTURE(f.bottom_right);
      std::string plan;
      auto e = run_backward(bc, &plan);
      CAPTURE(plan);
      MESSAGE("dq ", e[0], " dk ", e[1], " dv ", e[2]);
      CHECK(e[0] <= 1.0);
      CHECK(e[1] <= 1.0);
      CHECK(e[2] <= 1.0);
    }
}

TEST_CASE("ops::attention_backward on variable-length batches, with empty sequences") {
  for (bool causal : {false, true})
    for (bool dq_atomics : {false, true}) {
      CAPTURE(causal);
      CAPTURE(dq_atomics);
      const std::vector<std::int32_t> lq = {5, 130, 0, 70}, lk = {40, 130, 90, 0};
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
      auto g = random_values(static_cast<std::size_t>(tq * H * D), bf16, -1, 1);
      Tensor Q = Tensor::from_doubles(q, {tq, H, D}, bf16, device());
      Tensor K = Tensor::from_doubles(k, {tk, Hk, D}, bf16, device());
      Tensor V = Tensor::from_doubles(v, {tk, Hk, D}, bf16, device());
      Tensor G = Tensor::from_doubles(g, {tq, H, D}, bf16, device());
      Tensor CQ = Tensor::from_vector(cq, {nb + 1}, device());
      Tensor CK = Tensor::from_vector(ck, {nb + 1}, device());
      ops::AttentionOptions opt{
          .causal = causal,
          .bottom_right = causal,
          .cu_seqlens_q = &CQ,
          .cu_seqlens_k = &CK,
          .max_seqlen_q = 130,
          .max_seqlen_k = 130,
          .dq_sum = dq_atomics ? ops::DqSum::atomics : ops::DqSum::deterministic};
      auto [O, L] = ops::attention(Q, K, V, opt);
      auto [dQ, dK, dV] = ops::attention_backward(G, Q, K, V, O, L, opt);
      std::vector<double> wq(q.size()), wk(k.size()), wv(v.size());
      for (std::int64_t b = 0; b < nb; ++b) {
        const std::int64_t q0 = cq[static_cast<std::size_t>(b)],
                           k0 = ck[static_cast<std::size_t>(b)];
        auto at = [&](std::int64_t start, std::int64_t heads, std::int64_t h, std::int64_t i,
                      std::int64_t d) {
          return static_cast<std::size_t>(((start + i) * heads + h) * D + d);
        };
        auto in = [&](const std::vector<double>& x, std::int64_t start, std::int64_t heads) {
          return [&x, &at, start, heads](std::int64_t h, std::int64_t i, std::int64_t d) {
            return x[at(start, heads, h, i, d)];
          };
        };
        auto out = [&](std::vector<double>& x, std::int64_t start, std::int64_t heads) {
          return
              [&x, &at, start, heads](std::int64_t h, std::int64_t i, std::int64_t d) -> double& {
                return x[at(start, heads, h, i, d)];
              };
        };
        backward_reference(
            {H, Hk, lq[static_cast<std::size_t>(b)], lk[static_cast<std::size_t>(b)], D}, causal,
            true, 1.0 / std::sqrt(static_cast<double>(D)), in(q, q0, H), in(k, k0, Hk),
            in(v, k0, Hk), in(g, q0, H), out(wq, q0, H), out(wk, k0, Hk), out(wv, k0, Hk));
      }
      const double eq = grad_error(wq, dQ.to_doubles(), bf16),
                   ek = grad_error(wk, dK.to_doubles(), bf16),
                   ev = grad_error(wv, dV.to_doubles(), bf16);
      MESSAGE("dq ", eq, " dk ", ek, " dv ", ev);
      CHECK(eq <= 1.0);
      CHECK(ek <= 1.0);
      CHECK(ev <= 1.0);
    }
}

TEST_CASE("ops::attention_backward gives the same bits on every run (DqSum::deterministic)") {
  const std::int64_t B = 1, H = 4, Hk = 1, S = 200, D = 64;
  auto mk = [&](std::int64_t heads, double lo, double hi) {
    return logical(random_values(static_cast<std::size_t>(B * heads * S * D), bf16, lo, hi), B,
                   heads, S, D, bf16, true);
  };
  Tensor Q = mk(H, -2, 2), K = mk(Hk, -2, 2), V = mk(Hk, -1, 1), G = mk(H, -1, 1);
  ops::AttentionOptions opt{.causal = true, .dq_sum = ops::DqSum::deterministic};
  auto [O, L] = ops::attention(Q, K, V, opt);
  auto bits = [](const Tensor& x) { return x.contiguous().to_doubles(); };
  auto first = ops::attention_backward(G, Q, K, V, O, L, opt);
  for (int run = 0; run < 3; ++run) {
    auto again = ops::attention_backward(G, Q, K, V, O, L, opt);
    CHECK(bits(again.dq) == bits(first.dq));
    CHECK(bits(again.dk) == bits(first.dk));
    CHECK(bits(again.dv) == bits(first.dv));
  }
}

TEST_CASE(
    "ops::attention_backward: DqSum::automatic takes TMA reductions at head_dim 128 from 1k keys") {
  // The plan only (nothing runs): which dQ form each shape gets.
  auto plan = [](std::int64_t S, std::int64_t D, bool causal, ops::DqSum sum) {
    Tensor q = Tensor::empty({1, 1, S, D}, bf16, device());
    Tensor lse = Tensor::empty({1, 1, S}, f32, device());
    const ops::AttentionOptions opt{.causal = causal, .dq_sum = sum};
    return ops::attention_backward_plan(q, q, q, q, q, lse, opt);
  };
  auto fused = [](const std::string& p) { return p.find("TMA reductions") != std::string::npos; };
  using ops::DqSum;
  CHECK(fused(plan(4096, 128, false, DqSum::automatic)));
  CHECK(fused(plan(8192, 128, true, DqSum::automatic)));
  CHECK(fused(plan(4096, 128, true, DqSum::automatic)));
  CHECK(fused(plan(1024, 128, false, DqSum::automatic)));
  CHECK(fused(plan(1024, 128, true, DqSum::automatic)));
  CHECK_FALSE(fused(plan(512, 128, false, DqSum::automatic)));   // short keys: not measured
  CHECK_FALSE(fused(plan(16384, 64, false, DqSum::automatic)));  // head_dim 64: the pair
  CHECK_FALSE(fused(plan(16384, 128, false, DqSum::deterministic)));
  CHECK(fused(plan(64, 64, false, DqSum::atomics)));
  CHECK(plan(64, 64, false, DqSum::deterministic).find("deterministic") != std::string::npos);
}

TEST_CASE("ops::attention_backward: bad input is a tx error naming the operand") {
  const std::int64_t B = 1, H = 2, S = 16, D = 64;
  auto mk = [&](std::vector<std::int64_t> shape, DType t = bf16) {
    std::int64_t n = 1;
    for (auto e : shape) n *= e;
    return Tensor::from_doubles(random_values(static_cast<std::size_t>(n), t, -1, 1), shape, t,
                                device());
  };
  Tensor Q = mk({B, H, S, D}), K = mk({B, H, S, D}), V = mk({B, H, S, D});
  auto [O, L] = ops::attention(Q, K, V);
  auto err = [](auto&& f, const char* operand, const char* words) {
    try {
      f();
      FAIL("no error");
    } catch (const tx::Error& e) {
      const std::string what = e.what();
      CAPTURE(what);
      CHECK(what.find("tx.ops.attention_backward") != std::string::npos);
      CHECK(what.find(operand) != std::string::npos);
      CHECK(what.find(words) != std::string::npos);
      CHECK(what.find("attention_backward_cases.hpp") != std::string::npos);
    }
  };
  Tensor small = mk({B, H, S - 1, D});
  err([&] { ops::attention_backward(small, Q, K, V, O, L); }, "dout", "shape differs");
  Tensor l16 = mk({B, H, S}, f16);
  err([&] { ops::attention_backward(O, Q, K, V, O, l16); }, "lse", "float32");
  Tensor o16 = mk({B, H, S, D}, f16);
  err([&] { ops::attention_backward(O, Q, K, V, o16, L); }, "out", "dtype");
  Tensor Q256 = mk({B, H, 4, 256});
  err(
      [&] {
        ops::attention_backward(Q256, Q256, Q256, Q256, Q256, mk({B, H, 4}, f32));
      },
      "q", "head_dim 256");
  Tensor bad = mk({B, H, S, 80});
  err([&] { ops::attention_backward(bad, bad, bad, bad, bad, L); }, "q", "head_dim 80");
}

}  // namespace attncase
