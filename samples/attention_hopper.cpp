// Attention forward on Hopper, O = softmax(Q K^T * scale) V, written with tile
// primitives only: the FlashAttention-3 algorithm.
//
// Q and O are (batch, seq_q, heads, head_dim), K and V (batch, seq_k,
// kv_heads, head_dim), bf16 or f16; kv_heads may divide heads (grouped-query
// attention: query head h reads K/V head h / (heads / kv_heads)). Each CTA
// takes 128 (or 192) query rows of one head at a time -- a persistent loop over (row
// block, head) tiles, causal row blocks in mirrored pairs of equal work -- and streams the
// head's K and V through shared memory in blocks of BN rows.
//
// Warp specialization: warpgroup 0 produces. It gives registers back, loads
// the tile's Q once, and K and V blocks into two rings of shared stages, all
// by TMA completing on mbarriers. Warpgroups 1 and 2 consume, 64 query rows
// each, keeping the running row max m and row sum l of the online softmax:
//   S = Q K^T                     wgmma from shared memory, f32 in registers
//   S = -inf past seq_k and above the diagonal (only in the blocks that need it)
//   m' = max(m, rowmax(S))        a reduction along the accumulator's rows
//   P = exp2(S c - m' c)          c = scale * log2(e): one FMA and EX2 a score
//   l = l alpha + rowsum(P)       alpha = exp2((m - m') c)
//   O = O alpha + P V             P rounded to bf16 in registers: wgmma's A
// The softmax of block j overlaps the tensor cores' work: S_{j+1} = Q K_{j+1}^T
// and O += P_j V_j are issued before it and waited for after. Last, O / l
// and the log-sum-exp m scale + ln(l) (the backward pass reads it).
//
// On the CPU (--device=host) the same kernel runs through the host JIT with
// every thread as a fiber, the copies synchronous and the MMAs as FMA loops.
// The T::profile regions (producer wait / load, consumer wait, softmax,
// epilogue) vanish unless profiling is on (TX_PROFILE=1, docs/profiling.md).
#include <cmath>
#include <numbers>

#include "sample_main.hpp"

using namespace tx;

struct AttentionShape {
  std::int64_t batch = 1, heads = 1, kv_heads = 1, seq_q = 1, seq_k = 1, head_dim = 128;
  bool causal = false;        // mask key j > query i + diagonal
  bool bottom_right = false;  // the diagonal ends at the last key (diagonal = seq_k - seq_q)
  double scale = 0;           // 0: 1 / sqrt(head_dim)
};
struct AttentionTiling {
  std::int64_t bn = 128, stages = 2, ctas = 132;
  // The consumers take turns issuing their MMAs (named barriers around each
  // issue, FA3's pingpong). Measured on an H100 it did not pay in this kernel
  // (docs/attention.md), so it is off unless asked for.
  bool pingpong = false;
  // Causal: each CTA takes a row block and its mirror image back to back
  // (equal work per pair), pairs head by head, so the heads in flight keep
  // their K and V in L2 (T::tile_scheduler's pairs). Measured on an H200:
  // 1.03-1.25x rows longest-first across all heads (the order with false).
  bool causal_pairs = true;
  // Consumer warpgroups, 64 query rows each: row blocks of 64 x consumers.
  // Three (FA3's 192-row tiles at D 64) keep more softmax in flight per SM
  // beside MMAs that are short at D 64; each consumer thread then has 160
  // registers (four warpgroups share the register file), so D 64 only, and
  // key blocks of at most 128 (112 when causal: ptxas spills the masked
  // consumer at 128).
  std::int64_t consumers = 2;
  // Across tiles: a consumer issues the next tile's first S = Q K^T right
  // behind its last P V (its waits for Q and K and its MMA overlap that P V)
  // and only then waits for both and runs the epilogue. Host-tested and
  // checked; not yet timed on a GPU, so off unless asked for.
  bool overlap_tiles = false;
};

