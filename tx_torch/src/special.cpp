// The ops with signatures of their own, as torch.ops.tx.*, with schemas after
// PyTorch's (or vLLM's, for the ops PyTorch lacks):
//
//   softmax / log_softmax(Tensor self, int dim, ScalarType? dtype=None)
//   rms_norm(Tensor input, SymInt[] normalized_shape, Tensor? weight=None, float? eps=None)
//   layer_norm(Tensor input, SymInt[] normalized_shape, Tensor? weight=None,
//              Tensor? bias=None, float eps=1e-05)
//   add_rms_norm(Tensor input, Tensor residual, Tensor weight, float epsilon)
//       -> (Tensor out, Tensor residual_out)
//   fused_add_rms_norm(Tensor(a!) input, Tensor(b!) residual, Tensor weight, float epsilon)
//       -> ()                                                       (vLLM, in place)
//   dropout(Tensor input, float p, bool train) -> Tensor   (seed from torch's generator)
//   matmul(Tensor self, Tensor other) -> Tensor            (2-D)
//   grouped_matmul(Tensor self, Tensor other, Tensor offs) -> Tensor
//   scaled_matmul(Tensor self, Tensor other, Tensor scale_a, Tensor scale_b,
//                 ScalarType? out_dtype=None) -> Tensor   (fp8; torch._scaled_mm's
//                 scales: one, per row of self / column of other, or 1x128 / 128x128 blocks)
//   quantize_fp8(Tensor self, int block=128, ScalarType? dtype=None, int block_rows=1)
//       -> (Tensor, Tensor)   (block_rows 128: a weight's 128 x 128 blocks)
//       (self (T, K) sorted by expert, other (E, K, N), offs int32 (E,) cumulative row
//        ends: torch._grouped_mm's operands)
//   rotary_embedding(Tensor positions, Tensor(a!) query, Tensor(b!)? key, int head_size,
//                    Tensor cos_sin_cache, bool is_neox=True) -> ()  (vLLM, in place)
//   rope_cache / rope_cache_llama31 / rope_cache_yarn(...) -> Tensor (the caches of the
//       rope variants: rope_neox / rope_non_neox / rope_llama31 / rope_yarn are
//       rotary_embedding over them)
//   rope_longrope(Tensor positions, Tensor(a!) query, Tensor(b!)? key, int head_size,
//                 Tensor cos_sin_cache, int original_max_position) -> ()
//       over rope_cache_longrope(...)
//   alibi(int num_heads, int seq_len, *, ScalarType? dtype, Device? device) -> Tensor
//   sinusoidal(int num_positions, int dim, *, ScalarType? dtype, Device? device) -> Tensor
//   cast(Tensor self, ScalarType dtype) -> Tensor
//
// Each has a CPU/CUDA kernel (tx's op on views of the tensors) and a Meta
// kernel (shapes and dtypes only, SymInt-aware) for torch.compile.
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Generator.h>
#include <torch/library.h>

#include <mutex>

#include "convert.hpp"
#include "tx/ops/matmul.hpp"
#include "tx/ops/ops.hpp"

#ifdef TX_TORCH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAGeneratorImpl.h>
#endif

