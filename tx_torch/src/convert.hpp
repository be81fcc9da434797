// The seam between PyTorch and tx: dtypes, zero-copy tensor views both ways,
// the device and stream a call runs on, and tx errors as PyTorch errors.
//
// Every registered op follows one pattern:
//
//   return tx_torch::call("tx::gelu", [&] {
//     tx_torch::OnDevice on(x);              // torch's current stream, for tx
//     tx::ops::run("gelu", {tx_torch::view(x)}, out_view);
//   });
//
// `view` borrows the tensor's memory (no copy), strides included; `to_torch`
// hands a tensor tx allocated to PyTorch through DLPack (no copy either).
#pragma once

#include <ATen/ATen.h>

#include <functional>
#include <string>

#include "tx/runtime/stream.hpp"
#include "tx/runtime/tensor.hpp"

namespace tx_torch {

// tx's dtype of a torch dtype; a torch error naming the op and argument
// when tx has none (complex, quantized, ...).
tx::DType tx_dtype(at::ScalarType t, const char* op, const char* arg);
at::ScalarType torch_dtype(tx::DType t);

// The tensor's memory as a tx tensor: same data pointer, shape and element
// strides (a 0-dim tensor is viewed as shape (1,): tx kernels have rank >= 1).
// CPU tensors become host tensors (the host JIT runs them), CUDA tensors
// tensors of their GPU.
tx::Tensor view(const at::Tensor& t, const char* op, const char* arg);

// A tensor tx allocated, as a torch tensor over the same memory (DLPack).
at::Tensor to_torch(const tx::Tensor& t);

// For the lifetime of the object, tx's GPU work on t's device goes to
// PyTorch's current stream of that device (tx::StreamGuard), so that it is
// ordered with the caller's torch work; nothing for CPU tensors.
class OnDevice {
 public:
  explicit OnDevice(const at::Tensor& t);
  explicit OnDevice(const c10::Device& d);
  ~OnDevice();
  OnDevice(const OnDevice&) = delete;
  OnDevice& operator=(const OnDevice&) = delete;

 private:
  std::unique_ptr<tx::StreamGuard> guard_;
};

// Runs f; a tx::Error becomes a torch error (RuntimeError in Python) whose
// message is tx's (op, operand, line, reason), prefixed by the torch op.
void call(const char* op, const std::function<void()>& f);

// Checks shared by the registered ops (torch errors, named for `op`).
void check_same_device(const char* op, const std::vector<const at::Tensor*>& ts);
// An out= tensor of the wrong shape is resized (as PyTorch's out= ops do);
// its dtype must be the result's.
void prepare_out(const char* op, at::Tensor& out, c10::SymIntArrayRef shape, at::ScalarType dtype);

// Runs `compute` into `out`: directly when out is contiguous, else into a
// contiguous temporary that is then copied into out (a strided out= or an
// in-place op on a view).
void into(at::Tensor& out, const std::function<void(at::Tensor&)>& compute);

// tx warnings (a fallback variant, a strided input copied) as PyTorch
// warnings (UserWarning in Python).
void install_warning_handler();

}  // namespace tx_torch
