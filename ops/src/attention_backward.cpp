// tx::ops::attention_backward: dQ, dK and dV of the attention forward
// (attention.cpp), FlashAttention-2's algorithm in two warp-specialized
// Hopper kernels (TMA rings filled by a producer warpgroup, two consumer
// warpgroups on wgmma):
//
//   with P = exp(S * scale - lse), S = Q K^T, and D = rowsum(dO * O):
//     dV = P^T dO      dP = dO V^T      dS = P * (dP - D)
//     dQ = scale * dS K                 dK = scale * dS^T Q
//
// 1. dq_kernel, a CTA per 128 query rows of a head (as the forward): D for
//    its rows first (kept in `dsum` for kernel 2), then over the key blocks
//    S and dP (two MMAs from shared memory), P and dS in registers, dQ += dS
//    K with dS as wgmma's register A operand.
// 2. dkdv_kernel, a CTA per 128 keys of a K/V head (64 per consumer): over
//    the query blocks of every query head of the group (grouped-query
//    attention sums them here, in registers), S and dP again, then P and dS
//    go to shared memory so that wgmma reads them transposed (P^T, dS^T:
//    TileBuffer::transposed) as the A operand of dV += P^T dO and dK += dS^T Q.
//
// Every gradient element is summed by one thread in a fixed order: no
// atomics, the same bits on every run. The price is S and dP computed
// twice (7 MMAs per block pair instead of 5).
//
// DqSum::atomics: dsum_kernel (D alone), then dkdv_kernel with dQ too -- each
// consumer adds scale * dS K into an f32 buffer by the atomic_add tile op
// (at head_dim 128 half of dQ's columns each, from the whole dS in shared
// memory), then a cast. The tile goes through shared memory and the TMA
// adds it into dQ (atomic/tma_reduce: one bulk reduction per box, as
// FlashAttention-3), which replaced one atomic per element (0.45-0.6x the
// two kernels on an H200, docs/attention.md). DqSum::automatic picks one of
// the two forms per call (dq_by_atomics).
#include <atomic>
#include <cmath>
#include <cstring>
#include <numbers>

#include "attention_internal.hpp"
#include "special_ops.hpp"
#include "tx/lowering/codegen_cuda.hpp"
#include "tx/ops/attention.hpp"
#include "tx/ops/ops.hpp"
#include "tx/runtime/cuda_driver.hpp"
#include "tx/tx.hpp"