namespace tx_torch {
namespace {

bool is_meta(const at::Tensor& t) { return t.device().is_meta(); }

// ------------------------------------------------------------------ rows

// tx reduces over the last dimension of a contiguous tensor: another dim is
// moved there (a copy), and the result moved back.
at::Tensor row_op(const char* op, const at::Tensor& self, int64_t dim,
                  std::optional<at::ScalarType> dtype, bool log) {
  at::Tensor x = dtype ? self.to(*dtype) : self;
  const int64_t rank = std::max<int64_t>(x.dim(), 1);
  dim = dim < 0 ? dim + rank : dim;
  TORCH_CHECK(dim >= 0 && dim < rank, op, ": dim ", dim, " is out of range for a ", rank,
              "-d tensor");
  if (x.dim() == 0) return at::zeros_like(x).fill_(log ? 0.0 : 1.0);
  const bool moved = dim != x.dim() - 1;
  at::Tensor xr = moved ? x.movedim(dim, -1).contiguous() : x;
  at::Tensor y;
  call(op, [&] {
    OnDevice on(xr);
    tx::Tensor r =
        log ? tx::ops::log_softmax(view(xr, op, "self")) : tx::ops::softmax(view(xr, op, "self"));
    y = to_torch(r);
  });
  return moved ? y.movedim(-1, dim) : y;
}

at::Tensor softmax(const at::Tensor& self, int64_t dim, std::optional<at::ScalarType> dtype) {
  return row_op("tx::softmax", self, dim, dtype, false);
}
at::Tensor log_softmax(const at::Tensor& self, int64_t dim, std::optional<at::ScalarType> dtype) {
  return row_op("tx::log_softmax", self, dim, dtype, true);
}
at::Tensor softmax_meta(const at::Tensor& self, int64_t, std::optional<at::ScalarType> dtype) {
  return at::empty_symint(self.sym_sizes(),
                          self.options().dtype(dtype.value_or(self.scalar_type())));
}

// normalized_shape must be the input's last dimensions; more than one are
// flattened into one row (the input must then be viewable as rows).
at::Tensor as_rows(const char* op, const at::Tensor& x, c10::SymIntArrayRef normalized_shape) {
  const auto k = static_cast<int64_t>(normalized_shape.size());
  TORCH_CHECK(k >= 1 && k <= x.dim(), op, ": normalized_shape must name 1..", x.dim(),
              " trailing dimensions");
  for (int64_t i = 0; i < k; ++i)
    TORCH_CHECK(normalized_shape[static_cast<size_t>(i)] == x.sym_size(x.dim() - k + i), op,
                ": normalized_shape ", normalized_shape, " is not the end of the input's shape ",
                x.sym_sizes());
  if (k == 1) return x;
  return x.flatten(x.dim() - k, -1);
}

double default_eps(at::ScalarType t) {
  switch (t) {
    case at::kHalf:
      return static_cast<double>(std::numeric_limits<c10::Half>::epsilon());
    case at::kBFloat16:
      return static_cast<double>(std::numeric_limits<c10::BFloat16>::epsilon());
    case at::kDouble:
      return std::numeric_limits<double>::epsilon();
    default:
      return std::numeric_limits<float>::epsilon();
  }
}

at::Tensor rms_norm(const at::Tensor& input, c10::SymIntArrayRef normalized_shape,
                    const std::optional<at::Tensor>& weight, std::optional<double> eps) {
  const char* op = "tx::rms_norm";
  at::Tensor x = as_rows(op, input, normalized_shape).contiguous();
  at::Tensor w = weight && weight->defined() ? weight->reshape({-1}) : at::Tensor();
  if (w.defined()) check_same_device(op, {&input, &w});
  at::Tensor out = at::empty(x.sizes(), x.options());
  call(op, [&] {
    OnDevice on(x);
    tx::Tensor o = view(out, op, "out");
    tx::ops::rms_norm_out(o, view(x, op, "input"),
                          w.defined() ? view(w, op, "weight") : tx::Tensor(),
                          eps.value_or(default_eps(input.scalar_type())));
  });
  return out.view(input.sizes());
}
at::Tensor rms_norm_meta(const at::Tensor& input, c10::SymIntArrayRef normalized_shape,
                         const std::optional<at::Tensor>&, std::optional<double>) {
  as_rows("tx::rms_norm", input, normalized_shape);
  return at::empty_symint(input.sym_sizes(), input.options());
}

at::Tensor layer_norm(const at::Tensor& input, c10::SymIntArrayRef normalized_shape,
                      const std::optional<at::Tensor>& weight,
                      const std::optional<at::Tensor>& bias, double eps) {
  const char* op = "tx::layer_norm";
  at::Tensor x = as_rows(op, input, normalized_shape).contiguous();
  at::Tensor w = weight && weight->defined() ? weight->reshape({-1}) : at::Tensor();
  at::Tensor b = bias && bias->defined() ? bias->reshape({-1}) : at::Tensor();
  check_same_device(op, {&input, &w, &b});
  at::Tensor out = at::empty(x.sizes(), x.options());
  call(op, [&] {
    OnDevice on(x);
    tx::Tensor o = view(out, op, "out");
    tx::ops::layer_norm_out(o, view(x, op, "input"),
                            w.defined() ? view(w, op, "weight") : tx::Tensor(),
                            b.defined() ? view(b, op, "bias") : tx::Tensor(), eps);
  });
  return out.view(input.sizes());
}
at::Tensor layer_norm_meta(const at::Tensor& input, c10::SymIntArrayRef normalized_shape,
                           const std::optional<at::Tensor>&, const std::optional<at::Tensor>&,
                           double) {
  as_rows("tx::layer_norm", input, normalized_shape);
  return at::empty_symint(input.sym_sizes(), input.options());
}

std::tuple<at::Tensor, at::Tensor> add_rms_norm(const at::Tensor& input, const at::Tensor& residual,
                                                const at::Tensor& weight, double epsilon) {
  const char* op = "tx::add_rms_norm";
  check_same_device(op, {&input, &residual, &weight});
  TORCH_CHECK(input.sizes() == residual.sizes(), op, ": input ", input.sizes(), " and residual ",
              residual.sizes(), " differ in shape");
  // Both results in one pass, into tensors PyTorch allocates (its caching
  // allocator, its memory statistics).
  at::Tensor x = input.contiguous(), r = residual.contiguous();
  at::Tensor out = at::empty(x.sizes(), x.options());
  at::Tensor res = at::empty(x.sizes(), x.options());
  call(op, [&] {
    OnDevice on(x);
    tx::Tensor o = view(out, op, "out"), ro = view(res, op, "residual_out");
    tx::ops::add_rms_norm_into(o, ro, view(x, op, "input"), view(r, op, "residual"),
                               view(weight, op, "weight"), epsilon);
  });
  return {out, res};
}
std::tuple<at::Tensor, at::Tensor> add_rms_norm_meta(const at::Tensor& input,
                                                     const at::Tensor& residual, const at::Tensor&,
                                                     double) {
  TORCH_CHECK(input.sym_sizes() == residual.sym_sizes(), "tx::add_rms_norm: input ",
              input.sym_sizes(), " and residual ", residual.sym_sizes(), " differ in shape");
  return {at::empty_symint(input.sym_sizes(), input.options()),
          at::empty_symint(residual.sym_sizes(), residual.options())};
}

void fused_add_rms_norm(at::Tensor& input, at::Tensor& residual, const at::Tensor& weight,
                        double epsilon) {
  const char* op = "tx::fused_add_rms_norm";
  check_same_device(op, {&input, &residual, &weight});
  TORCH_CHECK(input.is_contiguous() && residual.is_contiguous(), op,
              ": input and residual are updated in place and must be contiguous");
  call(op, [&] {
    OnDevice on(input);
    tx::Tensor x = view(input, op, "input"), r = view(residual, op, "residual");
    tx::ops::add_rms_norm_(x, r, view(weight, op, "weight"), epsilon);
  });
}
void fused_add_rms_norm_meta(at::Tensor&, at::Tensor&, const at::Tensor&, double) {}

// --------------------------------------------------------------- dropout

// (seed, offset) for `n` elements from PyTorch's default generator of x's
// device: torch.manual_seed reproduces the masks, and consecutive calls draw
// disjoint counters. On CUDA the offset is the generator's rounded up to a
// multiple of 8: tx's dropout kernel then takes eight elements per Philox
// call (its "a8" class, ops/src/dropout.cpp); at another offset each element
// computes its own counter, eight times the arithmetic -- 2x slower at
// 4096 x 4096 bf16 on an H100. PyTorch's own ops advance the generator by
// multiples of 4, so the generator is advanced by n + 8: the next call's
// counters start past this call's last whatever the rounding took.
std::pair<uint64_t, int64_t> dropout_seed(const at::Tensor& x, int64_t n) {
#ifdef TX_TORCH_CUDA
  if (x.is_cuda()) {
    auto gen = at::get_generator_or_default<at::CUDAGeneratorImpl>(
        std::nullopt, at::cuda::detail::getDefaultCUDAGenerator(x.get_device()));
    std::lock_guard<std::mutex> lock(gen->mutex_);
    auto [seed, offset] = gen->philox_engine_inputs(static_cast<uint64_t>((n + 8 + 3) / 4 * 4));
    return {seed, static_cast<int64_t>((offset + 7) / 8 * 8)};
  }
#endif
  auto gen = at::get_generator_or_default<at::CPUGeneratorImpl>(
      std::nullopt, at::detail::getDefaultCPUGenerator());
  std::lock_guard<std::mutex> lock(gen->mutex_);
  return {gen->random64(), 0};
}

at::Tensor dropout(const at::Tensor& input, double p, bool train) {
  const char* op = "tx::dropout";
  TORCH_CHECK(p >= 0.0 && p <= 1.0, op, ": p must be in [0, 1], got ", p);
  if (!train || input.numel() == 0) return input.clone();
  at::Tensor x = input.contiguous();
  at::Tensor y = at::empty(x.sizes(), x.options());
  auto [seed, offset] = dropout_seed(x, x.numel());
  call(op, [&] {
    OnDevice on(x);
    tx::Tensor yv = view(y, op, "out");
    tx::ops::dropout(view(x, op, "input"), p, seed, offset, yv);
  });
  return y;
}
at::Tensor dropout_meta(const at::Tensor& input, double, bool) {
  return at::empty_symint(input.sym_sizes(), input.options());
}

// ---------------------------------------------------------------- matmul

at::ScalarType matmul_out_dtype(at::ScalarType t) {
  return t == at::kFloat8_e4m3fn || t == at::kFloat8_e5m2 ? at::kFloat : t;
}

at::Tensor matmul(const at::Tensor& self, const at::Tensor& other) {
  const char* op = "tx::matmul";
  TORCH_CHECK(self.dim() == 2 && other.dim() == 2, op, ": self and other must be 2-D, got ",
              self.dim(), "-D and ", other.dim(), "-D");
  check_same_device(op, {&self, &other});
  // other as the transpose of a row-major (N, K) tensor (b.t(), the layout
  // torch._scaled_mm takes) goes to tx as it is: its wgmma kernel reads it.
  const bool other_t = other.size(0) > 1 && other.size(1) > 1 && other.stride(0) == 1 &&
                       other.stride(1) == other.size(0);
  at::Tensor a = self.contiguous(), b = other_t ? other : other.contiguous();
  at::Tensor c;
  call(op, [&] {
    OnDevice on(a);
    c = to_torch(tx::ops::matmul(view(a, op, "self"), view(b, op, "other")));
  });
  return c;
}
at::Tensor matmul_meta(const at::Tensor& self, const at::Tensor& other) {
  TORCH_CHECK(self.dim() == 2 && other.dim() == 2, "tx::matmul: self and other must be 2-D");
  TORCH_CHECK(self.sym_size(1) == other.sym_size(0), "tx::matmul: inner extents differ (",
              self.sym_size(1), " and ", other.sym_size(0), ")");
  return at::empty_symint({self.sym_size(0), other.sym_size(1)},
                          self.options().dtype(matmul_out_dtype(self.scalar_type())));
}

// other as the transpose of a row-major (E, N, K) tensor (w.transpose(1, 2),
// the layout torch._grouped_mm prefers) goes to tx as it is.
at::Tensor grouped_matmul(const at::Tensor& self, const at::Tensor& other, const at::Tensor& offs) {
  const char* op = "tx::grouped_matmul";
  TORCH_CHECK(self.dim() == 2 && other.dim() == 3, op,
              ": self must be (T, K) and other (E, K, N), got ", self.dim(), "-D and ", other.dim(),
              "-D");
  check_same_device(op, {&self, &other, &offs});
  const bool other_t = other.stride(1) == 1 && other.stride(2) == other.size(1) &&
                       other.stride(0) == other.size(1) * other.size(2) && other.size(1) > 1 &&
                       other.size(2) > 1;
  at::Tensor a = self.contiguous(), b = other_t ? other : other.contiguous();
  at::Tensor o = offs.contiguous();
  // The result from PyTorch's caching allocator (tx's pool would give a
  // result above TX_POOL_KEEP_BYTES back at every synchronization).
  const bool fp8 = a.scalar_type() == at::kFloat8_e4m3fn || a.scalar_type() == at::kFloat8_e5m2;
  at::Tensor c =
      at::empty({a.size(0), b.size(2)}, a.options().dtype(fp8 ? at::kFloat : a.scalar_type()));
  call(op, [&] {
    OnDevice on(a);
    tx::ops::grouped_matmul_out(view(a, op, "self"), view(b, op, "other"), view(o, op, "offs"),
                                view(c, op, "out"));
  });
  return c;
}
at::Tensor grouped_matmul_meta(const at::Tensor& self, const at::Tensor& other,
                               const at::Tensor& offs) {
  const char* op = "tx::grouped_matmul";
  TORCH_CHECK(self.dim() == 2 && other.dim() == 3, op, ": self must be (T, K) and other (E, K, N)");
  TORCH_CHECK(self.sym_size(1) == other.sym_size(1), op, ": inner extents differ (",
              self.sym_size(1), " and ", other.sym_size(1), ")");
  TORCH_CHECK(
      offs.dim() == 1 && offs.sym_size(0) == other.sym_size(0) && offs.scalar_type() == at::kInt,
      op, ": offs must be int32 with one end per expert");
  return at::empty_symint({self.sym_size(0), other.sym_size(2)},
                          self.options().dtype(matmul_out_dtype(self.scalar_type())));
}

at::Tensor scaled_matmul(const at::Tensor& self, const at::Tensor& other, const at::Tensor& scale_a,
                         const at::Tensor& scale_b, std::optional<at::ScalarType> out_dtype) {
  const char* op = "tx::scaled_matmul";
  TORCH_CHECK(self.dim() == 2 && other.dim() == 2, op, ": self and other must be 2-D");
  check_same_device(op, {&self, &other, &scale_a, &scale_b});
  const bool other_t = other.size(0) > 1 && other.size(1) > 1 && other.stride(0) == 1 &&
                       other.stride(1) == other.size(0);
  at::Tensor a = self.contiguous(), b = other_t ? other : other.contiguous();
  at::Tensor sa = scale_a.contiguous();
  // The result from PyTorch's caching allocator (as grouped_matmul).
  at::Tensor c =
      at::empty({a.size(0), b.size(1)}, a.options().dtype(out_dtype.value_or(at::kBFloat16)));
  call(op, [&] {
    OnDevice on(a);
    tx::ops::ScaledMatmulOptions o;
    if (out_dtype) o.out_dtype = tx_dtype(*out_dtype, op, "out_dtype");
    tx::ops::scaled_matmul_out(view(a, op, "self"), view(b, op, "other"), view(sa, op, "scale_a"),
                               view(scale_b, op, "scale_b"), view(c, op, "out"), o);
  });
  return c;
}
at::Tensor scaled_matmul_meta(const at::Tensor& self, const at::Tensor& other, const at::Tensor&,
                              const at::Tensor&, std::optional<at::ScalarType> out_dtype) {
  TORCH_CHECK(self.dim() == 2 && other.dim() == 2, "tx::scaled_matmul: self and other must be 2-D");
  TORCH_CHECK(self.sym_size(1) == other.sym_size(0), "tx::scaled_matmul: inner extents differ");
  return at::empty_symint({self.sym_size(0), other.sym_size(1)},
                          self.options().dtype(out_dtype.value_or(at::kBFloat16)));
}

std::tuple<at::Tensor, at::Tensor> quantize_fp8(const at::Tensor& self, int64_t block,
                                                std::optional<at::ScalarType> dtype,
                                                int64_t block_rows) {
  const char* op = "tx::quantize_fp8";
  at::Tensor x = self.contiguous();
  TORCH_CHECK(x.dim() == 2 && block >= 1 && block_rows >= 1, op,
              ": rows of a 2-D tensor, block >= 1, block_rows >= 1");
  // Into torch's tensors (DLPack has no fp8 type code to hand tx's back).
  at::Tensor q = at::empty(x.sizes(), x.options().dtype(dtype.value_or(at::kFloat8_e4m3fn)));
  at::Tensor s =
      at::empty({(x.size(0) + block_rows - 1) / block_rows, (x.size(1) + block - 1) / block},
                x.options().dtype(at::kFloat));
  call(op, [&] {
    OnDevice on(x);
    tx::ops::QuantizeFp8Options o{.block = block, .block_rows = block_rows};
    if (dtype) o.dtype = tx_dtype(*dtype, op, "dtype");
    tx::ops::quantize_fp8_out(view(x, op, "self"), view(q, op, "data"), view(s, op, "scale"), o);
  });
  return {q, s};
}
std::tuple<at::Tensor, at::Tensor> quantize_fp8_meta(const at::Tensor& self, int64_t block,
                                                     std::optional<at::ScalarType> dtype,
                                                     int64_t block_rows) {
  TORCH_CHECK(self.dim() == 2 && block >= 1 && block_rows >= 1,
              "tx::quantize_fp8: rows of a 2-D tensor, block >= 1, block_rows >= 1");
  auto blocks = (self.sym_size(1) + block - 1) / block;
  auto row_blocks = (self.sym_size(0) + block_rows - 1) / block_rows;
  return {
      at::empty_symint(self.sym_sizes(), self.options().dtype(dtype.value_or(at::kFloat8_e4m3fn))),
      at::empty_symint({row_blocks, blocks}, self.options().dtype(at::kFloat))};
}

// ------------------------------------------------------------------ rope

void rotary_embedding(const at::Tensor& positions, at::Tensor& query,
                      const std::optional<at::Tensor>& key, int64_t head_size,
                      const at::Tensor& cos_sin_cache, bool is_neox) {
  const char* op = "tx::rotary_embedding";
  at::Tensor k = key && key->defined() ? *key : at::Tensor();
  check_same_device(op, {&positions, &query, &k, &cos_sin_cache});
  TORCH_CHECK(cos_sin_cache.dim() == 2, op, ": cos_sin_cache must be (max_position, rotary_dim)");
  call(op, [&] {
    OnDevice on(query);
    tx::ops::RopeOptions o{
        .head_size = head_size, .rotary_dim = cos_sin_cache.size(1), .is_neox = is_neox};
    tx::ops::rope(view(positions, op, "positions"), view(query, op, "query"),
                  k.defined() ? view(k, op, "key") : tx::Tensor(),
                  view(cos_sin_cache, op, "cos_sin_cache"), o);
  });
}
// LongRoPE (vLLM's Phi3LongRoPEScaledRotaryEmbedding): the short rows, or
// the long ones when any position exceeds original_max_position (tx reads
// the positions for that: a device-to-host copy on the GPU).
void rope_longrope(const at::Tensor& positions, at::Tensor& query,
                   const std::optional<at::Tensor>& key, int64_t head_size,
                   const at::Tensor& cos_sin_cache, int64_t original_max_position) {
  const char* op = "tx::rope_longrope";
  at::Tensor k = key && key->defined() ? *key : at::Tensor();
  check_same_device(op, {&positions, &query, &k, &cos_sin_cache});
  TORCH_CHECK(cos_sin_cache.dim() == 2, op, ": cos_sin_cache must be (rows, rotary_dim)");
  call(op, [&] {
    OnDevice on(query);
    tx::ops::rope_longrope(view(positions, op, "positions"), view(query, op, "query"),
                           k.defined() ? view(k, op, "key") : tx::Tensor(),
                           view(cos_sin_cache, op, "cos_sin_cache"), head_size,
                           original_max_position, cos_sin_cache.size(1));
  });
}
void rope_longrope_meta(const at::Tensor&, at::Tensor&, const std::optional<at::Tensor>&, int64_t,
                        const at::Tensor&, int64_t) {}

void rotary_embedding_meta(const at::Tensor&, at::Tensor&, const std::optional<at::Tensor>&,
                           int64_t, const at::Tensor&, bool) {}

// ------------------------------------------------- tensors made from nothing

// Factories run where `device` says (default: the CPU, as torch's); on Meta
// they only allocate.
c10::Device factory_device(std::optional<c10::Device> d) { return d.value_or(c10::kCPU); }

template <class Make>
at::Tensor factory(const char* op, std::vector<int64_t> shape, std::optional<at::ScalarType> dtype,
                   std::optional<c10::Device> device, Make make) {
  c10::Device dev = factory_device(device);
  at::ScalarType t = dtype.value_or(at::kFloat);
  if (dev.is_meta()) return at::empty(shape, at::TensorOptions().dtype(t).device(dev));
  at::Tensor out = at::empty(shape, at::TensorOptions().dtype(t).device(dev));
  if (out.numel() == 0) return out;
  call(op, [&] {
    OnDevice on(dev);
    tx::Tensor o = view(out, op, "out");
    make(o);
  });
  return out;
}

at::Tensor alibi(int64_t num_heads, int64_t seq_len, std::optional<at::ScalarType> dtype,
                 std::optional<c10::Device> device) {
  return factory("tx::alibi", {num_heads, seq_len, seq_len}, dtype, device,
                 [&](tx::Tensor& o) { tx::ops::alibi(num_heads, seq_len, o); });
}
at::Tensor sinusoidal(int64_t num_positions, int64_t dim, std::optional<at::ScalarType> dtype,
                      std::optional<c10::Device> device) {
  return factory("tx::sinusoidal", {num_positions, dim}, dtype, device,
                 [&](tx::Tensor& o) { tx::ops::sinusoidal(num_positions, dim, o); });
}

// The rope caches are built by tx into a tensor of its own, handed over.
template <class Build>
at::Tensor cache(const char* op, std::vector<int64_t> shape, std::optional<at::ScalarType> dtype,
                 std::optional<c10::Device> device, Build build) {
  c10::Device dev = factory_device(device);
  at::ScalarType t = dtype.value_or(at::kFloat);
  if (dev.is_meta()) return at::empty(shape, at::TensorOptions().dtype(t).device(dev));
  at::Tensor out;
  call(op, [&] {
    OnDevice on(dev);
    tx::Device d =
        dev.is_cuda() ? tx::Device::cuda(dev.has_index() ? dev.index() : 0) : tx::Device::host();
    out = to_torch(build(tx_dtype(t, op, "dtype"), d));
  });
  return out;
}

at::Tensor rope_cache(int64_t rotary_dim, int64_t max_position, double base,
                      std::optional<at::ScalarType> dtype, std::optional<c10::Device> device) {
  return cache("tx::rope_cache", {max_position, rotary_dim}, dtype, device,
               [&](tx::DType t, tx::Device d) {
                 return tx::ops::rope_cache(rotary_dim, max_position, base, t, d);
               });
}
at::Tensor rope_cache_llama31(int64_t rotary_dim, int64_t max_position, double base, double factor,
                              double low_freq_factor, double high_freq_factor,
                              int64_t original_max_position, std::optional<at::ScalarType> dtype,
                              std::optional<c10::Device> device) {
  return cache(
      "tx::rope_cache_llama31", {max_position, rotary_dim}, dtype, device,
      [&](tx::DType t, tx::Device d) {
        tx::ops::Llama31Scaling s{factor, low_freq_factor, high_freq_factor, original_max_position};
        return tx::ops::rope_cache_llama31(rotary_dim, max_position, base, s, t, d);
      });
}
at::Tensor rope_cache_yarn(int64_t rotary_dim, double base, double factor,
                           int64_t original_max_position, double extrapolation_factor,
                           double attn_factor, double beta_fast, double beta_slow,
                           std::optional<at::ScalarType> dtype, std::optional<c10::Device> device) {
  const auto rows = static_cast<int64_t>(static_cast<double>(original_max_position) * factor);
  return cache(
      "tx::rope_cache_yarn", {rows, rotary_dim}, dtype, device, [&](tx::DType t, tx::Device d) {
        tx::ops::YarnScaling s{
            factor, original_max_position, extrapolation_factor, attn_factor, beta_fast, beta_slow};
        return tx::ops::rope_cache_yarn(rotary_dim, base, s, t, d);
      });
}

at::Tensor rope_cache_longrope(int64_t rotary_dim, int64_t max_position, double base,
                               at::ArrayRef<double> short_factor, at::ArrayRef<double> long_factor,
                               int64_t original_max_position, std::optional<double> short_mscale,
                               std::optional<double> long_mscale,
                               std::optional<at::ScalarType> dtype,
                               std::optional<c10::Device> device) {
  return cache("tx::rope_cache_longrope", {original_max_position + max_position, rotary_dim}, dtype,
               device, [&](tx::DType t, tx::Device d) {
                 tx::ops::LongRopeScaling s{
                     .short_factor = std::vector<double>(short_factor.begin(), short_factor.end()),
                     .long_factor = std::vector<double>(long_factor.begin(), long_factor.end()),
                     .original_max_position = original_max_position,
                     .short_mscale = short_mscale,
                     .long_mscale = long_mscale};
                 return tx::ops::rope_cache_longrope(rotary_dim, max_position, base, s, t, d);
               });
}

// ------------------------------------------------------------------ cast

at::Tensor cast(const at::Tensor& self, at::ScalarType dtype) {
  const char* op = "tx::cast";
  at::Tensor out = at::empty(self.sizes(), self.options().dtype(dtype));
  if (out.numel() == 0) return out;
  call(op, [&] {
    OnDevice on(self);
    tx::Tensor o = view(out, op, "out");
    tx::ops::cast(view(self, op, "self"), o);
  });
  return out;
}
at::Tensor cast_meta(const at::Tensor& self, at::ScalarType dtype) {
  tx_dtype(dtype, "tx::cast", "dtype");
  return at::empty_symint(self.sym_sizes(), self.options().dtype(dtype));
}

}  // namespace
}  // namespace tx_torch

