// Row kernels: a reduction over the last dimension with an elementwise
// epilogue, written as tx tile programs (ops/src/rows.cpp).
//
//   Tensor p = tx::ops::softmax(logits);                   // over the last dimension
//   Tensor y = tx::ops::rms_norm(x, weight, 1e-6);
//   auto [out, res] = tx::ops::add_rms_norm(x, residual, weight, 1e-6);
//
// Math in f32 (the statistics of a row are f32 sums), one rounding per
// output; f32, f16 and bf16 inputs, outputs of the input's dtype. A row is
// the last dimension of a contiguous tensor; a strided x is copied to a
// contiguous one first.
//   softmax      y = exp(x - max) / sum(exp(x - max))       (a row of -inf: NaN, as torch)
//   log_softmax  y = x - max - log(sum(exp(x - max)))
//   rms_norm     y = x * rsqrt(mean(x^2) + eps) * weight
//   layer_norm   y = (x - mean) * rsqrt(var + eps) * weight + bias   (biased var; weight
//                and bias optional, as torch's elementwise_affine)
//   add_rms_norm h = x + residual (rounded to the dtype, as vLLM's fused_add_rms_norm);
//                residual_out = h, out = rms_norm(h, weight, eps)
// weight and bias: [N] for rows of N, in x's dtype or f32.
#pragma once

#include <cstdint>
#include <source_location>

#include "tx/ops/ops.hpp"

namespace tx::ops {

Tensor softmax(const Tensor& x, int dim = -1,
               std::source_location loc = std::source_location::current());
Tensor log_softmax(const Tensor& x, int dim = -1,
                   std::source_location loc = std::source_location::current());
Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps = 1e-6,
                std::source_location loc = std::source_location::current());
// weight and bias may be undefined Tensors (no affine part).
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps = 1e-5,
                  std::source_location loc = std::source_location::current());

struct AddRmsNormResult {
  Tensor out;       // rms_norm(x + residual) * weight
  Tensor residual;  // x + residual, the next layer's residual
};
AddRmsNormResult add_rms_norm(const Tensor& x, const Tensor& residual, const Tensor& weight,
                              double eps = 1e-6,
                              std::source_location loc = std::source_location::current());
// The functional form into tensors the caller allocated (contiguous, x's
// shape and dtype): out = the norm, residual_out = x + residual.
void add_rms_norm_into(Tensor& out, Tensor& residual_out, const Tensor& x, const Tensor& residual,
                       const Tensor& weight, double eps = 1e-6,
                       std::source_location loc = std::source_location::current());
// vLLM's in-place form: residual becomes x + residual, x becomes the output.
void add_rms_norm_(Tensor& x, Tensor& residual, const Tensor& weight, double eps = 1e-6,
                   std::source_location loc = std::source_location::current());

// The norms into an output of another float dtype, in the same pass: fp8
// (float8_e4m3fn / float8_e5m2) for an fp8 GEMM that follows -- out =
// fp8(norm(x) / scale), rounded to nearest, e4m3 saturating to +-448 (e5m2
// overflows to inf), as vLLM's static-scale fp8 quant fuses it -- or f32 /
// f16 / bf16 (scale 1 keeps the values). out: x's shape, contiguous.
void rms_norm_out(Tensor& out, const Tensor& x, const Tensor& weight, double eps = 1e-6,
                  double scale = 1.0, std::source_location loc = std::source_location::current());
void layer_norm_out(Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& bias,
                    double eps = 1e-5, double scale = 1.0,
                    std::source_location loc = std::source_location::current());
// residual becomes x + residual (in x's dtype, in place); out = the norm of it.
void add_rms_norm_out(Tensor& out, const Tensor& x, Tensor& residual, const Tensor& weight,
                      double eps = 1e-6, double scale = 1.0,
                      std::source_location loc = std::source_location::current());

// The kernel an op launches for x (not launched), for its CUDA and IR:
// op is "softmax", "log_softmax", "rms_norm", "layer_norm" or "add_rms_norm".
Kernel row_kernel(const std::string& op, const Tensor& x,
                  std::source_location loc = std::source_location::current());

}  // namespace tx::ops
