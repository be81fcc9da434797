// torch.ops.tx.paged_attention and torch.ops.tx.reshape_and_cache:
// tx::ops::paged_attention (decode over a paged KV cache) and its cache
// write, with vLLM's argument order:
//
//   paged_attention(Tensor query, Tensor k_cache, Tensor v_cache, Tensor block_table,
//                   Tensor context_lens, float? scale=None, float k_scale=1.0,
//                   float v_scale=1.0, int splits=0) -> Tensor
//   reshape_and_cache(Tensor key, Tensor value, Tensor(a!) k_cache, Tensor(b!) v_cache,
//                     Tensor slot_mapping, float k_scale=1.0, float v_scale=1.0) -> ()
//
// query (batch, q_tokens, heads, head_dim); the caches (num_pages, page_size,
// kv_heads, head_dim), bf16 / f16 or float8_e4m3fn; block_table int32
// (batch, max_pages); context_lens int32 (batch). The out is query's shape
// and dtype. The Meta kernels give that shape (and nothing for the cache
// write, which mutates its caches), so both ops trace under torch.compile;
// the lengths are read on the GPU only, so a decode step captures in a CUDA
// graph.
#include "tx/ops/paged_attention.hpp"

#include <torch/library.h>

#include "convert.hpp"

namespace tx_torch {
namespace {

at::Tensor paged_attention(const at::Tensor& q, const at::Tensor& k_cache,
                           const at::Tensor& v_cache, const at::Tensor& block_table,
                           const at::Tensor& context_lens, std::optional<double> scale,
                           double k_scale, double v_scale, int64_t splits) {
  const char* op = "tx::paged_attention";
  check_same_device(op, {&q, &k_cache, &v_cache, &block_table, &context_lens});
  at::Tensor out = at::empty(q.sizes(), q.options().memory_format(at::MemoryFormat::Contiguous));
  call(op, [&] {
    OnDevice on(q);
    tx::Tensor o = view(out, op, "out");
    tx::ops::paged_attention(view(q, op, "query"), view(k_cache, op, "k_cache"),
                             view(v_cache, op, "v_cache"), view(block_table, op, "block_table"),
                             view(context_lens, op, "context_lens"),
                             {.scale = scale.value_or(0.0),
                              .k_scale = k_scale,
                              .v_scale = v_scale,
                              .splits = splits,
                              .out = &o});
  });
  return out;
}

at::Tensor paged_attention_meta(const at::Tensor& q, const at::Tensor&, const at::Tensor&,
                                const at::Tensor&, const at::Tensor&, std::optional<double>, double,
                                double, int64_t) {
  TORCH_CHECK(q.dim() == 4, "tx::paged_attention: query is (batch, q_tokens, heads, head_dim)");
  return at::empty_symint(q.sym_sizes(), q.options());
}

void reshape_and_cache(const at::Tensor& k, const at::Tensor& v, at::Tensor& k_cache,
                       at::Tensor& v_cache, const at::Tensor& slot_mapping, double k_scale,
                       double v_scale) {
  const char* op = "tx::reshape_and_cache";
  check_same_device(op, {&k, &v, &k_cache, &v_cache, &slot_mapping});
  call(op, [&] {
    OnDevice on(k);
    tx::ops::reshape_and_cache(view(k, op, "key"), view(v, op, "value"),
                               view(k_cache, op, "k_cache"), view(v_cache, op, "v_cache"),
                               view(slot_mapping, op, "slot_mapping"),
                               {.k_scale = k_scale, .v_scale = v_scale});
  });
}

void reshape_and_cache_meta(const at::Tensor&, const at::Tensor&, at::Tensor&, at::Tensor&,
                            const at::Tensor&, double, double) {}

}  // namespace
}  // namespace tx_torch

TORCH_LIBRARY_FRAGMENT(tx, m) {
  m.def(
      "paged_attention(Tensor query, Tensor k_cache, Tensor v_cache, Tensor block_table, "
      "Tensor context_lens, float? scale=None, float k_scale=1.0, float v_scale=1.0, "
      "int splits=0) -> Tensor");
  m.def(
      "reshape_and_cache(Tensor key, Tensor value, Tensor(a!) k_cache, Tensor(b!) v_cache, "
      "Tensor slot_mapping, float k_scale=1.0, float v_scale=1.0) -> ()");
}
TORCH_LIBRARY_IMPL(tx, CPU, m) {
  m.impl("paged_attention", &tx_torch::paged_attention);
  m.impl("reshape_and_cache", &tx_torch::reshape_and_cache);
}
TORCH_LIBRARY_IMPL(tx, CUDA, m) {
  m.impl("paged_attention", &tx_torch::paged_attention);
  m.impl("reshape_and_cache", &tx_torch::reshape_and_cache);
}
TORCH_LIBRARY_IMPL(tx, Meta, m) {
  m.impl("paged_attention", &tx_torch::paged_attention_meta);
  m.impl("reshape_and_cache", &tx_torch::reshape_and_cache_meta);
}