TORCH_LIBRARY_FRAGMENT(tx, m) {
  tx_torch::install_warning_handler();
  m.def("softmax(Tensor self, int dim, ScalarType? dtype=None) -> Tensor");
  m.def("log_softmax(Tensor self, int dim, ScalarType? dtype=None) -> Tensor");
  m.def(
      "rms_norm(Tensor input, SymInt[] normalized_shape, Tensor? weight=None, float? eps=None) -> "
      "Tensor");
  m.def(
      "layer_norm(Tensor input, SymInt[] normalized_shape, Tensor? weight=None, Tensor? "
      "bias=None, float eps=1e-05) -> Tensor");
  m.def(
      "add_rms_norm(Tensor input, Tensor residual, Tensor weight, float epsilon) -> (Tensor, "
      "Tensor)");
  m.def(
      "fused_add_rms_norm(Tensor(a!) input, Tensor(b!) residual, Tensor weight, float epsilon) -> "
      "()");
  m.def("dropout(Tensor input, float p, bool train) -> Tensor", {at::Tag::nondeterministic_seeded});
  m.def("matmul(Tensor self, Tensor other) -> Tensor");
  m.def("grouped_matmul(Tensor self, Tensor other, Tensor offs) -> Tensor");
  m.def(
      "scaled_matmul(Tensor self, Tensor other, Tensor scale_a, Tensor scale_b, ScalarType? "
      "out_dtype=None) -> Tensor");
  m.def(
      "quantize_fp8(Tensor self, int block=128, ScalarType? dtype=None, int block_rows=1) -> "
      "(Tensor, Tensor)");
  m.def(
      "rotary_embedding(Tensor positions, Tensor(a!) query, Tensor(b!)? key, int head_size, "
      "Tensor cos_sin_cache, bool is_neox=True) -> ()");
  m.def(
      "rope_longrope(Tensor positions, Tensor(a!) query, Tensor(b!)? key, int head_size, Tensor "
      "cos_sin_cache, int original_max_position) -> ()");
  m.def(
      "rope_cache_longrope(int rotary_dim, int max_position, float base, float[] short_factor, "
      "float[] long_factor, int original_max_position=4096, float? short_mscale=None, float? "
      "long_mscale=None, *, ScalarType? dtype=None, Device? device=None) -> Tensor");
  m.def("cast(Tensor self, ScalarType dtype) -> Tensor");
  m.def(
      "alibi(int num_heads, int seq_len, *, ScalarType? dtype=None, Device? device=None) -> "
      "Tensor");
  m.def(
      "sinusoidal(int num_positions, int dim, *, ScalarType? dtype=None, Device? device=None) -> "
      "Tensor");
  m.def(
      "rope_cache(int rotary_dim, int max_position, float base=10000.0, *, ScalarType? "
      "dtype=None, Device? device=None) -> Tensor");
  m.def(
      "rope_cache_llama31(int rotary_dim, int max_position=131072, float base=500000.0, float "
      "factor=8.0, float low_freq_factor=1.0, float high_freq_factor=4.0, int "
      "original_max_position=8192, *, ScalarType? dtype=None, Device? device=None) -> Tensor");
  m.def(
      "rope_cache_yarn(int rotary_dim, float base=10000.0, float factor=4.0, int "
      "original_max_position=4096, float extrapolation_factor=1.0, float attn_factor=1.0, float "
      "beta_fast=32.0, float beta_slow=1.0, *, ScalarType? dtype=None, Device? device=None) -> "
      "Tensor");
}

