#include "convert.hpp"

#include <ATen/DLConvertor.h>
#include <c10/util/Exception.h>

#ifdef TX_TORCH_CUDA
#include <c10/cuda/CUDAStream.h>
#endif

#include "tx/error.hpp"

namespace tx_torch {

tx::DType tx_dtype(at::ScalarType t, const char* op, const char* arg) {
  switch (t) {
    case at::kFloat:
      return tx::f32;
    case at::kHalf:
      return tx::f16;
    case at::kBFloat16:
      return tx::bf16;
    case at::kDouble:
      return tx::f64;
    case at::kFloat8_e4m3fn:
      return tx::f8e4m3;
    case at::kFloat8_e5m2:
      return tx::f8e5m2;
    case at::kChar:
      return tx::i8;
    case at::kShort:
      return tx::i16;
    case at::kInt:
      return tx::i32;
    case at::kLong:
      return tx::i64;
    case at::kByte:
      return tx::u8;
    case at::kUInt16:
      return tx::u16;
    case at::kUInt32:
      return tx::u32;
    case at::kUInt64:
      return tx::u64;
    case at::kBool:
      return tx::boolean;
    default:
      break;
  }
  TORCH_CHECK(false, op, ": ", arg, " has dtype ", t,
              ", which tx does not have (floats, float8_e4m3fn / float8_e5m2, integers and bool)");
}

at::ScalarType torch_dtype(tx::DType t) {
  if (t == tx::f32) return at::kFloat;
  if (t == tx::f16) return at::kHalf;
  if (t == tx::bf16) return at::kBFloat16;
  if (t == tx::f64) return at::kDouble;
  if (t == tx::f8e4m3) return at::kFloat8_e4m3fn;
  if (t == tx::f8e5m2) return at::kFloat8_e5m2;
  if (t == tx::i8) return at::kChar;
  if (t == tx::i16) return at::kShort;
  if (t == tx::i32) return at::kInt;
  if (t == tx::i64) return at::kLong;
  if (t == tx::u8) return at::kByte;
  if (t == tx::u16) return at::kUInt16;
  if (t == tx::u32) return at::kUInt32;
  if (t == tx::u64) return at::kUInt64;
  if (t == tx::boolean) return at::kBool;
  TORCH_CHECK(false, "tx dtype ", t.name(), " has no torch dtype");
}

tx::Tensor view(const at::Tensor& t, const char* op, const char* arg) {
  TORCH_CHECK(t.defined(), op, ": ", arg, " is undefined");
  tx::DType dt = tx_dtype(t.scalar_type(), op, arg);
  tx::Device dev;
  if (t.is_cuda())
    dev = tx::Device::cuda(t.get_device());
  else if (t.is_cpu())
    dev = tx::Device::host();
  else
    TORCH_CHECK(false, op, ": ", arg, " is on ", t.device(),
                "; tx runs on CUDA GPUs and on the CPU (through its host JIT)");
  std::vector<std::int64_t> shape(t.sizes().begin(), t.sizes().end());
  std::vector<std::int64_t> strides(t.strides().begin(), t.strides().end());
  if (shape.empty()) {
    shape = {1};
    strides = {1};
  }
  return tx::Tensor::from_blob(t.data_ptr(), std::move(shape), dt, dev, std::move(strides));
}

at::Tensor to_torch(const tx::Tensor& t) { return at::fromDLPack(t.to_dlpack()); }

OnDevice::OnDevice(const at::Tensor& t) : OnDevice(t.device()) {}

OnDevice::OnDevice(const c10::Device& d) {
  if (!d.is_cuda()) return;
#ifdef TX_TORCH_CUDA
  const int index = d.has_index() ? d.index() : c10::cuda::current_device();
  cudaStream_t s = c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(index)).stream();
  guard_ = std::make_unique<tx::StreamGuard>(
      tx::Stream::wrap(static_cast<void*>(s), tx::Device::cuda(index)));
#else
  TORCH_CHECK(false, "tx_torch was built against a PyTorch without CUDA");
#endif
}

OnDevice::~OnDevice() = default;

void call(const char* op, const std::function<void()>& f) {
  try {
    f();
  } catch (const tx::Error& e) {
    TORCH_CHECK(false, op, ": ", e.what());
  }
}

void check_same_device(const char* op, const std::vector<const at::Tensor*>& ts) {
  const at::Tensor* first = nullptr;
  for (const at::Tensor* t : ts) {
    if (!t || !t->defined()) continue;
    // A 0-dim CPU tensor is a number PyTorch lets other devices read; tx
    // kernels read memory of their own device only.
    if (!first) {
      first = t;
      continue;
    }
    TORCH_CHECK(t->device() == first->device(), op, ": tensors on ", first->device(), " and ",
                t->device(), "; tx runs an op on one device (move them with .to())");
  }
}

void prepare_out(const char* op, at::Tensor& out, c10::SymIntArrayRef shape, at::ScalarType dtype) {
  TORCH_CHECK(out.scalar_type() == dtype, op, ": out has dtype ", out.scalar_type(),
              " but the result is ", dtype);
  if (out.sym_sizes() != shape) out.resize__symint(shape);
}

void into(at::Tensor& out, const std::function<void(at::Tensor&)>& compute) {
  if (out.numel() == 0) return;
  if (out.is_contiguous()) {
    compute(out);
    return;
  }
  at::Tensor tmp = at::empty(out.sizes(), out.options());
  compute(tmp);
  out.copy_(tmp);
}

namespace {
void warn_through_torch(const std::string& message) { TORCH_WARN(message); }
}  // namespace

void install_warning_handler() { tx::set_warning_handler(&warn_through_torch); }

}  // namespace tx_torch
