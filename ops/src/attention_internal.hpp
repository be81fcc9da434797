// What the attention forward (attention.cpp) and backward
// (attention_backward.cpp) share: a kernel's configuration and the checked,
// normalized operands of a call.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
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
  // Consumer warpgroups of the forward kernel, 64 query rows each (row
  // blocks of 64 x consumers): 2, or 3 at head_dim 64 (attention.cpp says
  // when). The backward kernels keep two (BM).
  std::int64_t consumers = 2;
  std::int64_t rows_per_tile() const { return 64 * consumers; }
  std::string key(const Device& d) const {
    char s[320];
    std::uint64_t bits = 0;
    std::memcpy(&bits, &scale, sizeof bits);
    std::snprintf(s, sizeof s,
                  "attention|d%lld|h%lld/%lld|%s|c%d%d|v%d|p%lld|l%d%d|s%llx|bn%lld|%lld|w%lld|%s",
                  static_cast<long long>(D), static_cast<long long>(heads),
                  static_cast<long long>(kv_heads), t.name().c_str(), causal, bottom_right, varlen,
                  static_cast<long long>(page), q_heads_major, kv_heads_major,
                  static_cast<unsigned long long>(bits), static_cast<long long>(bn),
                  static_cast<long long>(ctas), static_cast<long long>(consumers), d.str().c_str());
    return s;
  }
};

struct Checked {
  AttnConfig config;
  std::int64_t batch = 0, seq_q = 0, seq_k = 0;
  Tensor q, k, v;  // as the kernel reads them (possibly copies)
  std::string copies;
};

// The order in which the persistent CTAs of the attention kernels take their
// tiles, (block, head) with `blocks` blocks a head (counted at launch):
//  - paired (causal masks): a CTA takes block blocks - 1 - j and then block j
//    of one head back to back -- equal work per pair, whichever end of the
//    head the long blocks sit at -- and pairs go head by head, so the few
//    heads in flight keep their operands in L2. Measured on an H200 (the
//    forward, docs/attention.md): 1.03-1.25x the longest blocks first across
//    all heads, which read K and V from DRAM for every block. A pair's second
//    round with j = blocks - 1 - j (an odd count) holds no tile.
//  - else a head's blocks together (CTAs next to each other share the head's
//    operands in L2).
struct TileOrder {
  Var rounds;  // rounds of every CTA
  struct At {
    Var valid, block, head;  // head: batch * heads + head
  };
  std::function<At(Var)> at;  // the tile of round r
};
inline TileOrder tile_order(Var cta, Expr blocks, Expr heads, std::int64_t ctas, bool paired) {
  TileOrder o;
  if (paired) {
    auto per_head = T::let(ceildiv(blocks, 2), "pairs_per_head");
    auto pairs = T::let(per_head * heads, "pairs");
    o.rounds = T::let(2 * ceildiv(pairs, ctas), "rounds");
    o.at = [=](Var r) {
      auto linear = T::let(cta + r / 2 * ctas, "pair_linear");
      auto pair = T::let(min(linear, pairs - 1), "pair");
      auto j = T::let(pair % per_head, "pair_row");
      auto second = T::let(r % 2 == 1, "second");
      return TileOrder::At{
          .valid = T::let(linear < pairs && (!second || j < blocks - 1 - j), "valid"),
          .block = T::let(select(second, Expr(j), blocks - 1 - j), "block"),
          .head = T::let(pair / per_head, "bh")};
    };
    return o;
  }
  o.rounds = T::let(ceildiv(blocks * heads, ctas), "rounds");
  o.at = [=](Var r) {
    auto t = T::let(cta + r * ctas, "tile");
    return TileOrder::At{.valid = T::let(t < blocks * heads, "valid"),
                         .block = T::let(t % blocks, "block"),
                         .head = T::let(min(t / blocks, heads - 1), "bh")};
  };
  return o;
}

// A (B, H, S, D) view whose storage is (B, S, H, D).
bool tokens_major(const Tensor& x);

// The operands of attention(q, k, v, opt), checked (tx errors naming
// `op`), with the layouts the kernel reads and any copies made.
Checked check(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& opt,
              SourceLoc loc, const std::string& op = "tx.ops.attention");

}  // namespace tx::ops::attn
