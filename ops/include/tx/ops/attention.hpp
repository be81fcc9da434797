// Scaled dot-product attention, O = softmax(Q K^T * scale + mask) V, with
// PyTorch's semantics (torch.nn.functional.scaled_dot_product_attention):
//
//   auto [o, lse] = tx::ops::attention(q, k, v, {.causal = true});
//
// q: (batch, heads, seq_q, head_dim); k, v: (batch, kv_heads, seq_k,
// head_dim), kv_heads dividing heads (grouped-query / multi-query attention:
// query head h reads K/V head h / (heads / kv_heads)). Stored either as
// (batch, heads, seq, head_dim) or as (batch, seq, heads, head_dim) -- the
// layout the flash kernels keep, seen through strides as q.transpose(1, 2)
// -- for q and for k, v (each pair alike); another strided view is copied
// to one of them first (attention_plan says so). head_dim 64, 128 or 256
// (others: a tx error); bf16 or f16, the same for all three.
//
// Returns O (the dtype of q, laid out as q: a (batch, heads, seq_q,
// head_dim) view) and the log-sum-exp of each row's scaled scores, f32
// (batch, heads, seq_q), which the backward pass reads.
//
// Causal masking (.causal): query i attends to keys j <= i (PyTorch's
// is_causal: the mask's diagonal starts at the top left, also when seq_q !=
// seq_k); with .bottom_right, to j <= i + seq_k - seq_q (FlashAttention's
// convention for seq_q != seq_k: the last query sees every key). A row that
// sees no key (bottom-right with seq_q > seq_k, or seq_k = 0) gives O = 0
// and lse = -inf, as FlashAttention returns. NaN in the inputs propagates:
// a NaN in a query row makes that row of O NaN, a NaN in a key or value
// makes every row that sees it NaN (PyTorch's result for the same inputs).
//
// Variable-length batches (.cu_seqlens_q / .cu_seqlens_k): q is (total_q,
// heads, head_dim) and k, v (total_k, kv_heads, head_dim), the sequences
// packed one after another; cu_seqlens_* are int32 (batch + 1) tensors on
// the device with the cumulative offsets (0, len0, len0 + len1, ...), as
// serving engines pass them; max_seqlen_* bound the lengths (the grid).
// Then O is (total_q, heads, head_dim) and lse (heads, total_q).
//
// Kernels (ops/src/attention.cpp): on sm_90 (H100 / H200) the warp-
// specialized FlashAttention-3 kernel of samples/attention_hopper.cpp (TMA,
// mbarrier rings for K and V, two consumer warpgroups with wgmma, the online
// softmax in registers, P as wgmma's register A), generalized over layouts
// and variable lengths; on the host the same kernel through the host JIT
// (fibers). One kernel per (head_dim, heads, kv_heads, dtype, causal,
// layouts, varlen, device) serves every batch size and sequence length:
// the token counts are launch-time extents, not compile-time constants.
// Errors (tx.ops.attention, at the caller's line): ranks, shapes, dtypes,
// head dims, heads that do not divide, devices, cu_seqlens of the wrong
// type or size, GPUs other than sm_90.
#pragma once

#include <cstdint>
#include <source_location>
#include <string>
#include <vector>

#include "tx/runtime/tensor.hpp"

