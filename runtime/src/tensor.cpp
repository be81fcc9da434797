// Tensors on the GPU or the host. Element values cross the API as doubles
// rounded the way the GPU stores them (tx::encode_bits), or as raw bytes.
#include "tx/runtime/tensor.hpp"

#include <cstdlib>
#include <cstring>

#include "tx/error.hpp"
#include "tx/expr.hpp"
#include "tx/runtime/cuda_driver.hpp"

namespace tx {

struct Tensor::Storage {
  Device device;
  std::size_t bytes = 0;
  void* host = nullptr;
  runtime::DevicePtr dev = 0;
  ~Storage() {
    if (host) std::free(host);
    if (dev) runtime::device_free(dev);
  }
};

std::string Device::str() const { return is_cuda() ? "cuda:" + std::to_string(index) : "host"; }

Device default_device() {
  if (const char* v = std::getenv("TX_DEVICE"); v && *v) {
    std::string s = v;
    if (s == "cuda" || s == "gpu") return Device::cuda();
    if (s == "host" || s == "cpu") return Device::host();
    fail("TX_DEVICE", s, {}, "unknown device; use cuda (or gpu) or host (or cpu)");
  }
  return runtime::cuda_available() ? Device::cuda() : Device::host();
}

namespace {

std::int64_t count(const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (auto e : shape) {
    if (e < 0) fail("Tensor", "", {}, "negative extent " + std::to_string(e));
    n *= e;
  }
  return n;
}

}  // namespace

Tensor Tensor::empty(std::vector<std::int64_t> shape, DType dtype, Device device) {
  if (dtype.is_void() || dtype.is_handle()) fail("Tensor.empty", "", {}, "dtype " + dtype.name() + " has no elements");
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  auto st = std::make_shared<Storage>();
  st->device = device;
  st->bytes = static_cast<std::size_t>(count(t.shape_)) * static_cast<std::size_t>(dtype.bytes());
  if (device.is_cuda()) {
    std::string why;
    if (!runtime::cuda_available(&why)) fail("Tensor.empty", device.str(), {}, "no usable GPU: " + why);
    st->dev = runtime::device_alloc(st->bytes);
  } else {
    std::size_t rounded = (st->bytes + 63) / 64 * 64;
    st->host = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
    if (!st->host) fail("Tensor.empty", "host", {}, "out of memory (" + std::to_string(st->bytes) + " bytes)");
  }
  t.storage_ = std::move(st);
  return t;
}

Tensor Tensor::from_bytes(const void* data, std::size_t nbytes, std::vector<std::int64_t> shape,
                          DType dtype, Device device) {
  Tensor t = empty(std::move(shape), dtype, device);
  t.copy_from_bytes(data, nbytes);
  return t;
}

Tensor Tensor::from_doubles(const std::vector<double>& values, std::vector<std::int64_t> shape,
                            DType dtype, Device device) {
  std::int64_t n = count(shape);
  if (static_cast<std::int64_t>(values.size()) != n)
    fail("Tensor.from_doubles", "", {},
         std::to_string(values.size()) + " values for a shape of " + std::to_string(n) + " elements");
  std::size_t es = static_cast<std::size_t>(dtype.bytes());
  std::vector<unsigned char> bytes(values.size() * es);
  for (std::size_t i = 0; i < values.size(); ++i) {
    std::uint64_t b = encode_bits(values[i], dtype);
    std::memcpy(bytes.data() + i * es, &b, es);  // little-endian: the low bytes
  }
  return from_bytes(bytes.data(), bytes.size(), std::move(shape), dtype, device);
}

Device Tensor::device() const { return storage_ ? storage_->device : Device::host(); }
std::int64_t Tensor::numel() const { return count(shape_); }
std::size_t Tensor::nbytes() const { return storage_ ? storage_->bytes : 0; }

void* Tensor::data_ptr() const {
  if (!storage_) return nullptr;
  if (storage_->device.is_cuda())
    return reinterpret_cast<void*>(static_cast<std::uintptr_t>(storage_->dev));
  return storage_->host;
}

void Tensor::copy_from_bytes(const void* data, std::size_t nbytes) {
  if (!storage_) fail("Tensor.copy_from_bytes", "", {}, "tensor is undefined");
  if (nbytes != storage_->bytes)
    fail("Tensor.copy_from_bytes", "", {},
         std::to_string(nbytes) + " bytes for a tensor of " + std::to_string(storage_->bytes));
  if (storage_->device.is_cuda())
    runtime::copy_to_device(storage_->dev, data, nbytes);
  else if (nbytes)
    std::memcpy(storage_->host, data, nbytes);
}

std::vector<std::uint8_t> Tensor::to_bytes() const {
  std::vector<std::uint8_t> out(nbytes());
  if (!storage_ || out.empty()) return out;
  if (storage_->device.is_cuda())
    runtime::copy_to_host(out.data(), storage_->dev, out.size());
  else
    std::memcpy(out.data(), storage_->host, out.size());
  return out;
}

std::vector<double> Tensor::to_doubles() const {
  std::vector<std::uint8_t> bytes = to_bytes();
  std::size_t es = static_cast<std::size_t>(dtype_.bytes());
  std::vector<double> out(static_cast<std::size_t>(numel()));
  for (std::size_t i = 0; i < out.size(); ++i) {
    std::uint64_t b = 0;
    std::memcpy(&b, bytes.data() + i * es, es);
    out[i] = decode_bits(b, dtype_);
  }
  return out;
}

Tensor Tensor::to(Device d) const {
  if (!storage_) fail("Tensor.to", "", {}, "tensor is undefined");
  if (d == device()) return *this;
  Tensor t = empty(shape_, dtype_, d);
  if (storage_->device.is_cuda() && d.is_cuda())
    runtime::copy_device_to_device(t.storage_->dev, storage_->dev, storage_->bytes);
  else {
    auto bytes = to_bytes();
    t.copy_from_bytes(bytes.data(), bytes.size());
  }
  return t;
}

void Tensor::fill_bits(std::uint64_t pattern) {
  if (!storage_) fail("Tensor.fill_bits", "", {}, "tensor is undefined");
  std::size_t es = static_cast<std::size_t>(dtype_.bytes());
  std::vector<std::uint8_t> bytes(storage_->bytes);
  for (std::size_t i = 0; i + es <= bytes.size(); i += es) std::memcpy(bytes.data() + i, &pattern, es);
  copy_from_bytes(bytes.data(), bytes.size());
}

}  // namespace tx
