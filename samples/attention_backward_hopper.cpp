// Attention backward on Hopper, written with tile primitives only: the
// gradients dQ, dK, dV of O = softmax(Q K^T * scale) V, FlashAttention-2's
// algorithm in one warp-specialized kernel. With P = exp(S * scale - lse),
// S = Q K^T and D = rowsum(dO * O) (the forward's lse and D come in):
//   dV = P^T dO    dP = dO V^T    dS = P * (dP - D)
//   dK = scale dS^T Q              dQ = scale dS K
//
// Q, dO and dQ are (batch, seq_q, heads, 64), K, V, dK, dV (batch, seq_k,
// heads, 64); dQ is float32 and starts at zero. Each CTA owns 128 keys of
// one head and walks the query blocks that see them (causal: from the
// block's diagonal on), 64 rows a step. Warpgroup 0 produces: K and V once,
// then each step's Q and dO rows, by TMA on mbarriers. Warpgroups 1 and 2
// consume, 64 keys each, and keep dK and dV in registers:
//   S = Q K^T, dP = dO V^T          wgmma from shared memory
//   P = exp2(S c - lse log2 e)      c = scale log2(e); masked scores -inf
//   dS = P * (dP - D)               per-row D broadcast along the row
//   P, dS -> shared memory          read back transposed by the next MMAs:
//   dV += P^T dO, dK += dS^T Q      wgmma's A operand M-major (transposed())
//   dQ += scale dS K                dS from registers; rows summed across
//                                   CTAs by atomic_add (float atomics)
// The library's version (ops/src/attention_backward.cpp) adds layouts,
// grouped-query heads, variable lengths, head_dim 128 and a deterministic
// two-kernel path; this one shows the algorithm.
//
// On the CPU (--device=host) the same kernel runs through the host JIT with
// every thread as a fiber.
#include <algorithm>
#include <cmath>
#include <numbers>

#include "sample_main.hpp"

using namespace tx;

struct BackwardShape {
  std::int64_t batch = 1, heads = 1, seq_q = 1, seq_k = 1;
  bool causal = false;  // query i sees keys j <= i
};