namespace {
void register_device_kernels(torch::Library& m) {
  using namespace tx_torch;
  m.impl("softmax", &softmax);
  m.impl("log_softmax", &log_softmax);
  m.impl("rms_norm", &rms_norm);
  m.impl("layer_norm", &layer_norm);
  m.impl("add_rms_norm", &add_rms_norm);
  m.impl("fused_add_rms_norm", &fused_add_rms_norm);
  m.impl("dropout", &dropout);
  m.impl("matmul", &matmul);
  m.impl("grouped_matmul", &grouped_matmul);
  m.impl("scaled_matmul", &scaled_matmul);
  m.impl("quantize_fp8", &quantize_fp8);
  m.impl("rotary_embedding", &rotary_embedding);
  m.impl("rope_longrope", &rope_longrope);
  m.impl("cast", &cast);
}
}  // namespace

TORCH_LIBRARY_IMPL(tx, CPU, m) { register_device_kernels(m); }
TORCH_LIBRARY_IMPL(tx, CUDA, m) { register_device_kernels(m); }
TORCH_LIBRARY_IMPL(tx, Meta, m) {
  using namespace tx_torch;
  m.impl("softmax", &softmax_meta);
  m.impl("log_softmax", &softmax_meta);
  m.impl("rms_norm", &rms_norm_meta);
  m.impl("layer_norm", &layer_norm_meta);
  m.impl("add_rms_norm", &add_rms_norm_meta);
  m.impl("fused_add_rms_norm", &fused_add_rms_norm_meta);
  m.impl("dropout", &dropout_meta);
  m.impl("matmul", &matmul_meta);
  m.impl("grouped_matmul", &grouped_matmul_meta);
  m.impl("scaled_matmul", &scaled_matmul_meta);
  m.impl("quantize_fp8", &quantize_fp8_meta);
  m.impl("rotary_embedding", &rotary_embedding_meta);
  m.impl("rope_longrope", &rope_longrope_meta);
  m.impl("cast", &cast_meta);
}
// Factories have no tensor to dispatch on: one kernel for every device,
// which reads `device`.
TORCH_LIBRARY_IMPL(tx, CompositeExplicitAutograd, m) {
  using namespace tx_torch;
  m.impl("alibi", &alibi);
  m.impl("sinusoidal", &sinusoidal);
  m.impl("rope_cache", &rope_cache);
  m.impl("rope_cache_llama31", &rope_cache_llama31);
  m.impl("rope_cache_yarn", &rope_cache_yarn);
  m.impl("rope_cache_longrope", &rope_cache_longrope);
}