namespace tx::ops {

namespace {

using attn::AttnConfig;
using attn::BM;
using attn::Checked;

constexpr std::int64_t BK = 128;  // dkdv_kernel: keys per CTA, 64 per consumer warpgroup
constexpr std::int64_t BQ = 64;   // dkdv_kernel: query rows per step

// A backward kernel's configuration: the forward's, and the dQ strategy.
struct BwdConfig {
  AttnConfig c;
  // false: dQ summed by atomics into a float32 buffer inside the dk/dv
  // kernel (5 MMAs a block pair); true: a dq kernel of its own, no atomics.
  bool deterministic = false;
  std::string key(const std::string& kind, const Device& d) const {
    return kind + (deterministic ? "|det|" : "|atomic|") + c.key(d);
  }
};

// Key blocks of the dq kernel: 64 at head_dim 128 (registers: dQ, S, dP
// and dS live at once), 128 at 64.
std::int64_t dq_key_block(std::int64_t D) { return D == 128 ? 64 : 128; }

// The buffers both kernels take (one parameter list: q, k, v, out, dout,
// lse, dsum, dq, dk, dv[, cu_seqlens_q, cu_seqlens_k], batch, seq_q, seq_k).
struct Params {
  TileBuffer Q, K, V, O, dO, LSE, Dsum, dQ, dK, dV, dQacc, cu_q, cu_k;
  Var seq_q, seq_k;
  Expr batch;
};

std::vector<std::string> param_names(const BwdConfig& bc) {
  const AttnConfig& c = bc.c;
  std::vector<std::string> n = {"q", "k", "v", "out", "dout", "lse", "dsum", "dq", "dk", "dv"};
  if (!bc.deterministic) n.push_back("dq_accum");
  if (c.varlen) n.insert(n.end(), {"cu_seqlens_q", "cu_seqlens_k"});
  n.insert(n.end(), {"batch", "seq_q", "seq_k"});
  return n;
}

Params match_params(const BwdConfig& bc, const std::vector<Handle>& h) {
  const AttnConfig& c = bc.c;
  const std::int64_t D = c.D, H = c.heads, HK = c.kv_heads;
  Params p;
  // Storage: (tokens, heads, D), or (batch * heads * seq, D).
  auto tokens = [&](const Handle& x, bool heads_major, std::int64_t nh, Var n) {
    return heads_major ? T::match_buffer(x, {n, D}, c.t) : T::match_buffer(x, {n, nh, D}, c.t);
  };
  Var nq = T::dim("q_rows"), nk = T::dim("kv_rows");
  p.Q = tokens(h[0], c.q_heads_major, H, nq);
  p.K = tokens(h[1], c.kv_heads_major, HK, nk);
  p.V = tokens(h[2], c.kv_heads_major, HK, nk);
  p.O = tokens(h[3], c.q_heads_major, H, nq);
  p.dO = tokens(h[4], c.q_heads_major, H, nq);
  // (rows, 1) rather than flat, as the forward's lse (register tiles take
  // the masked copy of a 2-D region).
  p.LSE = T::match_buffer(h[5], {nq, c.q_heads_major ? 1 : H}, f32);
  p.Dsum = T::match_buffer(h[6], {nq, c.q_heads_major ? 1 : H}, f32);
  p.dQ = tokens(h[7], c.q_heads_major, H, nq);
  p.dK = tokens(h[8], c.kv_heads_major, HK, nk);
  p.dV = tokens(h[9], c.kv_heads_major, HK, nk);
  std::size_t at = 10;
  if (!bc.deterministic) {  // float32, laid out as dq
    p.dQacc = c.q_heads_major ? T::match_buffer(h[at++], {nq, D}, f32)
                              : T::match_buffer(h[at++], {nq, H, D}, f32);
  }
  if (c.varlen) {
    Var nb = T::dim("batch_plus_1");
    p.cu_q = T::match_buffer(h[at++], {nb}, i32);
    p.cu_k = T::match_buffer(h[at++], {nb}, i32);
  }
  Var batch = T::match_scalar(h[at++], i32, "batch", DimFacts{.min = 1});
  p.batch = c.varlen ? Expr(p.cu_q->dims[0] - 1) : Expr(batch);
  p.seq_q = T::match_scalar(h[at++], i32, "seq_q", DimFacts{.min = 1});
  p.seq_k = T::match_scalar(h[at++], i32, "seq_k", DimFacts{.min = 1});
  T::no_alias();
  return p;
}

// Sequence b: its first query and key token and their counts.
struct Bounds {
  Var q0, lq, k0, lk, diagonal;
};

Bounds bounds(const AttnConfig& c, const Params& p, Var b) {
  Bounds x;
  if (c.varlen) {
    x.q0 = T::let(max(p.cu_q(b), 0), "q0");
    x.lq = T::let(max(p.cu_q(b + 1) - x.q0, 0), "lq");
    x.k0 = T::let(max(p.cu_k(b), 0), "k0");
    x.lk = T::let(max(p.cu_k(b + 1) - x.k0, 0), "lk");
  } else {
    x.q0 = T::let(b * p.seq_q, "q0");
    x.lq = T::let(Expr(p.seq_q), "lq");
    x.k0 = T::let(b * p.seq_k, "k0");
    x.lk = T::let(Expr(p.seq_k), "lk");
  }
  // Causal: query i sees key j <= i + diagonal.
  x.diagonal = T::let(c.bottom_right ? Expr(x.lk - x.lq) : Expr(0), "diagonal");
  return x;
}

// Rows [s0, s0 + n) of head hd of batch b's sequence (first token `start`)
// in a (tokens, heads, D) or (batch * heads * seq, D) buffer.
BufferRegion rows(const TileBuffer& X, bool heads_major, std::int64_t nh, Expr b, Expr hd,
                  Expr start, Expr s0, Expr seq, std::int64_t n, std::int64_t D) {
  if (heads_major) return X[region(span((b * nh + hd) * seq + s0, n), {0, D})];
  return X[region(span(start + s0, n), span(hd, 1), {0, D})];
}

// Columns [c0, c0 + nc) of those rows.
BufferRegion rows_cols(const TileBuffer& X, bool heads_major, std::int64_t nh, Expr b, Expr hd,
                       Expr start, Expr s0, Expr seq, std::int64_t n, Expr c0, std::int64_t nc) {
  if (heads_major) return X[region(span((b * nh + hd) * seq + s0, n), span(c0, nc))];
  return X[region(span(start + s0, n), span(hd, 1), span(c0, nc))];
}

// The same rows of a per-row f32 buffer (lse, dsum): (rows, 1) or (tokens, heads).
BufferRegion row_values(const TileBuffer& X, bool heads_major, std::int64_t nh, Expr b, Expr hd,
                        Expr start, Expr s0, Expr seq, std::int64_t n) {
  if (heads_major) return X[region(span((b * nh + hd) * seq + s0, n), {0, 1})];
  return X[region(span(start + s0, n), span(hd, 1))];
}

// where=: the first n rows of a region of `rank` dimensions.
IndexPredicate first_rows(Expr n, int rank) {
  if (rank == 3) return [n](Expr i, Expr, Expr) { return i < n; };
  return [n](Expr i, Expr) { return i < n; };
}

TileBuffer row_vector(std::int64_t n, const char* name) {
  return T::alloc_buffer({n, 1}, f32, scope::local, frag::wgmma_row(n), name);
}

// nlse = -max(lse, -1e30) * log2(e): the bias of P = 2^(S * scale * log2(e)
// + nlse). A row that saw no key has lse -inf and every score masked (-inf);
// clamped, its P is 2^-inf = 0 rather than NaN.
void negated_log2_lse(const TileBuffer& nlse) {
  Tx::warpgroup::maximum(nlse, nlse, -1e30f);
  Tx::warpgroup::mul(nlse, nlse, -std::numbers::log2e);
}

double softmax_scale(const AttnConfig& c) {
  return c.scale > 0 ? c.scale : 1.0 / std::sqrt(static_cast<double>(c.D));
}

// dQ, and D = rowsum(dO * O), a CTA per 128 query rows of one head.
PrimFunc dq_kernel(const BwdConfig& bc) {
  const AttnConfig& c = bc.c;
  const std::int64_t D = c.D, H = c.heads, BN = c.bn, STAGES = c.stages;
  const std::int64_t group = H / c.kv_heads;
  const DType t = c.t;
  const double scale = softmax_scale(c), c2 = scale * std::numbers::log2e;
  const std::string name = "attention_bwd_dq_d" + std::to_string(D) + (c.causal ? "_causal" : "") +
                           (c.varlen ? "_varlen" : "");
  return T::prim_func_n(name, param_names(bc), [&](const std::vector<Handle>& h) {
    Params p = match_params(bc, h);
    T::device_entry();
    auto cta = T::cta_id({c.ctas});
    auto wg = T::warpgroup_id({3});
    auto tid = T::thread_id_in_wg({128});
    auto Qs = T::alloc_buffer({BM, D}, t, scope::shared, layouts::swizzled_tiles({BM, D}, t));
    auto dOs = T::alloc_buffer({BM, D}, t, scope::shared, layouts::swizzled_tiles({BM, D}, t));
    auto Ks = T::alloc_buffer({STAGES, BN, D}, t, scope::shared,
                              layouts::swizzled_tiles({STAGES, BN, D}, t));
    auto Vs = T::alloc_buffer({STAGES, BN, D}, t, scope::shared,
                              layouts::swizzled_tiles({STAGES, BN, D}, t));
    auto qpipe = T::pipeline({.stages = 1, .consumer_arrivals = 2});
    auto kpipe = T::pipeline({.stages = static_cast<int>(STAGES), .consumer_arrivals = 2});
    auto vpipe = T::pipeline({.stages = static_cast<int>(STAGES), .consumer_arrivals = 2});
    // Pipeline positions, the same on both sides: key blocks so far (kv(0))
    // and live tiles so far (kv(1)).
    auto kv = T::alloc_buffer({2}, i32, scope::local);
    kv(0) = 0;
    kv(1) = 0;
    auto tiles_m = T::let(ceildiv(p.seq_q, BM), "tiles_m");
    auto heads_total = T::let(p.batch * H, "heads_total");
    // Tile r of this CTA: (row block, batch * head); causal: mirrored pairs
    // of row blocks head by head, else a head's blocks together.
    const attn::TileOrder order = attn::tile_order(cta, tiles_m, heads_total, c.ctas, c.causal);
    auto rounds = order.rounds;
    struct Tile {
      Var live, m0, b, h, n_end;
      Bounds s;
    };
    auto tile_of = [&](Var r) {
      Tile x;
      auto [valid, mb, bh] = order.at(r);
      x.b = T::let(max(bh / H, 0), "b");
      x.h = T::let(max(bh % H, 0), "h");
      x.m0 = T::let(max(mb, 0) * BM, "m0");
      x.s = bounds(c, p, x.b);
      x.live = T::let(valid && x.m0 < x.s.lq, "live");
      auto nkb = T::let(ceildiv(x.s.lk, BN), "nkb");
      x.n_end = T::let(
          c.causal ? max(min(ceildiv(x.m0 + BM + x.s.diagonal, BN), nkb), 0) : Expr(nkb), "n_end");
      return x;
    };
    auto q_rows = [&](const TileBuffer& X, const Tile& x, Expr s0, std::int64_t n) {
      return rows(X, c.q_heads_major, H, x.b, x.h, x.s.q0, s0, p.seq_q, n, D);
    };
    T::if_(wg == 0,
           [&] {  // the producer: Q and dO once a tile, K and V a block at a time
             T::cuda::decrease_registers(24);
             for (Var r : T::serial(rounds, "r")) {
               Tile x = tile_of(r);
               T::if_(x.live, [&] {
                 auto hk = T::let(x.h / group), qi = T::let(kv(1));
                 qpipe.producer_acquire(qi);
                 Tx::warpgroup::copy_async(Qs, q_rows(p.Q, x, x.m0, BM),
                                           {.barrier = qpipe.full(qi), .partial = true});
                 Tx::warpgroup::copy_async(dOs, q_rows(p.dO, x, x.m0, BM),
                                           {.barrier = qpipe.full(qi), .partial = true});
                 T::if_(tid == 0, [&] { qpipe.producer_commit(qi); });
                 for (Var j : T::serial(x.n_end, "j")) {
                   auto it = T::let(kv(0) + j), s = T::let(kpipe.stage(it));
                   auto keys = [&](const TileBuffer& X) {
                     return rows(X, c.kv_heads_major, c.kv_heads, x.b, hk, x.s.k0, j * BN, p.seq_k,
                                 BN, D);
                   };
                   kpipe.producer_acquire(it);
                   Tx::warpgroup::copy_async(Ks[region(span(s, 1), {0, BN}, {0, D})], keys(p.K),
                                             {.barrier = kpipe.full(it), .partial = true});
                   T::if_(tid == 0, [&] { kpipe.producer_commit(it); });
                   vpipe.producer_acquire(it);
                   Tx::warpgroup::copy_async(Vs[region(span(s, 1), {0, BN}, {0, D})], keys(p.V),
                                             {.barrier = vpipe.full(it), .partial = true});
                   T::if_(tid == 0, [&] { vpipe.producer_commit(it); });
                 }
                 kv(0) = kv(0) + x.n_end;
                 kv(1) = kv(1) + 1;
               });
             }
           })
        .else_([&] {  // the consumers: 64 query rows each
          T::cuda::increase_registers(240);
          auto S = T::alloc_buffer({64, BN}, f32, scope::local, frag::wgmma_c(64, BN));
          auto dP = T::alloc_buffer({64, BN}, f32, scope::local, frag::wgmma_c(64, BN));
          auto dSa = T::alloc_buffer({64, BN}, t, scope::local, frag::wgmma_a(64, BN, t));
          auto dQ = T::alloc_buffer({64, D}, f32, scope::local, frag::wgmma_c(64, D));
          auto nlse = row_vector(64, "nlse"), dsum = row_vector(64, "dsum");
          auto row0 = T::let(max(wg - 1, 0) * 64, "row0");
          auto Qw = Qs[region(span(row0, 64), {0, D})];
          auto dOw = dOs[region(span(row0, 64), {0, D})];
          auto at = [&](const TileBuffer& ring, const T::Pipeline& pipe, Expr it) {
            return ring[region(span(pipe.stage(it), 1), {0, BN}, {0, D})];
          };
          auto release = [&](const T::Pipeline& pipe, Expr it) {
            T::if_(tid == 0, [&] { pipe.consumer_release(it); });
          };
          for (Var r : T::serial(rounds, "r")) {
            Tile x = tile_of(r);
            T::if_(x.live, [&] {
              auto first = T::let(x.m0 + row0, "first"), rows_left = T::let(x.s.lq - first);
              auto mine = first_rows(rows_left, c.q_heads_major ? 2 : 3);
              auto n_full =
                  T::let(c.causal ? min(floordiv(x.m0 + x.s.diagonal + 1, BN), x.s.lk / BN)
                                  : Expr(x.s.lk / BN));
              auto qi = T::let(kv(1));
              Tx::warpgroup::copy(
                  nlse, row_values(p.LSE, c.q_heads_major, H, x.b, x.h, x.s.q0, first, p.seq_q, 64),
                  {.partial = true});
              negated_log2_lse(nlse);
              qpipe.consumer_wait(qi);
              {  // D = rowsum(dO * O), in dQ's registers before they accumulate
                auto Of = T::alloc_buffer({64, D}, t, scope::local, frag::wgmma_c(64, D), "Of");
                auto dOf = T::alloc_buffer({64, D}, t, scope::local, frag::wgmma_c(64, D), "dOf");
                Tx::warpgroup::copy(Of, q_rows(p.O, x, first, 64), {.partial = true});
                Tx::warpgroup::copy(dOf, dOw);
                Tx::warpgroup::mul(dQ, Of, dOf);
                Tx::warpgroup::sum(dsum, dQ);
                Tx::warpgroup::copy(
                    row_values(p.Dsum, c.q_heads_major, H, x.b, x.h, x.s.q0, first, p.seq_q, 64),
                    dsum, {.partial = true, .where = first_rows(rows_left, 2)});
              }
              Tx::warpgroup::fill(dQ, 0.0f);
              for (Var j : T::serial(x.n_end, "j")) {
                auto it = T::let(kv(0) + j);
                kpipe.consumer_wait(it);
                vpipe.consumer_wait(it);
                Tx::warpgroup::gemm(S, Qw, at(Ks, kpipe, it), {.pending = 1, .transpose_b = true});
                Tx::warpgroup::gemm(dP, dOw, at(Vs, vpipe, it), {.transpose_b = true});
                release(vpipe, it);
                T::if_(j >= n_full, [&] {  // keys past the end, or above the diagonal
                  auto first_row = T::let(first + x.s.diagonal);
                  Tx::warpgroup::fill(S, -INFINITY, {.where = [&](Expr i, Expr k) -> Expr {
                                        Expr past_end = j * BN + k >= x.s.lk;
                                        if (!c.causal) return past_end;
                                        return past_end || j * BN + k > first_row + i;
                                      }});
                });
                Tx::warpgroup::exp2(S, S, {.scale = c2, .bias = nlse.all()});  // P
                Tx::warpgroup::sub(dP, dP, dsum);
                Tx::warpgroup::mul(S, S, dP);  // dS
                Tx::warpgroup::cast(dSa, S);
                Tx::warpgroup::gemm(dQ, dSa, at(Ks, kpipe, it), {.accum = true});
                release(kpipe, it);
              }
              // Every thread's read of dOs (D's, above) is done before the
              // producer may load the next tile's: a tile without key blocks
              // has no MMA in between.
              T::cuda::warpgroup_sync();
              release(qpipe, qi);
              kv(0) = kv(0) + x.n_end;
              kv(1) = kv(1) + 1;
              Tx::warpgroup::mul(dQ, dQ, scale);
              auto dQo = T::alloc_buffer({64, D}, t, scope::local, frag::wgmma_c(64, D), "dQo");
              Tx::warpgroup::cast(dQo, dQ);
              Tx::warpgroup::copy(q_rows(p.dQ, x, first, 64), dQo,
                                  {.partial = true, .where = mine});
            });
          }
        });
  });
}

// The fused path's first kernel: D = rowsum(dO * O) of every query row, a
// warpgroup per 64 rows of a head (O and dO read in the wgmma accumulator's
// layout: a product and a row sum in registers, as the dq kernel does).
PrimFunc dsum_kernel(const BwdConfig& bc) {
  const AttnConfig& c = bc.c;
  const std::int64_t D = c.D, H = c.heads;
  const DType t = c.t;
  const std::string name = "attention_bwd_dsum_d" + std::to_string(D) + (c.varlen ? "_varlen" : "");
  return T::prim_func_n(name, param_names(bc), [&](const std::vector<Handle>& h) {
    Params p = match_params(bc, h);
    T::device_entry();
    auto cta = T::cta_id({c.ctas});
    T::thread_id({128});
    auto tiles_m = T::let(ceildiv(p.seq_q, 64), "tiles_m");
    auto heads_total = T::let(p.batch * H, "heads_total");
    auto rounds = T::let(ceildiv(tiles_m * heads_total, c.ctas), "rounds");
    auto Of = T::alloc_buffer({64, D}, t, scope::local, frag::wgmma_c(64, D), "Of");
    auto dOf = T::alloc_buffer({64, D}, t, scope::local, frag::wgmma_c(64, D), "dOf");
    auto prod = T::alloc_buffer({64, D}, f32, scope::local, frag::wgmma_c(64, D), "prod");
    auto dsum = row_vector(64, "dsum");
    for (Var r : T::serial(rounds, "r")) {
      auto t_ = T::let(cta + r * c.ctas, "tile");
      auto b = T::let(max(min(t_ / tiles_m, heads_total - 1), 0) / H, "b");
      auto hd = T::let(max(min(t_ / tiles_m, heads_total - 1), 0) % H, "h");
      auto m0 = T::let((t_ % tiles_m) * 64, "m0");
      Bounds s = bounds(c, p, b);
      // (A tile past a short sequence's end stores nothing: where= below. A
      // condition on the length, a load, would split the warps that the row
      // sums' shuffles join.)
      T::if_(t_ < tiles_m * heads_total, [&] {
        auto rows_left = T::let(s.lq - m0);
        auto q_rows = [&](const TileBuffer& X) {
          return rows(X, c.q_heads_major, H, b, hd, s.q0, m0, p.seq_q, 64, D);
        };
        Tx::warpgroup::copy(Of, q_rows(p.O), {.partial = true});
        Tx::warpgroup::copy(dOf, q_rows(p.dO), {.partial = true});
        Tx::warpgroup::mul(prod, Of, dOf);
        Tx::warpgroup::sum(dsum, prod);
        Tx::warpgroup::copy(row_values(p.Dsum, c.q_heads_major, H, b, hd, s.q0, m0, p.seq_q, 64),
                            dsum, {.partial = true, .where = first_rows(rows_left, 2)});
      });
    }
  });
}

// dK and dV (and, fused, dQ by atomics), a CTA per 128 keys of one K/V head.
PrimFunc dkdv_kernel(const BwdConfig& bc) {
  const AttnConfig& c = bc.c;
  const bool fused = !bc.deterministic;
  const std::int64_t D = c.D, H = c.heads, HK = c.kv_heads, STAGES = c.stages;
  const std::int64_t group = H / HK;
  const DType t = c.t;
  const double scale = softmax_scale(c), c2 = scale * std::numbers::log2e;
  const std::string name = std::string(fused ? "attention_bwd_d" : "attention_bwd_dkdv_d") +
                           std::to_string(D) + (c.causal ? "_causal" : "") +
                           (c.varlen ? "_varlen" : "");
  return T::prim_func_n(name, param_names(bc), [&](const std::vector<Handle>& h) {
    Params p = match_params(bc, h);
    T::device_entry();
    auto cta = T::cta_id({c.ctas});
    auto wg = T::warpgroup_id({3});
    auto tid = T::thread_id_in_wg({128});
    auto Ks = T::alloc_buffer({BK, D}, t, scope::shared, layouts::swizzled_tiles({BK, D}, t));
    auto Vs = T::alloc_buffer({BK, D}, t, scope::shared, layouts::swizzled_tiles({BK, D}, t));
    auto Qr = T::alloc_buffer({STAGES, BQ, D}, t, scope::shared,
                              layouts::swizzled_tiles({STAGES, BQ, D}, t));
    auto dOr = T::alloc_buffer({STAGES, BQ, D}, t, scope::shared,
                               layouts::swizzled_tiles({STAGES, BQ, D}, t));
    // P and dS of a step, (query rows, the block's keys): consumer w's keys
    // are columns [64 w, 64 w + 64), one 128-byte panel of the swizzled
    // tile. Written from registers; read transposed by wgmma (P^T, dS^T),
    // and dS whole for dQ = dS K.
    auto Ps =
        T::alloc_buffer({BQ, BK}, t, scope::shared, layouts::swizzled_tiles({BQ, BK}, t), "Ps");
    auto dSs =
        T::alloc_buffer({BQ, BK}, t, scope::shared, layouts::swizzled_tiles({BQ, BK}, t), "dSs");
    // Fused: each consumer's dQ tile on its way to the TMA's reduction into dQ.
    TileBuffer dQs;
    if (fused) {
      const std::int64_t cols = D == 128 ? D / 2 : D;
      dQs = T::alloc_buffer({2, BQ, cols}, f32, scope::shared,
                            layouts::swizzled_tiles({2, BQ, cols}, f32), "dQs");
    }
    // Both consumers' dS stored (dQ reads it whole) / read (it may be overwritten).
    auto both = T::named_barriers({.count = 1, .threads = 256});
    auto kvpipe = T::pipeline({.stages = 1, .consumer_arrivals = 2});
    auto qpipe = T::pipeline({.stages = static_cast<int>(STAGES), .consumer_arrivals = 2});
    auto kv = T::alloc_buffer({2}, i32, scope::local);
    kv(0) = 0;  // query steps so far
    kv(1) = 0;  // live tiles so far
    auto tiles_n = T::let(ceildiv(p.seq_k, BK), "tiles_n");
    auto heads_total = T::let(p.batch * HK, "heads_total");
    // Tile r of this CTA: (key block, batch * kv head). Causal: mirrored
    // pairs of key blocks head by head, the first key block of a pair the
    // one that sees more queries; else a head's blocks together, so the
    // CTAs of a round share the head's Q and dO in L2 (they had taken one
    // block of every head, each CTA streaming its own head's Q and dO).
    const attn::TileOrder order = attn::tile_order(cta, tiles_n, heads_total, c.ctas, c.causal);
    auto rounds = order.rounds;
    struct Tile {
      Var live, n0, b, hk, m_begin, nm, steps;
      Bounds s;
    };
    auto tile_of = [&](Var r) {
      Tile x;
      auto [valid, block, bh] = order.at(r);
      auto nb = T::let(c.causal ? Expr(tiles_n - 1 - block) : Expr(block), "nb");
      x.b = T::let(max(bh / HK, 0), "b");
      x.hk = T::let(max(bh % HK, 0), "hk");
      x.n0 = T::let(max(nb, 0) * BK, "n0");
      x.s = bounds(c, p, x.b);
      x.live = T::let(valid && x.n0 < x.s.lk, "live");
      // The query blocks that see a key of the block: all, or causal from
      // the first row on the block's first key's diagonal.
      x.m_begin = T::let(c.causal ? Expr(max(x.n0 - x.s.diagonal, 0) / BQ) : Expr(0), "m_begin");
      x.nm = T::let(max(ceildiv(x.s.lq, BQ) - x.m_begin, 0), "nm");
      x.steps = T::let(x.nm * group, "steps");
      return x;
    };
    // Step u of a tile: query head h, rows from m0.
    struct Step {
      Var h, m0;
    };
    auto step_of = [&](const Tile& x, Var u) {
      Step st;
      auto nm = T::let(max(x.nm, 1));
      st.h = T::let(x.hk * group + min(u / nm, group - 1), "h");
      // Fused, non-causal: the CTAs of a round hold key blocks of the same
      // heads and would add into the same dQ rows at once; each starts at
      // the query block level with its keys instead (causal starts differ).
      Expr mi = u % nm;
      if (fused && !c.causal) mi = (mi + x.n0 / BQ) % nm;
      st.m0 = T::let((x.m_begin + mi) * BQ, "m0");
      return st;
    };
    auto q_rows = [&](const TileBuffer& X, const Tile& x, const Step& st) {
      return rows(X, c.q_heads_major, H, x.b, st.h, x.s.q0, st.m0, p.seq_q, BQ, D);
    };
    auto k_rows = [&](const TileBuffer& X, const Tile& x, Expr s0, std::int64_t n) {
      return rows(X, c.kv_heads_major, HK, x.b, x.hk, x.s.k0, s0, p.seq_k, n, D);
    };
    T::if_(wg == 0,
           [&] {  // the producer: K and V once a tile, Q and dO a step at a time
             T::cuda::decrease_registers(24);
             for (Var r : T::serial(rounds, "r")) {
               Tile x = tile_of(r);
               T::if_(x.live, [&] {
                 auto ki = T::let(kv(1));
                 kvpipe.producer_acquire(ki);
                 Tx::warpgroup::copy_async(Ks, k_rows(p.K, x, x.n0, BK),
                                           {.barrier = kvpipe.full(ki), .partial = true});
                 Tx::warpgroup::copy_async(Vs, k_rows(p.V, x, x.n0, BK),
                                           {.barrier = kvpipe.full(ki), .partial = true});
                 T::if_(tid == 0, [&] { kvpipe.producer_commit(ki); });
                 for (Var u : T::serial(x.steps, "u")) {
                   Step st = step_of(x, u);
                   auto it = T::let(kv(0) + u), s = T::let(qpipe.stage(it));
                   qpipe.producer_acquire(it);
                   Tx::warpgroup::copy_async(Qr[region(span(s, 1), {0, BQ}, {0, D})],
                                             q_rows(p.Q, x, st),
                                             {.barrier = qpipe.full(it), .partial = true});
                   Tx::warpgroup::copy_async(dOr[region(span(s, 1), {0, BQ}, {0, D})],
                                             q_rows(p.dO, x, st),
                                             {.barrier = qpipe.full(it), .partial = true});
                   T::if_(tid == 0, [&] { qpipe.producer_commit(it); });
                 }
                 kv(0) = kv(0) + x.steps;
                 kv(1) = kv(1) + 1;
               });
             }
           })
        .else_([&] {  // the consumers: 64 keys each
          T::cuda::increase_registers(240);
          auto S = T::alloc_buffer({BQ, 64}, f32, scope::local, frag::wgmma_c(BQ, 64));
          auto dP = T::alloc_buffer({BQ, 64}, f32, scope::local, frag::wgmma_c(BQ, 64));
          auto half = T::alloc_buffer({BQ, 64}, t, scope::local, frag::wgmma_c(BQ, 64), "half");
          auto dK = T::alloc_buffer({64, D}, f32, scope::local, frag::wgmma_c(64, D));
          auto dV = T::alloc_buffer({64, D}, f32, scope::local, frag::wgmma_c(64, D));
          auto nlse = row_vector(BQ, "nlse"), dsum = row_vector(BQ, "dsum");
          auto me = T::let(max(wg - 1, 0), "me");
          auto key0 = T::let(me * 64, "key0");  // this consumer's keys in the block
          auto Kw = Ks[region(span(key0, 64), {0, D})];
          auto Vw = Vs[region(span(key0, 64), {0, D})];
          auto Pw = Ps[region({0, BQ}, span(key0, 64))];
          auto dSw = dSs[region({0, BQ}, span(key0, 64))];
          auto PwT = Ps.transposed()[region(span(key0, 64), {0, BQ})];
          auto dSwT = dSs.transposed()[region(span(key0, 64), {0, BQ})];
          // dQ (fused): consumer w adds dS K for head-dim columns [w D/2, (w + 1) D/2)
          // (D 128; at 64, dS_w K_w over its own keys, all columns).
          const bool split_d = D == 128;
          const std::int64_t dq_cols = split_d ? D / 2 : D;
          TileBuffer dQ, dSa;
          if (fused) {
            dQ =
                T::alloc_buffer({BQ, dq_cols}, f32, scope::local, frag::wgmma_c(BQ, dq_cols), "dQ");
            if (!split_d)
              dSa = T::alloc_buffer({BQ, 64}, t, scope::local, frag::wgmma_a(BQ, 64, t), "dSa");
          }
          auto at = [&](const TileBuffer& ring, Expr it) {
            return ring[region(span(qpipe.stage(it), 1), {0, BQ}, {0, D})];
          };
          auto release = [&](const T::Pipeline& pipe, Expr it) {
            T::if_(tid == 0, [&] { pipe.consumer_release(it); });
          };
          for (Var r : T::serial(rounds, "r")) {
            Tile x = tile_of(r);
            T::if_(x.live, [&] {
              auto ki = T::let(kv(1));
              auto first_key = T::let(x.n0 + key0, "first_key");
              Tx::warpgroup::fill(dK, 0.0f);
              Tx::warpgroup::fill(dV, 0.0f);
              kvpipe.consumer_wait(ki);
              // The softmax's rows of step u (LSE as -log2 lse, D).
              auto load_rows = [&](const Step& st) {
                auto per_row = [&](const TileBuffer& X) {
                  return row_values(X, c.q_heads_major, H, x.b, st.h, x.s.q0, st.m0, p.seq_q, BQ);
                };
                Tx::warpgroup::copy(nlse, per_row(p.LSE), {.partial = true});
                Tx::warpgroup::copy(dsum, per_row(p.Dsum), {.partial = true});
                negated_log2_lse(nlse);
              };
              // S = Q K^T and dP = dO V^T of step u, left in flight (two groups).
              auto issue_s_dp = [&](Expr it) {
                qpipe.consumer_wait(it);
                Tx::warpgroup::gemm(S, at(Qr, it), Kw, {.pending = 1, .transpose_b = true});
                Tx::warpgroup::gemm(dP, at(dOr, it), Vw, {.pending = 2, .transpose_b = true});
              };
              // P = exp2(S c2 - lse') and dS = P (dP - D) in the registers of S and dP.
              auto p_and_ds = [&](const Step& st, bool guarded = true) {
                // Rows past the sequence (the next one's, or zeros), keys past
                // it (fused: they would reach dQ) and, causal, keys above the
                // diagonal: P = 0.
                Expr partial = st.m0 + BQ > x.s.lq;
                if (fused) partial = partial || first_key + 64 > x.s.lk;
                if (c.causal) partial = partial || st.m0 + x.s.diagonal < first_key + 63;
                auto mask = [&] {
                  Tx::warpgroup::fill(S, -INFINITY, {.where = [&](Expr i, Expr k) -> Expr {
                                        Expr masked = st.m0 + i >= x.s.lq;
                                        if (fused) masked = masked || first_key + k >= x.s.lk;
                                        if (!c.causal) return masked;
                                        return masked || first_key + k > st.m0 + i + x.s.diagonal;
                                      }});
                };
                if (guarded)
                  T::if_(partial, mask);
                else
                  mask();
                Tx::warpgroup::exp2(S, S, {.scale = c2, .bias = nlse.all()});  // P
                Tx::warpgroup::sub(dP, dP, dsum);
                Tx::warpgroup::mul(dP, dP, S);  // dS
              };
              // P and dS into this consumer's panels, for wgmma to read transposed.
              auto store_p_ds = [&] {
                Tx::warpgroup::cast(half, S);
                Tx::warpgroup::copy(Pw, half);
                Tx::warpgroup::cast(half, dP);
                Tx::warpgroup::copy(dSw, half);
                T::cuda::fence_proxy_async();
              };
              if (!fused) {
                // Software-pipelined over the steps: the dV and dK products of
                // step u run while step u + 1's P and dS are computed, and step
                // u + 1's S and dP are issued before them. Every wait retires
                // the same groups on every path (ptxas serializes the MMAs
                // around waits it cannot place): after a step, S(u + 1) and
                // dP(u + 1) are done and dV(u), dK(u) may still run.
                auto step = [&](Var u, bool next) {
                  Step st = step_of(x, u);
                  auto it = T::let(kv(0) + u);
                  // (The last step masks unconditionally: reached both from the
                  // loop and, with one step, from the prologue, a conditional
                  // write to S there makes ptxas serialize every wgmma, C7515.)
                  p_and_ds(st, next);
                  // dV(u - 1), dK(u - 1) done: their Q and dO stage is free, and
                  // (every warp past its wait) so are the P and dS panels.
                  T::cuda::wgmma_wait(0, dV);
                  T::cuda::wgmma_wait(0, dK);
                  T::if_(u > 0, [&] { release(qpipe, it - 1); });
                  T::cuda::warpgroup_sync();
                  store_p_ds();
                  T::cuda::warpgroup_sync();
                  if (next) {
                    load_rows(step_of(x, T::let(u + 1, "u_next")));
                    issue_s_dp(it + 1);
                  }
                  Tx::warpgroup::gemm(dV, PwT, at(dOr, it), {.accum = true, .pending = 3});
                  Tx::warpgroup::gemm(dK, dSwT, at(Qr, it), {.accum = true, .pending = 4});
                  if (next) {
                    T::cuda::wgmma_wait(2, S);
                    T::cuda::wgmma_wait(2, dP);
                  }
                };
                T::if_(x.steps > 0, [&] {
                  load_rows(step_of(x, T::let(0, "u0")));
                  issue_s_dp(kv(0));
                  T::cuda::wgmma_wait(0, S);
                  T::cuda::wgmma_wait(0, dP);
                  for (Var u : T::serial(x.steps - 1, "u")) step(u, true);
                  step(T::let(x.steps - 1, "u_last"), false);
                  T::cuda::wgmma_wait(0, dV);
                  T::cuda::wgmma_wait(0, dK);
                  release(qpipe, kv(0) + x.steps - 1);
                });
              } else {
                for (Var u : T::serial(x.steps, "u")) {
                  Step st = step_of(x, u);
                  auto it = T::let(kv(0) + u);
                  load_rows(st);
                  qpipe.consumer_wait(it);
                  Tx::warpgroup::gemm(S, at(Qr, it), Kw, {.pending = 1, .transpose_b = true});
                  Tx::warpgroup::gemm(dP, at(dOr, it), Vw, {.transpose_b = true});
                  p_and_ds(st);
                  // The last step's MMAs read Pw and dSw until every warp's wait
                  // (dS also the other consumer's dQ MMA at head_dim 128).
                  if (split_d)
                    both.sync(0);
                  else
                    T::cuda::warpgroup_sync();
                  store_p_ds();
                  if (split_d)
                    both.sync(0);
                  else
                    T::cuda::warpgroup_sync();
                  Tx::warpgroup::gemm(dV, PwT, at(dOr, it), {.accum = true, .pending = 1});
                  Tx::warpgroup::gemm(dK, dSwT, at(Qr, it), {.accum = true});
                  release(qpipe, it);
                  Expr col0 = split_d ? Expr(me * dq_cols) : Expr(0);
                  if (split_d) {
                    Tx::warpgroup::gemm(dQ, dSs.all(), Ks[region({0, BK}, span(col0, dq_cols))]);
                  } else {
                    Tx::warpgroup::cast(dSa, dP);
                    Tx::warpgroup::gemm(dQ, dSa, Kw);
                  }
                  Tx::warpgroup::mul(dQ, dQ, scale);
                  // The previous step's reduction has read this consumer's
                  // tile: write it again, and the TMA adds it into dQ while
                  // the next step runs. Added whole: rows past the sequence
                  // hold zeros (P = 0 there), so the rows they reach (the
                  // next sequence's or head's) gain nothing.
                  auto staged = dQs[region(span(me, 1), {0, BQ}, {0, dq_cols})];
                  T::cuda::tma_store_wait(0);
                  T::cuda::warpgroup_sync();
                  Tx::warpgroup::copy(staged, dQ);
                  Tx::warpgroup::atomic_add(rows_cols(p.dQacc, c.q_heads_major, H, x.b, st.h,
                                                      x.s.q0, st.m0, p.seq_q, BQ, col0, dq_cols),
                                            staged, {.partial = true});
                }
              }
              release(kvpipe, ki);
              kv(0) = kv(0) + x.steps;
              kv(1) = kv(1) + 1;
              Tx::warpgroup::mul(dK, dK, scale);
              auto keys_left = T::let(x.s.lk - first_key);
              auto mine = first_rows(keys_left, c.kv_heads_major ? 2 : 3);
              auto out = T::alloc_buffer({64, D}, t, scope::local, frag::wgmma_c(64, D), "out");
              Tx::warpgroup::cast(out, dK);
              Tx::warpgroup::copy(k_rows(p.dK, x, first_key, 64), out,
                                  {.partial = true, .where = mine});
              Tx::warpgroup::cast(out, dV);
              Tx::warpgroup::copy(k_rows(p.dV, x, first_key, 64), out,
                                  {.partial = true, .where = mine});
            });
          }
        });
  });
}

std::atomic<std::uint64_t> g_built{0};

// x = 0 (a fresh, contiguous tensor), on the device's current stream: a
// memset, not Tensor::fill_bits (which builds the bytes on the host).
void zero(Tensor& x) {
  if (!x.device().is_cuda()) {
    std::memset(x.data_ptr(), 0, x.nbytes());
    return;
  }
  runtime::memset_device(reinterpret_cast<runtime::DevicePtr>(x.data_ptr()), 0, x.nbytes(),
                         current_stream(x.device()).handle());
}

Kernel kernel_for(const std::string& kind, const BwdConfig& config, const Device& d,
                  PrimFunc (*make)(const BwdConfig&)) {
  // The pipelined dk/dv kernel at head_dim 64 as one CTA per SM: with
  // __launch_bounds__(384) alone ptxas cannot place the consumers' setmaxnreg
  // (C7508), keeps them at 168 registers and spills; with (384, 1) it budgets
  // each side and spills nothing (ptxas 13.0, sm_90a).
  const int min_ctas = make == dkdv_kernel && config.deterministic && config.c.D <= 64 ? 1 : 0;
  return detail::special_cached(config.key(kind, d), [&] {
    ++g_built;
    return compile(make(config), {.device = d, .approx_math = true, .min_ctas_per_sm = min_ctas});
  });
}

// dout, out and lse of a backward call, checked against the forward's
// operands and laid out as the kernels read them.
struct Backward {
  Checked c;
  Tensor dout, out, lse;
};

Backward check_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                        const Tensor& out, const Tensor& lse, const AttentionOptions& opt,
                        SourceLoc loc) {
  const std::string op = "tx.ops.attention_backward";
  if (opt.block_table)
    fail(op, "block_table", loc,
         "the backward over a paged cache is not supported yet: gather the pages into "
         "contiguous k and v first");
  Backward w{attn::check(q, k, v, opt, loc, op), {}, {}, {}};
  AttnConfig& cf = w.c.config;
  if (cf.D == 256) fail(op, "q", loc, "head_dim 256: the backward kernels take 64 or 128 for now");
  for (auto [x, n] : {std::pair{&dout, "dout"}, {&out, "out"}}) {
    if (!x->defined()) fail(op, n, loc, "an undefined tensor");
    if (x->shape() != q.shape())
      fail(op, n, loc, "shape differs from q's (it is the forward's output, or its gradient)");
    if (x->dtype() != q.dtype())
      fail(op, n, loc, "dtype " + x->dtype().name() + " differs from q's " + q.dtype().name());
    if (!(x->device() == q.device()))
      fail(op, n, loc, "on " + x->device().str() + ", q on " + q.device().str());
  }
  const auto& qs = q.shape();
  const std::vector<std::int64_t> lse_shape =
      cf.varlen ? std::vector<std::int64_t>{qs[1], qs[0]} : std::vector{qs[0], qs[1], qs[2]};
  if (!lse.defined() || lse.dtype() != f32 || lse.shape() != lse_shape ||
      !(lse.device() == q.device()))
    fail(op, "lse", loc,
         "the forward's log-sum-exp: float32 " +
             std::string(cf.varlen ? "(heads, total_q)" : "(batch, heads, seq_q)") +
             " on q's device");
  // dout and out in q's storage layout; lse with its rows in q's token order.
  auto like_q = [&](const Tensor& x, const char* what) {
    const bool fits = cf.varlen || cf.q_heads_major ? x.is_contiguous() : attn::tokens_major(x);
    if (fits) return x;
    w.c.copies += std::string(", ") + what + " copied to q's layout";
    if (cf.varlen || cf.q_heads_major) return x.contiguous();
    return x.transpose(1, 2).contiguous().transpose(1, 2);
  };
  w.dout = like_q(dout, "dout");
  w.out = like_q(out, "out");
  if (cf.varlen) {
    w.lse = lse.transpose(0, 1).is_contiguous() ? lse
                                                : lse.transpose(0, 1).contiguous().transpose(0, 1);
  } else if (cf.q_heads_major) {
    w.lse = lse.is_contiguous() ? lse : lse.contiguous();
  } else {
    w.lse = lse.permute({0, 2, 1}).is_contiguous()
                ? lse
                : lse.permute({0, 2, 1}).contiguous().permute({0, 2, 1});
  }
  cf.bn = dq_key_block(cf.D);
  return w;
}

}  // namespace