PrimFunc attention_backward_hopper(BackwardShape p, DType t = bf16) {
  const std::int64_t D = 64, BK = 128, BQ = 64, STAGES = 2;
  const std::int64_t NB = (p.seq_k + BK - 1) / BK, NQ = (p.seq_q + BQ - 1) / BQ;
  const double scale = 1.0 / std::sqrt(static_cast<double>(D)), c2 = scale * std::numbers::log2e;
  return T::prim_func("attention_backward_hopper", [&](Handle q_ptr, Handle k_ptr, Handle v_ptr,
                                                       Handle do_ptr, Handle lse_ptr, Handle d_ptr,
                                                       Handle dq_ptr, Handle dk_ptr,
                                                       Handle dv_ptr) {
    auto Q = T::match_buffer(q_ptr, {p.batch, p.seq_q, p.heads, D}, t);
    auto K = T::match_buffer(k_ptr, {p.batch, p.seq_k, p.heads, D}, t);
    auto V = T::match_buffer(v_ptr, {p.batch, p.seq_k, p.heads, D}, t);
    auto dO = T::match_buffer(do_ptr, {p.batch, p.seq_q, p.heads, D}, t);
    auto LSE = T::match_buffer(lse_ptr, {p.batch, p.heads, p.seq_q}, f32);
    auto Dsum = T::match_buffer(d_ptr, {p.batch, p.heads, p.seq_q}, f32);
    auto dQ = T::match_buffer(dq_ptr, {p.batch, p.seq_q, p.heads, D}, f32);
    auto dK = T::match_buffer(dk_ptr, {p.batch, p.seq_k, p.heads, D}, t);
    auto dV = T::match_buffer(dv_ptr, {p.batch, p.seq_k, p.heads, D}, t);
    T::device_entry();
    auto cta = T::cta_id({p.batch * p.heads * NB});
    auto wg = T::warpgroup_id({3});
    auto tid = T::thread_id_in_wg({128});
    auto b = T::let(cta / (p.heads * NB), "b"), h = T::let(cta / NB % p.heads, "h");
    auto n0 = T::let(cta % NB * BK, "n0");
    // The first query block that sees a key of this block.
    auto m_begin = T::let(p.causal ? Expr(n0 / BQ) : Expr(0), "m_begin");
    auto steps = T::let(NQ - m_begin, "steps");
    auto Ks = T::alloc_buffer({BK, D}, t, scope::shared, layouts::swizzled_tiles({BK, D}, t));
    auto Vs = T::alloc_buffer({BK, D}, t, scope::shared, layouts::swizzled_tiles({BK, D}, t));
    auto Qr = T::alloc_buffer({STAGES, BQ, D}, t, scope::shared,
                              layouts::swizzled_tiles({STAGES, BQ, D}, t));
    auto dOr = T::alloc_buffer({STAGES, BQ, D}, t, scope::shared,
                               layouts::swizzled_tiles({STAGES, BQ, D}, t));
    // (query rows, keys): consumer w's keys are columns [64 w, 64 w + 64).
    auto Ps =
        T::alloc_buffer({BQ, BK}, t, scope::shared, layouts::swizzled_tiles({BQ, BK}, t), "Ps");
    auto dSs =
        T::alloc_buffer({BQ, BK}, t, scope::shared, layouts::swizzled_tiles({BQ, BK}, t), "dSs");
    auto kvpipe = T::pipeline({.stages = 1, .consumer_arrivals = 2});
    auto qpipe = T::pipeline({.stages = static_cast<int>(STAGES), .consumer_arrivals = 2});
    auto rows = [&](const TileBuffer& X, Expr s0, std::int64_t n) {
      return X[region(span(b, 1), span(s0, n), span(h, 1), {0, D})];
    };
    auto stage = [&](const TileBuffer& ring, Expr it) {
      return ring[region(span(qpipe.stage(it), 1), {0, BQ}, {0, D})];
    };
    T::if_(wg == 0,
           [&] {  // the producer
             T::cuda::decrease_registers(24);
             kvpipe.producer_acquire(0);
             Tx::warpgroup::copy_async(Ks, rows(K, n0, BK),
                                       {.barrier = kvpipe.full(0), .partial = true});
             Tx::warpgroup::copy_async(Vs, rows(V, n0, BK),
                                       {.barrier = kvpipe.full(0), .partial = true});
             T::if_(tid == 0, [&] { kvpipe.producer_commit(0); });
             for (Var it : T::serial(steps, "it")) {
               auto m0 = T::let((m_begin + it) * BQ, "m0");
               qpipe.producer_acquire(it);
               Tx::warpgroup::copy_async(stage(Qr, it), rows(Q, m0, BQ),
                                         {.barrier = qpipe.full(it), .partial = true});
               Tx::warpgroup::copy_async(stage(dOr, it), rows(dO, m0, BQ),
                                         {.barrier = qpipe.full(it), .partial = true});
               T::if_(tid == 0, [&] { qpipe.producer_commit(it); });
             }
           })
        .else_([&] {  // the consumers: 64 keys each
          T::cuda::increase_registers(240);
          auto S = T::alloc_buffer({BQ, 64}, f32, scope::local, frag::wgmma_c(BQ, 64));
          auto dP = T::alloc_buffer({BQ, 64}, f32, scope::local, frag::wgmma_c(BQ, 64));
          auto half = T::alloc_buffer({BQ, 64}, t, scope::local, frag::wgmma_c(BQ, 64));
          auto dSa = T::alloc_buffer({BQ, 64}, t, scope::local, frag::wgmma_a(BQ, 64, t));
          auto dKacc = T::alloc_buffer({64, D}, f32, scope::local, frag::wgmma_c(64, D));
          auto dVacc = T::alloc_buffer({64, D}, f32, scope::local, frag::wgmma_c(64, D));
          auto dQacc = T::alloc_buffer({BQ, D}, f32, scope::local, frag::wgmma_c(BQ, D));
          auto row = [&](const char* n) {
            return T::alloc_buffer({BQ, 1}, f32, scope::local, frag::wgmma_row(BQ), n);
          };
          auto nlse = row("nlse"), dsum = row("dsum");
          auto key0 = T::let(max(wg - 1, 0) * 64, "key0");  // this consumer's keys
          auto Kw = Ks[region(span(key0, 64), {0, D})];
          auto Vw = Vs[region(span(key0, 64), {0, D})];
          auto release = [&](const T::Pipeline& pipe, Expr it) {
            T::if_(tid == 0, [&] { pipe.consumer_release(it); });
          };
          Tx::warpgroup::fill(dKacc, 0.0f);
          Tx::warpgroup::fill(dVacc, 0.0f);
          kvpipe.consumer_wait(0);
          for (Var it : T::serial(steps, "it")) {
            auto m0 = T::let((m_begin + it) * BQ, "m0");
            auto per_row = [&](const TileBuffer& X) {
              return X[region(span(b, 1), span(h, 1), span(m0, BQ))];
            };
            // -lse log2(e): the bias of P's exp2; D for dS.
            Tx::warpgroup::copy(nlse, per_row(LSE), {.partial = true});
            Tx::warpgroup::mul(nlse, nlse, -std::numbers::log2e);
            Tx::warpgroup::copy(dsum, per_row(Dsum), {.partial = true});
            qpipe.consumer_wait(it);
            Tx::warpgroup::gemm(S, stage(Qr, it), Kw, {.pending = 1, .transpose_b = true});
            Tx::warpgroup::gemm(dP, stage(dOr, it), Vw, {.transpose_b = true});
            // Keys past seq_k (they would reach dQ), rows past seq_q, and
            // causal keys above the diagonal: P = 0.
            Tx::warpgroup::fill(S, -INFINITY, {.where = [&](Expr i, Expr k) -> Expr {
                                  Expr out = n0 + key0 + k >= p.seq_k || m0 + i >= p.seq_q;
                                  return p.causal ? out || n0 + key0 + k > m0 + i : out;
                                }});
            Tx::warpgroup::exp2(S, S, {.scale = c2, .bias = nlse.all()});  // P
            Tx::warpgroup::sub(dP, dP, dsum);
            Tx::warpgroup::mul(dP, dP, S);  // dS
            // P and dS to shared memory (after the last step's MMAs read them).
            T::cuda::warpgroup_sync();
            Tx::warpgroup::cast(half, S);
            Tx::warpgroup::copy(Ps[region({0, BQ}, span(key0, 64))], half);
            Tx::warpgroup::cast(half, dP);
            Tx::warpgroup::copy(dSs[region({0, BQ}, span(key0, 64))], half);
            T::cuda::fence_proxy_async();
            T::cuda::warpgroup_sync();
            Tx::warpgroup::gemm(dVacc, Ps.transposed()[region(span(key0, 64), {0, BQ})],
                                stage(dOr, it), {.accum = true, .pending = 1});
            Tx::warpgroup::gemm(dKacc, dSs.transposed()[region(span(key0, 64), {0, BQ})],
                                stage(Qr, it), {.accum = true});
            release(qpipe, it);
            // dQ += scale dS K over this consumer's keys; both consumers,
            // and every CTA of the head, add into the same rows.
            Tx::warpgroup::cast(dSa, dP);
            Tx::warpgroup::gemm(dQacc, dSa, Kw);
            Tx::warpgroup::mul(dQacc, dQacc, scale);
            Tx::warpgroup::atomic_add(dQ[region(span(b, 1), span(m0, BQ), span(h, 1), {0, D})],
                                      dQacc, {.partial = true});
          }
          release(kvpipe, 0);
          Tx::warpgroup::mul(dKacc, dKacc, scale);
          auto out = T::alloc_buffer({64, D}, t, scope::local, frag::wgmma_c(64, D));
          Tx::warpgroup::cast(out, dKacc);
          Tx::warpgroup::copy(rows(dK, n0 + key0, 64), out, {.partial = true});
          Tx::warpgroup::cast(out, dVacc);
          Tx::warpgroup::copy(rows(dV, n0 + key0, 64), out, {.partial = true});
        });
  });
}

