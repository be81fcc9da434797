// Tensors: typed, shaped views of storage on a device (a CUDA GPU) or on the
// host. The storage is tx's own (Tensor::empty, from_bytes, ...) or borrowed
// (Tensor::from_blob: the caller's memory, the caller's lifetime). A view has
// element strides and an offset (transpose, slice, expand, as_strided), as in
// DLPack and PyTorch; kernels take contiguous tensors, the op library takes
// any view. Moving is explicit: t.to(Device::host()).
#pragma once

#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <source_location>
#include <string>
#include <vector>

#include "tx/dtype.hpp"
#include "tx/error.hpp"
#include "tx/type_map.hpp"

// DLPack's structs (dlpack/dlpack.h), declared here so that users of tx need
// the DLPack header only where they exchange tensors.
struct DLManagedTensor;
struct DLManagedTensorVersioned;

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

// Whether tx was built with a DLPack header (Tensor::from_dlpack works).
bool dlpack_available();

// Where kernels and new tensors go by default: TX_DEVICE=cuda|host if set,
// else the host under TX_CHECK=1 (the checked mode runs there), else the GPU
// when one is usable, else the host.
Device default_device();

namespace runtime {
// TX_CHECK=1 (or any value but 0) in the environment.
bool check_from_env();
}  // namespace runtime

// A symmetric allocation: the same size on every rank of a group, each rank's
// copy addressable by every other (tx::dist::Group::empty_symmetric; see
// tx/runtime/dist.hpp).
struct SymmetricInfo {
  int rank = 0, world = 1;
  // peers[r]: rank r's copy as this process addresses it (a device address as
  // void* on a GPU, a host pointer on the host).
  std::vector<void*> peers;
  // `world` 8-byte pointers (the values of `peers`) in memory the kernel
  // reads: device memory of this rank's GPU, host memory for host ranks.
  void* table = nullptr;
  std::size_t bytes = 0;  // bytes of each copy
};

class Tensor;
namespace runtime {
// How Tensor::contiguous() gathers a strided view on the GPU: the op
// library installs its strided copy kernel (it sits above the runtime);
// without one, through host memory.
using DeviceGather = void (*)(const Tensor& src, Tensor& dst);
void set_device_gather(DeviceGather gather);
}  // namespace runtime

class Tensor {
 public:
  Tensor() = default;

  // Uninitialized storage (host memory is 64-byte aligned, device memory 256).
  static Tensor empty(std::vector<std::int64_t> shape, DType dtype,
                      Device device = default_device(),
                      std::source_location loc = std::source_location::current());
  // Each value rounded to dtype as the GPU stores it (tx::encode_bits).
  static Tensor from_doubles(const std::vector<double>& values, std::vector<std::int64_t> shape,
                             DType dtype, Device device = default_device(),
                             std::source_location loc = std::source_location::current());
  // Raw element bytes (size must equal numel * dtype.bytes()).
  static Tensor from_bytes(const void* data, std::size_t nbytes, std::vector<std::int64_t> shape,
                           DType dtype, Device device = default_device(),
                           std::source_location loc = std::source_location::current());

  // A tensor over memory tx does not own: `data` is a host pointer or a
  // device address (as void*) on `device`; `strides` are in elements
  // (default: row-major). tx never frees it; `release`, if given, runs when
  // the last tensor viewing the memory is gone (a DLPack deleter, say).
  static Tensor from_blob(void* data, std::vector<std::int64_t> shape, DType dtype, Device device,
                          std::vector<std::int64_t> strides = {},
                          std::function<void()> release = {},
                          std::source_location loc = std::source_location::current());

  // This rank's copy of a symmetric allocation (what Group::empty_symmetric
  // returns): from_blob's tensor over `local` that also carries `info`.
  static Tensor from_symmetric(void* local, std::vector<std::int64_t> shape, DType dtype,
                               Device device, std::shared_ptr<const SymmetricInfo> info,
                               std::function<void()> release);

  // DLPack, zero-copy both ways. from_dlpack takes ownership of `m`: the
  // tensor borrows its memory and calls m->deleter when the last view is
  // gone. to_dlpack hands out a DLManagedTensor that keeps this tensor's
  // storage alive until its deleter is called. The versioned struct needs a
  // DLPack 1.0 header at build time; without one, a tx error.
  static Tensor from_dlpack(DLManagedTensor* m);
  static Tensor from_dlpack(DLManagedTensorVersioned* m);
  DLManagedTensor* to_dlpack() const;
  DLManagedTensorVersioned* to_dlpack_versioned() const;

  // Typed construction and read-back for C++ element types (float, int32_t, ...).
  template <class T>
  static Tensor from_vector(const std::vector<T>& values, std::vector<std::int64_t> shape,
                            Device device = default_device(),
                            std::source_location loc = std::source_location::current()) {
    return from_bytes(values.data(), values.size() * sizeof(T), std::move(shape), dtype_of<T>(),
                      device, loc);
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
  // Element strides, one per dimension (row-major for a new tensor).
  const std::vector<std::int64_t>& strides() const { return strides_; }
  // Elements from the start of the storage to element (0, ..., 0).
  std::int64_t storage_offset() const { return offset_; }
  DType dtype() const { return dtype_; }
  Device device() const;
  std::int64_t numel() const;
  std::size_t nbytes() const;  // numel * element size
  // Row-major without gaps (dimensions of extent 1 may have any stride).
  bool is_contiguous() const;
  // The memory is the caller's (from_blob), not tx's.
  bool is_borrowed() const;
  // The symmetric allocation the tensor views (its views keep it), or
  // nullptr for ordinary memory.
  const SymmetricInfo* symmetric() const;

  // Host pointer for host tensors, device address (as void*) for GPU
  // tensors: of element (0, ..., 0).
  void* data_ptr() const;

  // Views: the same storage, other strides (no copy).
  Tensor transpose(int dim0, int dim1) const;
  Tensor permute(const std::vector<int>& dims) const;
  // Elements start, start + step, ... below stop on `dim`.
  Tensor slice(int dim, std::int64_t start, std::int64_t stop, std::int64_t step = 1) const;
  // Dimensions of extent 1 repeated (stride 0) to `shape`; new leading
  // dimensions may be added (NumPy broadcasting).
  Tensor expand(std::vector<std::int64_t> shape) const;
  Tensor as_strided(std::vector<std::int64_t> shape, std::vector<std::int64_t> strides,
                    std::int64_t storage_offset) const;
  // This tensor if contiguous, else a contiguous copy on the same device.
  Tensor contiguous() const;

  Tensor to(Device d) const;  // a copy on d (the same tensor if already there)
  // The same storage under another shape with the same element count (no
  // copy; the tensor must be contiguous): kernels check shapes exactly, so
  // this is how a flat tensor meets a kernel that declares (M, N).
  Tensor reshape(std::vector<std::int64_t> shape,
                 std::source_location loc = std::source_location::current()) const;
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
  std::vector<std::int64_t> strides_;
  std::int64_t offset_ = 0;
  DType dtype_;
};

}  // namespace tx