std::uint64_t detail::attention_backward_kernels_built() { return g_built.load(); }

std::vector<std::string> detail::attention_backward_cuda(std::int64_t head_dim, std::int64_t heads,
                                                         std::int64_t kv_heads, DType t,
                                                         bool causal, bool varlen) {
  AttnConfig c{.D = head_dim,
               .heads = heads,
               .kv_heads = kv_heads,
               .t = t,
               .causal = causal,
               .varlen = varlen};
  c.bn = dq_key_block(head_dim);
  std::vector<std::string> out;
  auto cuda = [&](PrimFunc (*make)(const BwdConfig&), bool deterministic) {
    const BwdConfig bc{.c = c, .deterministic = deterministic};
    out.push_back(lowering::codegen_cuda(lowering::lower(make(bc), {.arch = "sm_90a"})));
  };
  cuda(dsum_kernel, false);
  cuda(dkdv_kernel, false);
  cuda(dq_kernel, true);
  cuda(dkdv_kernel, true);
  return out;
}

// Whether dQ is summed by TMA reductions in the dk/dv kernel. automatic:
// measured on an H200 (2026-11-29, docs/attention.md, with both kernels
// taking attn::tile_order), the fused kernel (5 products per block pair,
// dQ tiles added by the TMA) beats the deterministic pair (7 products, no
// atomics) at head_dim 128 on every row timed, 1k to 16k keys, causal or
// not (1.03-1.27x), and loses at head_dim 64 on every row (its consumers
// hold dQ in registers beside dK and dV; the pair's pipelined dk/dv kernel
// is 1.01-1.19x faster there). Below 1k keys nothing was timed: the pair,
// whose result does not depend on the order of additions.
static bool dq_by_atomics(const AttentionOptions& opt, const Checked& c) {
  switch (opt.dq_sum) {
    case DqSum::deterministic:
      return false;
    case DqSum::atomics:
      return true;
    case DqSum::automatic:
      break;
  }
  const std::int64_t keys = c.config.varlen ? opt.max_seqlen_k : c.seq_k;
  return c.config.D == 128 && keys >= 1024;
}