#ifndef TX_SAMPLE_NO_MAIN
int main(int argc, char** argv) {
  const BackwardShape p{.batch = 2, .heads = 2, .seq_q = 150, .seq_k = 200, .causal = true};
  const std::int64_t D = 64, B = p.batch, H = p.heads, Sq = p.seq_q, Sk = p.seq_k;
  return sample::run(
      argc, argv, attention_backward_hopper(p),
      [&](const Kernel& k) {
        auto q = sample::random(B * Sq * H * D, bf16, -2.0, 2.0);
        auto kk = sample::random(B * Sk * H * D, bf16, -2.0, 2.0);
        auto v = sample::random(B * Sk * H * D, bf16, -1.0, 1.0);
        auto g = sample::random(B * Sq * H * D, bf16, -1.0, 1.0);
        auto at = [&](std::int64_t bb, std::int64_t s, std::int64_t S, std::int64_t hh,
                      std::int64_t d) { return ((bb * S + s) * H + hh) * D + d; };
        // The forward in float64: lse and D = rowsum(dO * O) (the kernel's
        // inputs), then the gradients to check against.
        const double scale = 1.0 / std::sqrt(static_cast<double>(D));
        std::vector<double> lse(B * H * Sq), dsum(B * H * Sq), dq(q.size()), dk(kk.size()),
            dv(v.size());
        for (std::int64_t bb = 0; bb < B; ++bb)
          for (std::int64_t hh = 0; hh < H; ++hh)
            for (std::int64_t i = 0; i < Sq; ++i) {
              const std::int64_t keys = std::min(Sk, i + 1);
              std::vector<double> P(keys), dP(keys);
              double mx = -INFINITY, sum = 0, Di = 0;
              for (std::int64_t j = 0; j < keys; ++j) {
                double s = 0, t = 0;
                for (std::int64_t d = 0; d < D; ++d) {
                  s += q[at(bb, i, Sq, hh, d)] * kk[at(bb, j, Sk, hh, d)];
                  t += g[at(bb, i, Sq, hh, d)] * v[at(bb, j, Sk, hh, d)];
                }
                P[j] = s * scale;
                dP[j] = t;
                mx = std::max(mx, P[j]);
              }
              for (auto& x : P) sum += (x = std::exp(x - mx));
              for (std::int64_t j = 0; j < keys; ++j) Di += (P[j] /= sum) * dP[j];
              lse[(bb * H + hh) * Sq + i] = mx + std::log(sum);
              dsum[(bb * H + hh) * Sq + i] = Di;
              for (std::int64_t j = 0; j < keys; ++j)
                for (std::int64_t d = 0; d < D; ++d) {
                  const double ds = P[j] * (dP[j] - Di);
                  dv[at(bb, j, Sk, hh, d)] += P[j] * g[at(bb, i, Sq, hh, d)];
                  dk[at(bb, j, Sk, hh, d)] += scale * ds * q[at(bb, i, Sq, hh, d)];
                  dq[at(bb, i, Sq, hh, d)] += scale * ds * kk[at(bb, j, Sk, hh, d)];
                }
            }
        const Device dev = k.device();
        Tensor Qt = Tensor::from_doubles(q, {B, Sq, H, D}, bf16, dev);
        Tensor Kt = Tensor::from_doubles(kk, {B, Sk, H, D}, bf16, dev);
        Tensor Vt = Tensor::from_doubles(v, {B, Sk, H, D}, bf16, dev);
        Tensor Gt = Tensor::from_doubles(g, {B, Sq, H, D}, bf16, dev);
        Tensor Lt = Tensor::from_doubles(lse, {B, H, Sq}, f32, dev);
        Tensor Dt = Tensor::from_doubles(dsum, {B, H, Sq}, f32, dev);
        Tensor dQt = Tensor::empty({B, Sq, H, D}, f32, dev);
        Tensor dKt = Tensor::empty({B, Sk, H, D}, bf16, dev);
        Tensor dVt = Tensor::empty({B, Sk, H, D}, bf16, dev);
        dQt.fill_bits(0);       // the CTAs add into it
        dKt.fill_bits(0x7fc0);  // NaN until written
        dVt.fill_bits(0x7fc0);
        k(Qt, Kt, Vt, Gt, Lt, Dt, dQt, dKt, dVt);
        // Bound: P and dS rounded to bf16 (2^-9) before their products, dK and
        // dV once (2^-9): 2^-6 of each gradient's largest element.
        auto err = [](const std::vector<double>& got, const std::vector<double>& want) {
          double top = 0;
          for (double w : want) top = std::max(top, std::fabs(w));
          return sample::max_error(got, want, 0x1p-6 * top, 0x1p-6);
        };
        return std::max(
            {err(dQt.to_doubles(), dq), err(dKt.to_doubles(), dk), err(dVt.to_doubles(), dv)});
      },
      {.approx_math = true});
}
#endif
