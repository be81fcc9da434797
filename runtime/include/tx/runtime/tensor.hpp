// Tensors: typed, shaped, contiguous storage on a device (a CUDA GPU) or on
// the host. Kernels take them as arguments; a kernel launched on the GPU
// needs its tensors there, a kernel run on the host needs them on the host.
// Moving is explicit: t.to(Device::host()).
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "tx/dtype.hpp"
#include "tx/error.hpp"
#include "tx/type_map.hpp"

namespace tx {

enum class DeviceKind { cuda, host };

struct Device {
  DeviceKind kind = DeviceKind::host;
  int index = 0;
  static Device cuda(int index = 0) { return {DeviceKind::cuda, index}; }
  static Device host() { return {DeviceKind::host, 0}; }
  bool is_cuda() const { return kind == DeviceKind::cuda; }
  bool operator==(const Device&) const = default;
  std::string str() const;  // "cuda:0", "host"
};

// Where kernels and new tensors go by default: TX_DEVICE=cuda|host if set,
// else the host under TX_CHECK=1 (the checked mode runs there), else the GPU
// when one is usable, else the host.
Device default_device();

namespace runtime {
// TX_CHECK=1 (or any value but 0) in the environment.
bool check_from_env();
}  // namespace runtime

class Tensor {
 public:
  Tensor() = default;

  // Uninitialized storage (host memory is 64-byte aligned, device memory 256).
  static Tensor empty(std::vector<std::int64_t> shape, DType dtype,
                      Device device = default_device());
  // Each value rounded to dtype as the GPU stores it (tx::encode_bits).
  static Tensor from_doubles(const std::vector<double>& values, std::vector<std::int64_t> shape,
                             DType dtype, Device device = default_device());
  // Raw element bytes (size must equal numel * dtype.bytes()).
  static Tensor from_bytes(const void* data, std::size_t nbytes, std::vector<std::int64_t> shape,
                           DType dtype, Device device = default_device());

  // Typed construction and read-back for C++ element types (float, int32_t, ...).
  template <class T>
  static Tensor from_vector(const std::vector<T>& values, std::vector<std::int64_t> shape,
                            Device device = default_device()) {
    return from_bytes(values.data(), values.size() * sizeof(T), std::move(shape), dtype_of<T>(),
                      device);
  }
  template <class T>
  std::vector<T> to_vector() const {
    if (dtype_of<T>() != dtype_)
      fail("tx.Tensor.to_vector", "", {},
           "tensor holds " + dtype_.name() + ", not " + dtype_of<T>().name());
    std::vector<std::uint8_t> b = to_bytes();
    std::vector<T> out(b.size() / sizeof(T));
    if (!out.empty()) std::memcpy(out.data(), b.data(), b.size());
    return out;
  }

  bool defined() const { return storage_ != nullptr; }
  const std::vector<std::int64_t>& shape() const { return shape_; }
  DType dtype() const { return dtype_; }
  Device device() const;
  std::int64_t numel() const;
  std::size_t nbytes() const;

  // Host pointer for host tensors, device address (as void*) for GPU tensors.
  void* data_ptr() const;

  Tensor to(Device d) const;  // a copy on d (the same tensor if already there)
  // The same storage under another shape with the same element count (no
  // copy): kernels check shapes exactly, so this is how a flat tensor meets a
  // kernel that declares (M, N).
  Tensor reshape(std::vector<std::int64_t> shape) const;
  std::vector<double> to_doubles() const;
  std::vector<std::uint8_t> to_bytes() const;
  void copy_from_bytes(const void* data, std::size_t nbytes);
  // Sets every element to the same bit pattern (e.g. a NaN) so unwritten
  // elements show after a kernel runs.
  void fill_bits(std::uint64_t pattern);

 private:
  struct Storage;
  std::shared_ptr<Storage> storage_;
  std::vector<std::int64_t> shape_;
  DType dtype_;
};

}  // namespace tx
