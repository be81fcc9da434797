// Tensors on the GPU or on the host. Values cross the API either as raw
// element bytes or as doubles rounded the way the GPU stores them
// (tx::encode_bits / tx::decode_bits from the DSL layer).
#include "tx/runtime/tensor.hpp"

#include <bit>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "tx/error.hpp"
#include "tx/expr.hpp"
#include "tx/runtime/cuda_driver.hpp"

namespace tx {

// encode_bits returns an element's bits in the low bytes of a uint64; they
// are copied to memory as they are, which is right only on little-endian.
static_assert(std::endian::native == std::endian::little, "tx tensors assume little-endian");

struct Tensor::Storage {
  Device device;
  std::size_t bytes = 0;
  void* host = nullptr;
  runtime::DevicePtr dev = 0;

  Storage() = default;
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  ~Storage() {
    std::free(host);
    runtime::device_free(dev);
  }
};

std::string Device::str() const { return is_cuda() ? "cuda:" + std::to_string(index) : "host"; }

Device default_device() {
  if (const char* v = std::getenv("TX_DEVICE"); v && *v) {
    std::string s = v;
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (s == "cuda" || s == "gpu") return Device::cuda();
    if (s == "host" || s == "cpu") return Device::host();
    fail("tx.default_device", "TX_DEVICE=" + std::string(v), {}, "unknown device",
         "valid values: cuda, gpu, host, cpu");
  }
  if (runtime::check_from_env()) return Device::host();
  return runtime::cuda_available() ? Device::cuda() : Device::host();
}

namespace runtime {
bool check_from_env() {
  const char* v = std::getenv("TX_CHECK");
  return v && *v && std::string(v) != "0";
}
}  // namespace runtime

namespace {

std::int64_t element_count(const std::vector<std::int64_t>& shape, const char* op) {
  std::int64_t n = 1;
  for (std::int64_t e : shape) {
    if (e < 0) fail(op, "", {}, "negative extent " + std::to_string(e) + " in the shape");
    if (e != 0 && n > std::numeric_limits<std::int64_t>::max() / e)
      fail(op, "", {}, "the shape has more elements than fit in 64 bits");
    n *= e;
  }
  return n;
}

std::string shape_str(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace

Tensor Tensor::empty(std::vector<std::int64_t> shape, DType dtype, Device device) {
  if (dtype.is_void() || dtype.is_handle() || dtype.bytes() == 0)
    fail("tx.Tensor.empty", "", {}, "dtype " + dtype.name() + " has no elements");
  const std::int64_t n = element_count(shape, "Tensor.empty");
  const auto es = static_cast<std::size_t>(dtype.bytes());
  if (static_cast<std::uint64_t>(n) > std::numeric_limits<std::size_t>::max() / es)
    fail("tx.Tensor.empty", "", {}, "shape " + shape_str(shape) + " is too large");
  auto st = std::make_shared<Storage>();
  st->device = device;
  st->bytes = static_cast<std::size_t>(n) * es;
  if (device.is_cuda()) {
    std::string why;
    if (!runtime::cuda_available(&why))
      fail("tx.Tensor.empty", device.str(), {}, "no usable GPU: " + why,
           "create the tensor on Device::host(), or set TX_DEVICE=host");
    const int ordinal = runtime::current_device().ordinal;
    if (device.index != ordinal)
      fail("tx.Tensor.empty", device.str(), {},
           "tx uses one GPU per process, cuda:" + std::to_string(ordinal) +
               " (select another with TX_CUDA_DEVICE)");
    st->dev = runtime::device_alloc(st->bytes);
  } else {
    // aligned_alloc wants a multiple of the alignment, and a distinct
    // pointer even for an empty tensor.
    const std::size_t rounded = st->bytes == 0 ? 64 : (st->bytes + 63) / 64 * 64;
    st->host = std::aligned_alloc(64, rounded);
    if (!st->host)
      fail("tx.Tensor.empty", "host", {},
           "out of memory (" + std::to_string(st->bytes) + " bytes)");
  }
  Tensor t;
  t.storage_ = std::move(st);
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  return t;
}

Tensor Tensor::from_bytes(const void* data, std::size_t nbytes, std::vector<std::int64_t> shape,
                          DType dtype, Device device) {
  if (dtype.is_void() || dtype.is_handle() || dtype.bytes() == 0)
    fail("tx.Tensor.from_bytes", "", {}, "dtype " + dtype.name() + " has no elements");
  const auto want = static_cast<std::uint64_t>(element_count(shape, "Tensor.from_bytes")) *
                    static_cast<std::uint64_t>(dtype.bytes());
  if (nbytes != want)
    fail("tx.Tensor.from_bytes", "", {},
         std::to_string(nbytes) + " bytes given for shape " + shape_str(shape) + " of " +
             dtype.name() + ", which needs " + std::to_string(want));
  Tensor t = empty(std::move(shape), dtype, device);
  t.copy_from_bytes(data, nbytes);
  return t;
}

Tensor Tensor::from_doubles(const std::vector<double>& values, std::vector<std::int64_t> shape,
                            DType dtype, Device device) {
  const std::int64_t n = element_count(shape, "Tensor.from_doubles");
  if (static_cast<std::uint64_t>(values.size()) != static_cast<std::uint64_t>(n))
    fail("tx.Tensor.from_doubles", "", {},
         std::to_string(values.size()) + " values given for shape " + shape_str(shape) +
             ", which has " + std::to_string(n) + " elements");
  if (dtype.is_void() || dtype.is_handle() || dtype.bytes() == 0)
    fail("tx.Tensor.from_doubles", "", {}, "dtype " + dtype.name() + " has no elements");
  const auto es = static_cast<std::size_t>(dtype.bytes());
  std::vector<unsigned char> bytes(values.size() * es);
  for (std::size_t i = 0; i < values.size(); ++i) {
    const std::uint64_t b = encode_bits(values[i], dtype);
    std::memcpy(bytes.data() + i * es, &b, es);
  }
  return from_bytes(bytes.data(), bytes.size(), std::move(shape), dtype, device);
}

Device Tensor::device() const { return storage_ ? storage_->device : Device::host(); }

std::int64_t Tensor::numel() const {
  if (!storage_) return 0;
  std::int64_t n = 1;
  for (std::int64_t e : shape_) n *= e;
  return n;
}

Tensor Tensor::reshape(std::vector<std::int64_t> shape) const {
  if (!storage_) fail("tx.Tensor.reshape", "", {}, "the tensor is undefined");
  std::int64_t n = element_count(shape, "Tensor.reshape");
  if (n != numel())
    fail("tx.Tensor.reshape", "", {},
         "shape " + shape_str(shape) + " holds " + std::to_string(n) + " elements, the tensor " +
             std::to_string(numel()));
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

std::size_t Tensor::nbytes() const { return storage_ ? storage_->bytes : 0; }

void* Tensor::data_ptr() const {
  if (!storage_) return nullptr;
  if (storage_->device.is_cuda())
    return reinterpret_cast<void*>(static_cast<std::uintptr_t>(storage_->dev));
  return storage_->host;
}

void Tensor::copy_from_bytes(const void* data, std::size_t nbytes) {
  if (!storage_) fail("tx.Tensor.copy_from_bytes", "", {}, "the tensor is undefined");
  if (nbytes != storage_->bytes)
    fail(
        "Tensor.copy_from_bytes", "", {},
        std::to_string(nbytes) + " bytes given for a tensor of " + std::to_string(storage_->bytes));
  if (nbytes == 0) return;
  if (storage_->device.is_cuda())
    runtime::copy_to_device(storage_->dev, data, nbytes);
  else
    std::memcpy(storage_->host, data, nbytes);
}

std::vector<std::uint8_t> Tensor::to_bytes() const {
  std::vector<std::uint8_t> out(nbytes());
  if (out.empty()) return out;
  if (storage_->device.is_cuda())
    runtime::copy_to_host(out.data(), storage_->dev, out.size());
  else
    std::memcpy(out.data(), storage_->host, out.size());
  return out;
}

std::vector<double> Tensor::to_doubles() const {
  if (!storage_) fail("tx.Tensor.to_doubles", "", {}, "the tensor is undefined");
  const std::vector<std::uint8_t> bytes = to_bytes();
  const auto es = static_cast<std::size_t>(dtype_.bytes());
  std::vector<double> out(bytes.size() / es);
  for (std::size_t i = 0; i < out.size(); ++i) {
    std::uint64_t b = 0;
    std::memcpy(&b, bytes.data() + i * es, es);
    out[i] = decode_bits(b, dtype_);
  }
  return out;
}

Tensor Tensor::to(Device d) const {
  if (!storage_) fail("tx.Tensor.to", "", {}, "the tensor is undefined");
  if (d == device()) return *this;
  Tensor t = empty(shape_, dtype_, d);
  if (storage_->device.is_cuda() && d.is_cuda()) {
    runtime::copy_device_to_device(t.storage_->dev, storage_->dev, storage_->bytes);
  } else if (d.is_cuda()) {
    runtime::copy_to_device(t.storage_->dev, storage_->host, storage_->bytes);
  } else if (storage_->device.is_cuda()) {
    runtime::copy_to_host(t.storage_->host, storage_->dev, storage_->bytes);
  } else if (storage_->bytes) {
    std::memcpy(t.storage_->host, storage_->host, storage_->bytes);
  }
  return t;
}

void Tensor::fill_bits(std::uint64_t pattern) {
  if (!storage_) fail("tx.Tensor.fill_bits", "", {}, "the tensor is undefined");
  const auto es = static_cast<std::size_t>(dtype_.bytes());
  std::vector<std::uint8_t> bytes(storage_->bytes);
  for (std::size_t i = 0; i + es <= bytes.size(); i += es)
    std::memcpy(bytes.data() + i, &pattern, es);
  copy_from_bytes(bytes.data(), bytes.size());
}

}  // namespace tx