namespace tx::ops {

// How attention_backward sums dQ over the key blocks:
//   deterministic  a dq kernel of its own (S and dP computed again there):
//                  each element summed by one thread in a fixed order, the
//                  same bits on every run;
//   atomics        one kernel for dk, dv and dq, whose CTAs add their dQ
//                  tiles into an f32 buffer by TMA reductions (additions in
//                  whatever order they arrive);
//   automatic      atomics where they measured faster (head_dim 128 with
//                  keys from 1024), else deterministic.
enum class DqSum { automatic, deterministic, atomics };

struct AttentionOptions {
  bool causal = false;
  bool bottom_right = false;  // the causal diagonal ends at the last key (see above)
  double scale = 0;           // 0: 1 / sqrt(head_dim)
  // Variable-length batches: packed q, k, v and their offsets (see above).
  const Tensor* cu_seqlens_q = nullptr;
  const Tensor* cu_seqlens_k = nullptr;
  std::int64_t max_seqlen_q = 0;
  std::int64_t max_seqlen_k = 0;
  // Prefill over a paged KV cache (the layout of tx::ops::paged_attention,
  // so one cache serves prefill and decode): k and v are the caches
  // (num_pages, page_size, kv_heads, head_dim), page_size 16 / 32 / 64;
  // block_table int32 (batch, max_pages) addresses sequence b's pages and
  // seqused_k int32 (batch) holds its key count (cut to the table's width;
  // a page id outside the cache reads as zeros). q is packed (total_q,
  // heads, head_dim) with cu_seqlens_q and max_seqlen_q; cu_seqlens_k is not
  // given. Causal with .bottom_right puts the queries at the end of the keys
  // (the new tokens of a chunked prefill, already in the cache).
  const Tensor* block_table = nullptr;
  const Tensor* seqused_k = nullptr;
  // attention_backward only: how dQ is summed over the key blocks (see
  // attention_backward). DqSum::deterministic for the same bits every run.
  DqSum dq_sum = DqSum::automatic;
};

struct AttentionResult {
  Tensor out;
  Tensor lse;
};

AttentionResult attention(const Tensor& q, const Tensor& k, const Tensor& v,
                          const AttentionOptions& opt = {},
                          std::source_location loc = std::source_location::current());

// What attention(q, k, v, opt) runs, in words ("wgmma, key blocks of 128,
// q (batch, seq, heads, dim), k/v (batch, heads, seq, dim)" or "host ..."),
// and any copy it makes first; without running it.
std::string attention_plan(const Tensor& q, const Tensor& k, const Tensor& v,
                           const AttentionOptions& opt = {});

// The backward pass of attention: given dout (the gradient of O) and the
// forward's q, k, v, out and lse (as attention returned them, with the same
// options), the gradients of q, k and v:
//
//   auto [o, lse] = tx::ops::attention(q, k, v, opt);
//   auto [dq, dk, dv] = tx::ops::attention_backward(dout, q, k, v, o, lse, opt);
//
// dq is laid out as q, dk and dv as k and v; dout and out are read in q's
// layout (another strided view is copied first), lse as attention returns it
// ((batch, heads, seq_q), or (heads, total_q) for variable lengths). With
// grouped-query attention dk and dv sum over the query heads of each K/V
// head. Fixed-length and variable-length batches (not yet a paged cache),
// causal both ways, head_dim 64 or 128 (256: a tx error for now).
//
// Kernels (ops/src/attention_backward.cpp), in order on q's stream; each
// gradient element is summed by one thread in a fixed order, so the result
// is the same bits on every run (DqSum::deterministic):
//   1. dq: a CTA per 128 query rows of a head (as the forward: a producer
//      warpgroup filling TMA rings, two consumers of 64 rows) -- D =
//      rowsum(dout * out) for its rows, then over the key blocks S = Q K^T
//      and dP = dO V^T on wgmma, P = exp(S * scale - lse) and dS = P * (dP -
//      D) in registers, dQ += dS K with dS as wgmma's register operand;
//   2. dk/dv: a CTA per 128 keys of a K/V head (64 per consumer), over the
//      query blocks of every query head of its group -- S, dP, P and dS
//      again, P and dS stored to shared memory, dV += P^T dO and dK += dS^T
//      Q (wgmma reading the tiles transposed); grouped-query heads summed
//      in registers.
// S and dP are computed in both: 7 matrix products per block pair, not 5.
// With DqSum::atomics one kernel does all five after a D pre-pass: each
// consumer stages its dQ = dS K tile in shared memory and the TMA adds it
// into an f32 buffer (then converted to q's dtype) -- not the same bits
// every run. DqSum::automatic (the default) takes it at head_dim 128 from
// 1k keys (there it measured 1.03-1.27x faster on an H200),
// the deterministic pair elsewhere; bench/attention_backward times both
// (docs/attention.md). attention_backward_plan says which runs.
struct AttentionGrads {
  Tensor dq, dk, dv;
};

AttentionGrads attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k,
                                  const Tensor& v, const Tensor& out, const Tensor& lse,
                                  const AttentionOptions& opt = {},
                                  std::source_location loc = std::source_location::current());

// What attention_backward runs, in words, and the copies it makes first.
std::string attention_backward_plan(const Tensor& dout, const Tensor& q, const Tensor& k,
                                    const Tensor& v, const Tensor& out, const Tensor& lse,
                                    const AttentionOptions& opt = {});

namespace detail {
// Attention kernels this process has built (compiled from the DSL), for
// tests that check a new shape reuses one.
std::uint64_t attention_kernels_built();
// Tests: dense calls at head_dim 64 take `consumers` (2 or 3) consumer
// warpgroups whatever their lengths, so that small shapes exercise the
// 192-row form; 0 restores the measured rule (three from 2k keys, 8k when
// causal). Process-wide.
void force_attention_consumers(std::int64_t consumers);
// The CUDA of ops::attention's kernel for sm_90a (132 CTAs), as a GPU would
// get it, without one: for tests and ptxas. consumers: 2, or 3 (head_dim 64,
// the form long dense calls take there).
std::string attention_cuda(std::int64_t head_dim, std::int64_t heads, std::int64_t kv_heads,
                           DType t, bool causal, bool varlen, std::int64_t consumers = 2);
// Attention backward kernels this process has built.
std::uint64_t attention_backward_kernels_built();
// The CUDA of attention_backward's kernels for sm_90a -- the DqSum::atomics
// pair (D pre-pass, fused kernel), then the default pair (dq, dk/dv) --
// as a GPU would get them (132 CTAs), without one: for tests and ptxas.
std::vector<std::string> attention_backward_cuda(std::int64_t head_dim, std::int64_t heads,
                                                 std::int64_t kv_heads, DType t, bool causal,
                                                 bool varlen);
}  // namespace detail

}  // namespace tx::ops
