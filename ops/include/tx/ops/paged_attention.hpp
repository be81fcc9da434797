// Decode attention over a paged KV cache (vLLM's and FlashInfer's layout),
// and the cache write that fills it:
//
//   tx::ops::reshape_and_cache(k_new, v_new, k_cache, v_cache, slot_mapping);
//   Tensor o = tx::ops::paged_attention(q, k_cache, v_cache, block_table, context_lens);
//
// The cache: k_cache and v_cache are (num_pages, page_size, kv_heads,
// head_dim), page_size 16, 32 or 64 (others: a tx error), bf16 / f16, or fp8
// e4m3 with one scale per tensor (x = stored * k_scale). block_table is int32
// (batch, max_pages): sequence b's token i lives in page block_table[b][i /
// page_size] at row i % page_size. context_lens is int32 (batch): how many
// keys sequence b has, the new tokens included (they are written to the cache
// first, by reshape_and_cache).
//
// q: (batch, q_tokens, heads, head_dim), q_tokens 1 to 8 (speculative
// decoding verifies several tokens per step), bf16 or f16, heads a multiple of
// kv_heads (grouped-query attention: query head h reads K/V head h / (heads /
// kv_heads)); head_dim 64, 128 or 256. Query token t of sequence b is at
// position context_lens[b] - q_tokens + t and attends to the keys at
// positions <= its own (causal among the new tokens, every older key).
// Returns O, (batch, q_tokens, heads, head_dim) in q's dtype.
//
// The lengths are read on the device only (no synchronisation: the calls can
// be captured in a CUDA graph and replayed with new lengths and tables). What
// the kernel does with lengths the host cannot check (documented results,
// never a fault):
// - context_lens[b] <= 0: sequence b sees no key; its rows of O are 0;
// - context_lens[b] > max_pages * page_size: cut to the table's width;
// - a query token whose position is below 0 (context_lens[b] < q_tokens)
//   sees no key: its row of O is 0;
// - a block-table entry outside [0, num_pages): that page reads as zeros
//   (scores of 0 and values of 0), the TMA's out-of-bounds fill on the GPU
//   and the same on the host.
//
// Kernels (ops/src/paged_attention.cpp): one CTA per (sequence, K/V head,
// split), every query row of the K/V head in one tile (GQA packing: the
// q_tokens x heads/kv_heads rows, up to 64, share each page read); a producer
// warpgroup loads the pages by TMA into an mbarrier ring, two consumer
// warpgroups (alternate key blocks, merged at the end) run S = Q K^T and
// O += P V on wgmma with the online softmax in registers. Split-KV (flash-decoding): when batch x
// kv_heads leaves SMs idle, each sequence's pages are cut into `splits` ranges, one CTA each, and a
// second kernel combines their partial outputs by their log-sum-exps.
// paged_attention_plan says which. On the host (Device::host()) the same
// kernels run through the host JIT.
#pragma once

#include <cstdint>
#include <source_location>
#include <string>
#include <vector>

#include "tx/ir.hpp"
#include "tx/runtime/tensor.hpp"

namespace tx::ops {

struct PagedAttentionOptions {
  double scale = 0;  // 0: 1 / sqrt(head_dim)
  // fp8 caches: the per-tensor dequantization scales (x = stored * scale).
  double k_scale = 1, v_scale = 1;
  // Split-KV: 0 chooses (paged_attention_plan says what), 1 never splits,
  // n > 1 cuts every sequence's pages into n ranges.
  std::int64_t splits = 0;
  // Decode CTAs resident on an SM: 0 chooses (2 at head_dim <= 128, 1 at
  // 256), 1 = a CTA with two consumer warpgroups fills the SM, 2 = two CTAs
  // of one consumer each share it (one's start and end overlap the other's
  // stream). The plan names it; both give the same result within rounding.
  int ctas_per_sm = 0;
  // Where O goes (contiguous, q's shape, dtype and device); else a new
  // tensor. For CUDA graphs: an output allocated inside a capture would be
  // the graph's own allocation, which a graph cannot replay while it lives.
  const Tensor* out = nullptr;
};

Tensor paged_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                       const Tensor& block_table, const Tensor& context_lens,
                       const PagedAttentionOptions& opt = {},
                       std::source_location loc = std::source_location::current());

// What paged_attention runs, in words ("wgmma, 64 query rows per tile (8
// used), key blocks of 64 (4 pages), split-KV: 4 ranges of 256 keys + combine"),
// without running it.
std::string paged_attention_plan(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                                 const Tensor& block_table, const Tensor& context_lens,
                                 const PagedAttentionOptions& opt = {},
                                 std::source_location loc = std::source_location::current());

struct CacheWriteOptions {
  // fp8 caches: stored = x / scale, rounded to e4m3 (saturating at +-448).
  double k_scale = 1, v_scale = 1;
};

// Writes new keys and values into their cache slots (vLLM's
// reshape_and_cache): k and v are (tokens, kv_heads, head_dim); slot_mapping
// is int32 or int64 (tokens), slot s = page * page_size + row; a negative slot
// is skipped (padding tokens), as is a slot past the cache (num_pages *
// page_size or more) -- documented, never a fault. k and v are bf16 / f16 and
// the caches the same dtype, or fp8 e4m3 (quantized on the way in).
void reshape_and_cache(const Tensor& k, const Tensor& v, const Tensor& k_cache,
                       const Tensor& v_cache, const Tensor& slot_mapping,
                       const CacheWriteOptions& opt = {},
                       std::source_location loc = std::source_location::current());

namespace detail {
// The kernels paged_attention would run for these arguments (the decode
// kernel, then the combine where it takes one), as written: for tests that
// lower them for sm_90a without a GPU.
std::vector<PrimFunc> paged_attention_kernels(const Tensor& q, const Tensor& k_cache,
                                              const Tensor& v_cache, const Tensor& block_table,
                                              const Tensor& context_lens,
                                              const PagedAttentionOptions& opt = {});
}  // namespace detail

}  // namespace tx::ops
