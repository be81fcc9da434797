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
//
//   attention_backward(Tensor grad_out, Tensor query, Tensor key, Tensor value,
//                      Tensor out, Tensor lse, bool is_causal=False,
//                      float? scale=None, bool bottom_right=False)
//       -> (Tensor, Tensor, Tensor)
//
// tx::ops::attention_backward: grad_query (query's storage order), grad_key
// and grad_value (key's: (B, Hkv, S, D)-contiguous when key and value both
// are, else (B, S, Hkv, D) storage). tx_torch (Python) registers it as the
// autograd formula of attention, so a model trains through tx attention.
#include "tx/ops/attention.hpp"

#include <torch/library.h>

#include "convert.hpp"

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
        {.causal = is_causal,
         .bottom_right = bottom_right,
         .scale = scale.value_or(0.0),
         // torch.use_deterministic_algorithms(True): the same bits every
         // run (no TMA reductions into dQ), as PyTorch's own kernels do.
         .dq_sum = at::globalContext().deterministicAlgorithms() ? tx::ops::DqSum::deterministic
                                                                 : tx::ops::DqSum::automatic});
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

std::tuple<at::Tensor, at::Tensor, at::Tensor> attention_backward(
    const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const at::Tensor& out, const at::Tensor& lse, bool is_causal, std::optional<double> scale,
    bool bottom_right) {
  const char* op = "tx::attention_backward";
  check_same_device(op, {&grad_out, &q, &k, &v, &out, &lse});
  at::Tensor dq, dk, dv;
  call(op, [&] {
    OnDevice on(q);
    tx::ops::AttentionGrads g = tx::ops::attention_backward(
        view(grad_out, op, "grad_out"), view(q, op, "query"), view(k, op, "key"),
        view(v, op, "value"), view(out, op, "out"), view(lse, op, "lse"),
        {.causal = is_causal,
         .bottom_right = bottom_right,
         .scale = scale.value_or(0.0),
         // torch.use_deterministic_algorithms(True): the same bits every
         // run (no TMA reductions into dQ), as PyTorch's own kernels do.
         .dq_sum = at::globalContext().deterministicAlgorithms() ? tx::ops::DqSum::deterministic
                                                                 : tx::ops::DqSum::automatic});
    dq = to_torch(g.dq);
    dk = to_torch(g.dk);
    dv = to_torch(g.dv);
  });
  return {dq, dk, dv};
}

// A (B, H, S, D) tensor stored (B, H, S, D) or, tokens-major, (B, S, H, D).
at::Tensor empty_bhsd(const at::Tensor& like, bool tokens_major_storage) {
  const auto B = like.sym_size(0), H = like.sym_size(1), S = like.sym_size(2), D = like.sym_size(3);
  if (tokens_major_storage) return at::empty_symint({B, S, H, D}, like.options()).transpose(1, 2);
  return at::empty_symint({B, H, S, D}, like.options());
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> attention_backward_meta(
    const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const at::Tensor&, const at::Tensor&, bool, std::optional<double>, bool) {
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4 && grad_out.sizes() == q.sizes(),
              "tx::attention_backward: grad_out and query are (batch, heads, seq, head_dim), "
              "key and value (batch, kv_heads, seq, head_dim)");
  // As tx::ops::attention_backward lays them out (attention.hpp).
  const bool kv_heads_major = k.is_contiguous() && v.is_contiguous();
  return {empty_bhsd(q, tokens_major(q)), empty_bhsd(k, !kv_heads_major),
          empty_bhsd(v, !kv_heads_major)};
}

}  // namespace
}  // namespace tx_torch

TORCH_LIBRARY_FRAGMENT(tx, m) {
  m.def(
      "attention(Tensor query, Tensor key, Tensor value, bool is_causal=False, float? scale=None, "
      "bool bottom_right=False) -> (Tensor, Tensor)");
  m.def(
      "attention_backward(Tensor grad_out, Tensor query, Tensor key, Tensor value, Tensor out, "
      "Tensor lse, bool is_causal=False, float? scale=None, bool bottom_right=False) -> (Tensor, "
      "Tensor, Tensor)");
}
TORCH_LIBRARY_IMPL(tx, CPU, m) {
  m.impl("attention", &tx_torch::attention);
  m.impl("attention_backward", &tx_torch::attention_backward);
}
TORCH_LIBRARY_IMPL(tx, CUDA, m) {
  m.impl("attention", &tx_torch::attention);
  m.impl("attention_backward", &tx_torch::attention_backward);
}
TORCH_LIBRARY_IMPL(tx, Meta, m) {
  m.impl("attention", &tx_torch::attention_meta);
  m.impl("attention_backward", &tx_torch::attention_backward_meta);
}
