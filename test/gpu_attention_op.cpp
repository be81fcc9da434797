// tx::ops::attention on an sm_90 GPU against float64 (the cases of
// attention_op_cases.hpp; gpu_attention.cpp runs the sample's kernel).
#define TX_ATTN_DEVICE tx::Device::cuda()
#include "attention_backward_cases.hpp"
#include "attention_op_cases.hpp"

// Larger than the host runs: many CTAs per kernel, key and query loops of
// 8-16 blocks, every pipeline stage reused.
TEST_CASE("ops::attention_backward on the GPU: 1000 tokens, GQA, causal, head_dim 128") {
  using namespace attncase;
  for (bool causal : {false, true})
    for (bool dq_atomics : {false, true}) {
      CAPTURE(causal);
      CAPTURE(dq_atomics);
      auto e = run_backward({{.B = 2,
                              .H = 4,
                              .Hk = 2,
                              .Sq = 1000,
                              .Sk = 1000,
                              .D = 128,
                              .causal = causal,
                              .q_tokens_major = true,
                              .kv_tokens_major = true},
                             0,
                             dq_atomics ? ops::DqSum::atomics : ops::DqSum::deterministic});
      MESSAGE("dq ", e[0], " dk ", e[1], " dv ", e[2]);
      CHECK(e[0] <= 1.0);
      CHECK(e[1] <= 1.0);
      CHECK(e[2] <= 1.0);
    }
}

TEST_CASE("ops::attention_backward on the GPU: the same bits over 10 runs (DqSum::deterministic)") {
  using namespace attncase;
  const std::int64_t B = 2, H = 8, Hk = 2, S = 2048, D = 128;
  auto mk = [&](std::int64_t heads, double lo, double hi) {
    return logical(random_values(static_cast<std::size_t>(B * heads * S * D), bf16, lo, hi), B,
                   heads, S, D, bf16, false);
  };
  Tensor Q = mk(H, -2, 2), K = mk(Hk, -2, 2), V = mk(Hk, -1, 1), G = mk(H, -1, 1);
  auto [O, L] = ops::attention(Q, K, V);
  const ops::AttentionOptions det{.dq_sum = ops::DqSum::deterministic};
  auto first = ops::attention_backward(G, Q, K, V, O, L, det);
  auto dq = first.dq.to_doubles(), dk = first.dk.to_doubles(), dv = first.dv.to_doubles();
  int same = 0;
  for (int run = 0; run < 10; ++run) {
    auto again = ops::attention_backward(G, Q, K, V, O, L, det);
    same +=
        again.dq.to_doubles() == dq && again.dk.to_doubles() == dk && again.dv.to_doubles() == dv;
  }
  CHECK(same == 10);
}