PrimFunc attention_hopper(AttentionShape p, DType t = bf16, AttentionTiling c = {}) {
  const std::int64_t D = p.head_dim, NC = c.consumers, BM = 64 * NC, BN = c.bn, STAGES = c.stages;
  if (NC != 2 && !(NC == 3 && D <= 64 && !c.pingpong))
    fail("attention_hopper", "consumers", {},
         std::to_string(NC) + " consumer warpgroups: 2, or 3 at head_dim <= 64 without pingpong " +
             "(160 registers a thread hold no larger tile)");
  if (c.overlap_tiles && c.pingpong)
    fail("attention_hopper", "overlap_tiles", {},
         "not with pingpong (the next tile's first MMA would be issued out of turn)");
  const std::int64_t NB = (p.seq_k + BN - 1) / BN, group = p.heads / p.kv_heads;
  const std::int64_t diagonal = p.bottom_right ? p.seq_k - p.seq_q : 0;
  const double scale = p.scale > 0 ? p.scale : 1.0 / std::sqrt(static_cast<double>(D));
  const double c2 = scale * std::numbers::log2e;  // exp(x scale) = exp2(x c2)
  const auto sched = T::tile_scheduler({.tiles_m = (p.seq_q + BM - 1) / BM,
                                        .tiles_n = p.batch * p.heads,
                                        // causal: pairs head by head (or longest first)
                                        .group = p.causal ? 1 : (p.seq_q + BM - 1) / BM,
                                        .ctas = c.ctas,
                                        .m_descending = p.causal,
                                        .pairs = p.causal && c.causal_pairs});
  return T::prim_func("attention_hopper_d" + std::to_string(D), [&](Handle q_ptr, Handle k_ptr,
                                                                    Handle v_ptr, Handle o_ptr,
                                                                    Handle lse_ptr) {
    auto Q = T::match_buffer(q_ptr, {p.batch, p.seq_q, p.heads, D}, t);
    auto K = T::match_buffer(k_ptr, {p.batch, p.seq_k, p.kv_heads, D}, t);
    auto V = T::match_buffer(v_ptr, {p.batch, p.seq_k, p.kv_heads, D}, t);
    auto O = T::match_buffer(o_ptr, {p.batch, p.seq_q, p.heads, D}, t);
    auto LSE = T::match_buffer(lse_ptr, {p.batch, p.heads, p.seq_q}, f32);
    T::device_entry();
    auto cta = T::cta_id({sched.ctas()});
    auto wg = T::warpgroup_id({static_cast<int>(NC) + 1});
    auto tid = T::thread_id_in_wg({128});
    auto Qs = T::alloc_buffer({BM, D}, t, scope::shared, layouts::swizzled_tiles({BM, D}, t));
    auto Ks = T::alloc_buffer({STAGES, BN, D}, t, scope::shared,
                              layouts::swizzled_tiles({STAGES, BN, D}, t));
    auto Vs = T::alloc_buffer({STAGES, BN, D}, t, scope::shared,
                              layouts::swizzled_tiles({STAGES, BN, D}, t));
    auto qpipe = T::pipeline({.stages = 1, .consumer_arrivals = static_cast<int>(NC)});
    auto kpipe = T::pipeline(
        {.stages = static_cast<int>(STAGES), .consumer_arrivals = static_cast<int>(NC)});
    auto vpipe = T::pipeline(
        {.stages = static_cast<int>(STAGES), .consumer_arrivals = static_cast<int>(NC)});
    // The pipelines' positions, the same counts on both sides: key blocks so
    // far (K and V) and tiles so far (Q; a round may have no tile).
    auto kv = T::alloc_buffer({2}, i32, scope::local);
    kv(0) = 0;
    kv(1) = 0;
    // One tile: row block m0 of head h (batch b), and its key blocks [0, n_end).
    auto tile_of = [&](Var r) {
      auto [valid, mb, bh] = sched.tile(cta, r);
      auto m0 = T::let(mb * BM), b = T::let(bh / p.heads), h = T::let(bh % p.heads);
      auto n_end = T::let(p.causal ? max(min(ceildiv(m0 + BM + diagonal, BN), NB), 0)
                                   : Expr(static_cast<int>(NB)));
      return std::tuple{valid, m0, b, h, n_end};
    };
    T::if_(wg == 0,
           [&] {  // the producer
             T::cuda::decrease_registers(24);
             for (Var r : T::serial(sched.rounds(), "r")) {
               auto [valid, m0, b, h, n_end] = tile_of(r);
               T::if_(valid, [&] {
                 auto hk = T::let(h / group), qi = T::let(kv(1));
                 qpipe.producer_acquire(qi);
                 Tx::warpgroup::copy_async(Qs,
                                           Q[region(span(b, 1), span(m0, BM), span(h, 1), {0, D})],
                                           {.barrier = qpipe.full(qi), .partial = true});
                 T::if_(tid == 0, [&] { qpipe.producer_commit(qi); });
                 for (Var j : T::serial(n_end, "j")) {
                   auto it = T::let(kv(0) + j), s = T::let(kpipe.stage(it));
                   auto kv_block = region(span(b, 1), span(j * BN, BN), span(hk, 1), {0, D});
                   T::profile("producer wait", [&] { kpipe.producer_acquire(it); });
                   T::profile("producer load", [&] {
                     Tx::warpgroup::copy_async(Ks[region(span(s, 1), {0, BN}, {0, D})], K[kv_block],
                                               {.barrier = kpipe.full(it), .partial = true});
                     T::if_(tid == 0, [&] { kpipe.producer_commit(it); });
                   });
                   T::profile("producer wait", [&] { vpipe.producer_acquire(it); });
                   T::profile("producer load", [&] {
                     Tx::warpgroup::copy_async(Vs[region(span(s, 1), {0, BN}, {0, D})], V[kv_block],
                                               {.barrier = vpipe.full(it), .partial = true});
                     T::if_(tid == 0, [&] { vpipe.producer_commit(it); });
                   });
                 }
                 kv(0) = kv(0) + n_end;
                 kv(1) = kv(1) + 1;
               });
             }
           })
        .else_([&] {  // the consumers: 64 query rows each
          T::cuda::increase_registers(NC == 2 ? 240 : 160);
          auto S = T::alloc_buffer({64, BN}, f32, scope::local, frag::wgmma_c(64, BN));
          auto P = T::alloc_buffer({64, BN}, t, scope::local, frag::wgmma_a(64, BN, t));
          auto Oacc = T::alloc_buffer({64, D}, f32, scope::local, frag::wgmma_c(64, D));
          auto row = [&](const char* name) {
            return T::alloc_buffer({64, 1}, f32, scope::local, frag::wgmma_row(64), name);
          };
          auto m = row("m"), l = row("l"), m_new = row("m_new"), alpha = row("alpha");
          auto row0 = T::let(max(wg - 1, 0) * 64);  // wg >= 1 here
          auto Qw = Qs[region(span(row0, 64), {0, D})];
          auto K_at = [&](Expr it) {
            return Ks[region(span(kpipe.stage(it), 1), {0, BN}, {0, D})];
          };
          auto V_at = [&](Expr it) {
            return Vs[region(span(vpipe.stage(it), 1), {0, BN}, {0, D})];
          };
          auto release = [&](const T::Pipeline& pipe, Expr it) {
            T::if_(tid == 0, [&] { pipe.consumer_release(it); });
          };
          // Pingpong: the two consumers issue their MMAs in turns, so that one's
          // softmax runs while the tensor cores work for the other.
          auto turn = T::named_barriers({.count = 2, .threads = 256});
          auto me = T::let(max(wg - 1, 0));
          auto my_turn = [&] {
            if (c.pingpong) turn.sync(me);
          };
          auto their_turn = [&] {
            if (c.pingpong) turn.arrive(1 - me);
          };
          if (c.pingpong) T::if_(me == 1, [&] { turn.arrive(0); });  // consumer 0 starts
          // overlap_tiles: 1 when this tile's first S was computed at the end
          // of the previous tile (its Q and first key block waited for).
          TileBuffer ahead;
          if (c.overlap_tiles) {
            ahead = T::alloc_buffer({1}, i32, scope::local, std::nullopt, "ahead");
            ahead(0) = 0;
          }
          for (Var r : T::serial(sched.rounds(), "r")) {
            auto [valid, m0, b, h, n_end] = tile_of(r);
            T::if_(valid, [&] {
              // Key blocks from n_full on cross the diagonal or the end of the keys.
              auto n_full = T::let(p.causal ? min(floordiv(m0 + diagonal + 1, BN), p.seq_k / BN)
                                            : Expr(static_cast<int>(p.seq_k / BN)));
              // S = Q K_j^T masked where needed, then the online softmax's
              // statistics: m' and alpha, P = exp2(S c - m' c) in S, the new m.
              auto softmax = [&](Var j) {
                T::if_(j >= n_full, [&] {
                  auto first_row = T::let(m0 + row0 + diagonal);
                  Tx::warpgroup::fill(S, -INFINITY, {.where = [&](Expr i, Expr k) -> Expr {
                                        Expr past_end = j * BN + k >= p.seq_k;
                                        if (!p.causal) return past_end;
                                        return past_end || j * BN + k > first_row + i;
                                      }});
                });
                Tx::warpgroup::max(m_new, S);
                Tx::warpgroup::maximum(m_new, m_new, m);
                Tx::warpgroup::sub(alpha, m, m_new);
                Tx::warpgroup::exp2(alpha, alpha, {.scale = c2});
                Tx::warpgroup::maximum(m, m, m_new);
                Tx::warpgroup::mul(m_new, m, -c2);
                Tx::warpgroup::exp2(S, S, {.scale = c2, .bias = m_new.all()});
                Tx::warpgroup::mul(l, l, alpha);
                Tx::warpgroup::sum(l, S, {.accum = true});
              };
              auto qi = T::let(kv(1));
              if (!c.overlap_tiles)
                qpipe.consumer_wait(qi);
              else  // with ahead, waited for at the end of the last tile
                T::if_(ahead(0) == 0, [&] { qpipe.consumer_wait(qi); });
              Tx::warpgroup::fill(Oacc, 0.0f);
              // m starts below every score but finite: a row whose keys are all
              // masked keeps alpha = exp2(0) (with -inf it would be -inf + inf = NaN).
              Tx::warpgroup::fill(m, -1e30f);
              Tx::warpgroup::fill(l, 0.0f);
              T::if_(n_end > 0, [&] {
                auto it0 = T::let(kv(0));
                auto first_s = [&] {
                  kpipe.consumer_wait(it0);
                  my_turn();
                  Tx::warpgroup::gemm(S, Qw, K_at(it0), {.pending = 1, .transpose_b = true});
                  their_turn();
                  T::cuda::wgmma_wait(0, S);
                };
                // (With overlap_tiles every path meets the next with no MMA
                // in flight: ptxas serializes a kernel's wgmma where paths
                // with different pending groups meet.)
                if (!c.overlap_tiles)
                  first_s();
                else  // with ahead, computed at the end of the last tile
                  T::if_(ahead(0) == 0, first_s);
                release(kpipe, it0);
                softmax(T::let(0, "j0"));
                Tx::warpgroup::cast(P, S);
                for (Var j : T::serial(1, n_end - 1, "j")) {
                  auto it = T::let(kv(0) + j);
                  T::profile("consumer wait", [&] {
                    kpipe.consumer_wait(it);
                    vpipe.consumer_wait(it - 1);
                  });
                  my_turn();
                  Tx::warpgroup::gemm(S, Qw, K_at(it), {.pending = 1, .transpose_b = true});
                  Tx::warpgroup::mul(Oacc, Oacc, alpha);  // to the last max, while S runs
                  Tx::warpgroup::gemm(Oacc, P, V_at(it - 1), {.accum = true, .pending = 2});
                  their_turn();
                  T::cuda::wgmma_wait(1, S);  // S is done; P V_{j-1} may still run
                  release(kpipe, it);
                  T::profile("softmax", [&] { softmax(j); });
                  // P V_{j-1} done -- after the softmax (l is its last result).
                  T::cuda::wgmma_wait(0, Oacc, {.after = l});
                  release(vpipe, it - 1);
                  Tx::warpgroup::cast(P, S);
                }
                // Q is read by no more MMA: the producer may load the next tile's.
                release(qpipe, qi);
                auto last = T::let(kv(0) + n_end - 1);
                vpipe.consumer_wait(last);
                my_turn();
                Tx::warpgroup::mul(Oacc, Oacc, alpha);
                Tx::warpgroup::gemm(Oacc, P, V_at(last), {.accum = true, .pending = 1});
                their_turn();
                if (!c.overlap_tiles) {
                  T::cuda::wgmma_wait(0, Oacc);
                } else {
                  // The next tile's first S = Q K^T goes in behind P V (S is
                  // free: P holds this block's scores): its waits for Q and K
                  // and its MMA overlap the last P V. Both are waited for
                  // before the epilogue, as on the other path.
                  auto [next_valid, next_m0, next_b, next_h, next_n_end] =
                      tile_of(T::let(r + 1, "next_r"));
                  auto go = T::let(r + 1 < sched.rounds() && next_valid && next_n_end > 0);
                  T::if_(go, [&] {
                    qpipe.consumer_wait(qi + 1);
                    kpipe.consumer_wait(last + 1);
                    Tx::warpgroup::gemm(S, Qw, K_at(last + 1), {.pending = 2, .transpose_b = true});
                    T::cuda::wgmma_wait(0, Oacc);
                    T::cuda::wgmma_wait(0, S);  // (fences S's registers too)
                    ahead(0) = 1;
                  }).else_([&] {
                    T::cuda::wgmma_wait(0, Oacc);
                    ahead(0) = 0;
                  });
                }
                release(vpipe, last);
              }).else_([&] {
                release(qpipe, qi);
                if (c.overlap_tiles) ahead(0) = 0;
              });
              kv(0) = kv(0) + n_end;
              kv(1) = kv(1) + 1;
              // Epilogue: lse = (m c + log2 l) ln 2 (-inf for a row with no key),
              // O = O / l (0 for such a row, where O and l are 0).
              auto lse = row("lse");
              Tx::warpgroup::log2(lse, l);
              Tx::warpgroup::fma(lse, m, c2, lse);
              Tx::warpgroup::mul(lse, lse, std::numbers::ln2);
              Tx::warpgroup::maximum(l, l, 1e-30f);
              Tx::warpgroup::reciprocal(l, l);
              Tx::warpgroup::mul(Oacc, Oacc, l);
              auto Oout = T::alloc_buffer({64, D}, t, scope::local, frag::wgmma_c(64, D));
              T::profile("epilogue", [&] {
                Tx::warpgroup::cast(Oout, Oacc);
                Tx::warpgroup::copy(O[region(span(b, 1), span(m0 + row0, 64), span(h, 1), {0, D})],
                                    Oout, {.partial = true});
                Tx::warpgroup::copy(LSE[region(span(b, 1), span(h, 1), span(m0 + row0, 64))], lse,
                                    {.partial = true});
              });
            });
          }
        });
  });
}

