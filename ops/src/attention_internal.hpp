// What the attention forward (attention.cpp) and backward
// (attention_backward.cpp) share: a kernel's configuration and the checked,
// normalized operands of a call.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <source_location>
#include <string>

#include "tx/ops/attention.hpp"
#include "tx/tx.hpp"

namespace tx::ops::attn {

constexpr std::int64_t BM = 128;  // query rows per tile: two consumer warpgroups of 64

struct AttnConfig {
  std::int64_t D = 128, heads = 1, kv_heads = 1;
  DType t = bf16;
  bool causal = false, bottom_right = false, varlen = false;
  std::int64_t page = 0;  // > 0: K and V are a paged cache read through a block table
  bool q_heads_major = false, kv_heads_major = false;  // (B, H, S, D) storage
  double scale = 0;
  std::int64_t bn = 128, stages = 2, ctas = 132;
  std::string key(const Device& d) const {
    char s[320];
    std::uint64_t bits = 0;
    std::memcpy(&bits, &scale, sizeof bits);
    std::snprintf(
        s, sizeof s, "attention|d%lld|h%lld/%lld|%s|c%d%d|v%d|p%lld|l%d%d|s%llx|bn%lld|%lld|%s",
        static_cast<long long>(D), static_cast<long long>(heads), static_cast<long long>(kv_heads),
        t.name().c_str(), causal, bottom_right, varlen, static_cast<long long>(page), q_heads_major,
        kv_heads_major, static_cast<unsigned long long>(bits), static_cast<long long>(bn),
        static_cast<long long>(ctas), d.str().c_str());
    return s;
  }
};

struct Checked {
  AttnConfig config;
  std::int64_t batch = 0, seq_q = 0, seq_k = 0;
  Tensor q, k, v;  // as the kernel reads them (possibly copies)
  std::string copies;
};

// A (B, H, S, D) view whose storage is (B, S, H, D).
bool tokens_major(const Tensor& x);

// The operands of attention(q, k, v, opt), checked (tx errors naming
// `op`), with the layouts the kernel reads and any copies made.
Checked check(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& opt,
              SourceLoc loc, const std::string& op = "tx.ops.attention");

}  // namespace tx::ops::attn