std::string attention_backward_plan(const Tensor& dout, const Tensor& q, const Tensor& k,
                                    const Tensor& v, const Tensor& out, const Tensor& lse,
                                    const AttentionOptions& opt) {
  Backward w = check_backward(dout, q, k, v, out, lse, opt, std::source_location::current());
  const AttnConfig& cf = w.c.config;
  std::string s = std::string(q.device().is_cuda() ? "wgmma" : "host") + ", ";
  if (!dq_by_atomics(opt, w.c))
    s += "deterministic (no atomics): dq kernel (128 query rows a CTA, key blocks of " +
         std::to_string(cf.bn) + "), then dk/dv kernel (";
  else
    s += "D pre-pass, then one kernel for dk, dv and dq (dQ tiles added by TMA reductions; ";
  s += std::to_string(BK) + " keys a CTA, query blocks of " + std::to_string(BQ) + "), " +
       std::to_string(cf.ctas) + " persistent CTAs";
  if (cf.varlen) s += ", variable lengths (packed tokens)";
  return s + w.c.copies;
}

AttentionGrads attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k,
                                  const Tensor& v, const Tensor& out, const Tensor& lse,
                                  const AttentionOptions& opt, std::source_location loc) {
  Backward w = check_backward(dout, q, k, v, out, lse, opt, loc);
  const Checked& c = w.c;
  const AttnConfig& cf = c.config;
  const Device d = q.device();
  const std::int64_t D = cf.D, H = cf.heads, HK = cf.kv_heads;
  AttentionGrads g;
  auto empty_like_layout = [&](const Tensor& x, bool heads_major, DType dt) {
    if (cf.varlen || heads_major) return Tensor::empty(x.shape(), dt, d);
    const auto& s = x.shape();  // (B, H, S, D) over (B, S, H, D) storage
    return Tensor::empty({s[0], s[2], s[1], s[3]}, dt, d).transpose(1, 2);
  };
  g.dq = empty_like_layout(c.q, cf.q_heads_major, q.dtype());
  g.dk = empty_like_layout(c.k, cf.kv_heads_major, k.dtype());
  g.dv = empty_like_layout(c.v, cf.kv_heads_major, v.dtype());
  const std::int64_t tq = cf.varlen ? q.shape()[0] : c.batch * c.seq_q;
  const std::int64_t tk = cf.varlen ? k.shape()[0] : c.batch * c.seq_k;
  if (tq == 0 || tk == 0) {  // no queries: no gradient reaches k, v; no keys: none reaches q
    zero(g.dq);
    zero(g.dk);
    zero(g.dv);
    return g;
  }
  const std::int64_t B = c.batch, Sq = c.seq_q, Sk = c.seq_k;
  if (!cf.varlen && (B > 2147483647 / std::max(Sq, Sk) ||
                     B * H * ((std::max(Sq, Sk) + BM - 1) / BM) > 2147483647))
    fail("tx.ops.attention_backward", "q", loc, "more than 2^31 tiles or tokens in one call");
  auto flat = [&](const Tensor& x, bool heads_major, std::int64_t nh) {
    if (cf.varlen) return x;
    const std::int64_t s = x.shape()[2];
    return heads_major ? x.reshape({B * nh * s, D}) : x.transpose(1, 2).reshape({B * s, nh, D});
  };
  auto flat_rows = [&](const Tensor& x) {  // lse, dsum
    if (cf.varlen) return x.transpose(0, 1);
    return cf.q_heads_major ? x.reshape({B * H * Sq, 1})
                            : x.permute({0, 2, 1}).reshape({B * Sq, H});
  };
  // D = rowsum(dout * out), written by the first kernel, read by the dk/dv one.
  Tensor dsum = Tensor::empty(flat_rows(w.lse).shape(), f32, d);
  const bool atomics = dq_by_atomics(opt, c);
  // Fused: dQ's float32 accumulator, laid out as dq (zeroed: the kernel adds).
  Tensor acc;
  if (atomics) {
    acc = empty_like_layout(c.q, cf.q_heads_major, f32);
    zero(acc);
  }
  std::vector<Tensor> tensors = {flat(c.q, cf.q_heads_major, H),
                                 flat(c.k, cf.kv_heads_major, HK),
                                 flat(c.v, cf.kv_heads_major, HK),
                                 flat(w.out, cf.q_heads_major, H),
                                 flat(w.dout, cf.q_heads_major, H),
                                 flat_rows(w.lse),
                                 dsum,
                                 flat(g.dq, cf.q_heads_major, H),
                                 flat(g.dk, cf.kv_heads_major, HK),
                                 flat(g.dv, cf.kv_heads_major, HK)};
  if (atomics) tensors.push_back(flat(acc, cf.q_heads_major, H));
  std::vector<Kernel::Arg> args(tensors.begin(), tensors.end());
  if (cf.varlen) {
    args.push_back(*opt.cu_seqlens_q);
    args.push_back(*opt.cu_seqlens_k);
  }
  args.insert(args.end(), {Kernel::Arg(B), Kernel::Arg(Sq), Kernel::Arg(Sk)});
  const BwdConfig bc{.c = cf, .deterministic = !atomics};
  if (!atomics) {
    kernel_for("attention_bwd_dq", bc, d, dq_kernel).launch(args, loc);
    kernel_for("attention_bwd_dkdv", bc, d, dkdv_kernel).launch(args, loc);
    return g;
  }
  kernel_for("attention_bwd_dsum", bc, d, dsum_kernel).launch(args, loc);
  kernel_for("attention_bwd", bc, d, dkdv_kernel).launch(args, loc);
  // dq: the accumulator's storage converted to q's dtype.
  const bool plain = cf.varlen || cf.q_heads_major;
  Tensor dq = ops::cast(plain ? acc : acc.transpose(1, 2), q.dtype(), {}, loc);
  g.dq = plain ? dq : dq.transpose(1, 2);
  return g;
}

}  // namespace tx::ops