#ifndef TX_SAMPLE_NO_MAIN
int main(int argc, char** argv) {
  const AttentionShape p{.batch = 2,
                         .heads = 4,
                         .kv_heads = 2,
                         .seq_q = 200,
                         .seq_k = 300,
                         .head_dim = 64,
                         .causal = true};
  const std::int64_t D = p.head_dim;
  // Outputs of 16 bits: exp2 may be the hardware's (ex2.approx.ftz).
  return sample::run(
      argc, argv, attention_hopper(p),
      [&](const Kernel& k) {
        auto q = sample::random(p.batch * p.seq_q * p.heads * D, bf16, -2.0, 2.0);
        auto kk = sample::random(p.batch * p.seq_k * p.kv_heads * D, bf16, -2.0, 2.0);
        auto v = sample::random(p.batch * p.seq_k * p.kv_heads * D, bf16, -2.0, 2.0);
        Tensor Qt = Tensor::from_doubles(q, {p.batch, p.seq_q, p.heads, D}, bf16, k.device());
        Tensor Kt = Tensor::from_doubles(kk, {p.batch, p.seq_k, p.kv_heads, D}, bf16, k.device());
        Tensor Vt = Tensor::from_doubles(v, {p.batch, p.seq_k, p.kv_heads, D}, bf16, k.device());
        Tensor Ot = Tensor::empty({p.batch, p.seq_q, p.heads, D}, bf16, k.device());
        Tensor Lt = Tensor::empty({p.batch, p.heads, p.seq_q}, f32, k.device());
        Ot.fill_bits(0x7fc0);  // NaN until written
        Lt.fill_bits(0x7fc00000);
        k(Qt, Kt, Vt, Ot, Lt);
        // float64 reference: softmax over the keys j <= i of each query row.
        const double scale = 1.0 / std::sqrt(static_cast<double>(D));
        std::vector<double> want(Ot.numel());
        for (std::int64_t b = 0; b < p.batch; ++b)
          for (std::int64_t h = 0; h < p.heads; ++h)
            for (std::int64_t i = 0; i < p.seq_q; ++i) {
              const std::int64_t hk = h / (p.heads / p.kv_heads), keys = std::min(p.seq_k, i + 1);
              std::vector<double> s(keys);
              double mx = -INFINITY, sum = 0;
              for (std::int64_t j = 0; j < keys; ++j) {
                double dot = 0;
                for (std::int64_t d = 0; d < D; ++d)
                  dot += q[((b * p.seq_q + i) * p.heads + h) * D + d] *
                         kk[((b * p.seq_k + j) * p.kv_heads + hk) * D + d];
                s[j] = dot * scale;
                mx = std::max(mx, s[j]);
              }
              for (auto& x : s) sum += (x = std::exp(x - mx));
              for (std::int64_t d = 0; d < D; ++d) {
                double o = 0;
                for (std::int64_t j = 0; j < keys; ++j)
                  o += s[j] * v[((b * p.seq_k + j) * p.kv_heads + hk) * D + d];
                want[((b * p.seq_q + i) * p.heads + h) * D + d] = o / sum;
              }
            }
        // Bound: P rounded to bf16 (2^-9 relative) and O once (2^-9), over |v| <= 2.
        return sample::max_error(Ot.to_doubles(), want, 2.0 * 0x1p-8, 0x1p-8);
      },
      {.approx_math = true});
}
#endif
