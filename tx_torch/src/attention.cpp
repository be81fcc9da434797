// torch.ops.tx.attention: tx::ops::attention with the signature of
// torch.nn.functional.scaled_dot_product_attention, returning the
// log-sum-exp too (what torch's own flash / cuDNN backends return to
// autograd):
//
//   attention(Tensor query, Tensor key, Tensor value, bool is_causal=False,
//             float? scale=None, bool bottom_right=False) -> (Tensor, Tensor)
//
// query (B, H, Sq, D), key / value (B, Hkv, Sk, D) with Hkv dividing H; out
// (B, H, Sq, D) with query's storage order (a (B, S, H, D)-stored query
// gives a (B, S, H, D)-stored out), lse (B, H, Sq) float32. The Meta kernel
// gives the same shapes and strides, for torch.compile.
#include <torch/library.h>

#include "convert.hpp"
#include "tx/ops/attention.hpp"

namespace tx_torch {
namespace {

// tx::ops::attention keeps a (B, H, S, D)-contiguous query's layout and
// gives every other query's out (B, S, H, D) storage (its own layout, or
// the copy it makes of another view).
bool tokens_major(const at::Tensor& t) { return !t.is_contiguous(); }

std::tuple<at::Tensor, at::Tensor> attention(const at::Tensor& q, const at::Tensor& k,
                                             const at::Tensor& v, bool is_causal,
                                             std::optional<double> scale, bool bottom_right) {
  const char* op = "tx::attention";
  check_same_device(op, {&q, &k, &v});
  at::Tensor out, lse;
  call(op, [&] {
    OnDevice on(q);
    tx::ops::AttentionResult r = tx::ops::attention(
        view(q, op, "query"), view(k, op, "key"), view(v, op, "value"),
        {.causal = is_causal, .bottom_right = bottom_right, .scale = scale.value_or(0.0)});
    out = to_torch(r.out);
    lse = to_torch(r.lse);
  });
  return {out, lse};
}

std::tuple<at::Tensor, at::Tensor> attention_meta(const at::Tensor& q, const at::Tensor& k,
                                                  const at::Tensor& v, bool, std::optional<double>,
                                                  bool) {
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4,
              "tx::attention: query, key and value are (batch, heads, seq, head_dim)");
  TORCH_CHECK(q.sym_size(3) == k.sym_size(3) && k.sym_sizes() == v.sym_sizes(),
              "tx::attention: head_dim or key / value shapes differ");
  const auto B = q.sym_size(0), H = q.sym_size(1), S = q.sym_size(2), D = q.sym_size(3);
  at::Tensor out, lse;
  if (tokens_major(q)) {
    out = at::empty_symint({B, S, H, D}, q.options()).transpose(1, 2);
    lse = at::empty_symint({B, S, H}, q.options().dtype(at::kFloat)).permute({0, 2, 1});
  } else {
    out = at::empty_symint({B, H, S, D}, q.options());
    lse = at::empty_symint({B, H, S}, q.options().dtype(at::kFloat));
  }
  return {out, lse};
}

}  // namespace
}  // namespace tx_torch

TORCH_LIBRARY_FRAGMENT(tx, m) {
  m.def(
      "attention(Tensor query, Tensor key, Tensor value, bool is_causal=False, float? scale=None, "
      "bool bottom_right=False) -> (Tensor, Tensor)");
}
TORCH_LIBRARY_IMPL(tx, CPU, m) { m.impl("attention", &tx_torch::attention); }
TORCH_LIBRARY_IMPL(tx, CUDA, m) { m.impl("attention", &tx_torch::attention); }
TORCH_LIBRARY_IMPL(tx, Meta, m) { m.impl("attention", &tx_torch::attention_meta); }
