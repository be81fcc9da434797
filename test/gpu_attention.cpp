// Attention on an sm_90 GPU (H100 / H200): the primitives it adds (row
// reductions and broadcasts on wgmma accumulators, where= masks, the
// accumulator -> register A conversion, named barriers) and the sample's
// warp-specialized forward kernel against float64 -- fresh random inputs,
// poisoned outputs, the bound derived in attention_cases.hpp. On another
// GPU each case says why it does not run.
#include <doctest/doctest.h>

#include <string>

#include "attention_cases.hpp"
#include "gpu_support.hpp"
#include "test_support.hpp"
#include "tx/runtime/cuda_driver.hpp"
#include "tx/tx.hpp"

using namespace tx;

using tx::test::hopper_gpu;

TEST_CASE("the primitives on the GPU: row softmax of an accumulator, pingpong turns") {
  if (!hopper_gpu("wgmma fragments")) return;
  for (DType t : {bf16, f16})
    for (std::int64_t n : {64, 128, 256}) {
      CAPTURE(t.name());
      CAPTURE(n);
      CHECK(tx::test::run_row_softmax(n, t, Device::cuda()) <= 1.0);
    }
  for (int round = 0; round < 20; ++round) CHECK(tx::test::run_pingpong(64, Device::cuda()));
}

TEST_CASE("samples/attention_hopper.cpp on the GPU against float64: the host's cases") {
  if (!hopper_gpu("the attention kernel")) return;
  for (const auto& c : tx::test::attention_host_cases()) {
    CAPTURE(c.name);
    auto e = tx::test::run_attention_sample(c.shape, c.dtype, c.tiling, Device::cuda());
    CHECK(e.out <= 1.0);
    CHECK(e.lse <= 1.0);
  }
}

TEST_CASE(
    "samples/attention_hopper.cpp on the GPU against float64: long sequences, every head dim") {
  if (!hopper_gpu("the attention kernel")) return;
  struct Case {
    const char* name;
    AttentionShape shape;
    DType dtype;
    AttentionTiling tiling;
  };
  const Case cases[] = {
      {"d128 causal 1024",
       {.batch = 2,
        .heads = 4,
        .kv_heads = 4,
        .seq_q = 1024,
        .seq_k = 1024,
        .head_dim = 128,
        .causal = true},
       bf16,
       {}},
      {"d128 gqa 4:1 non-causal, 1000 x 1500",
       {.batch = 1, .heads = 8, .kv_heads = 2, .seq_q = 1000, .seq_k = 1500, .head_dim = 128},
       f16,
       {}},
      {"d64 causal 2048, BN 128",
       {.batch = 1,
        .heads = 4,
        .kv_heads = 1,
        .seq_q = 2048,
        .seq_k = 2048,
        .head_dim = 64,
        .causal = true},
       bf16,
       {}},
      {"d256 causal 777, BN 64",
       {.batch = 1,
        .heads = 2,
        .kv_heads = 2,
        .seq_q = 777,
        .seq_k = 777,
        .head_dim = 256,
        .causal = true},
       bf16,
       {.bn = 64}},
      {"d128 bottom-right 300 x 1100",
       {.batch = 1,
        .heads = 2,
        .kv_heads = 1,
        .seq_q = 300,
        .seq_k = 1100,
        .head_dim = 128,
        .causal = true,
        .bottom_right = true},
       bf16,
       {}},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    auto e = tx::test::run_attention_sample(c.shape, c.dtype, c.tiling, Device::cuda());
    CHECK(e.out <= 1.0);
    CHECK(e.lse <= 1.0);
  }
}
