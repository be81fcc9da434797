// Tensors on the GPU or on the host. Values cross the API either as raw
// element bytes or as doubles rounded the way the GPU stores them
// (tx::encode_bits / tx::decode_bits from the DSL layer).
#include "tx/runtime/tensor.hpp"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "tx/error.hpp"
#include "tx/expr.hpp"
#include "tx/runtime/cuda_driver.hpp"
#include "tx/runtime/stream.hpp"

namespace tx {

// encode_bits returns an element's bits in the low bytes of a uint64; they
// are copied to memory as they are, which is right only on little-endian.
static_assert(std::endian::native == std::endian::little, "tx tensors assume little-endian");

struct Tensor::Storage {
  Device device;
  std::size_t bytes = 0;
  void* host = nullptr;
  runtime::DevicePtr dev = 0;
  // The caller's memory (from_blob): never freed by tx; `release` runs
  // when the last view is gone.
  bool borrowed = false;
  std::function<void()> release;
  // Set for a rank's copy of a symmetric allocation (from_symmetric).
  std::shared_ptr<const SymmetricInfo> symmetric;
  // The stream a device allocation was made on (and is freed on): the
  // pool reuses the memory in that stream's order, never stalling the GPU.
  Stream stream;

  Storage() = default;
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  ~Storage() {
    if (borrowed) {
      if (release) release();
      return;
    }
    std::free(host);
    if (dev)
      runtime::device_free_cached(dev, bytes, device.index, stream.handle(), stream.is_tx_owned());
  }
  unsigned char* base() const {
    return device.is_cuda() ? reinterpret_cast<unsigned char*>(static_cast<std::uintptr_t>(dev))
                            : static_cast<unsigned char*>(host);
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

std::int64_t element_count(const std::vector<std::int64_t>& shape, const char* op,
                           SourceLoc loc = {}) {
  std::int64_t n = 1;
  for (std::int64_t e : shape) {
    if (e < 0) fail(op, "", loc, "negative extent " + std::to_string(e) + " in the shape");
    if (e != 0 && n > std::numeric_limits<std::int64_t>::max() / e)
      fail(op, "", loc, "the shape has more elements than fit in 64 bits");
    n *= e;
  }
  return n;
}

std::string shape_str(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// Copies between host and device memory, ordered with the GPU work of this
// thread: on its current stream (then waited for), so a copy after a kernel
// on a caller's stream sees what the kernel wrote.
// A copy that waits for its stream cannot be recorded into a CUDA graph:
// refused, saying why, while the stream is being captured.
void refuse_while_capturing(const Stream& s, const char* what) {
  if (runtime::stream_capturing(s.device().index, s.handle()))
    fail("tx.Tensor", s.device().str(), {},
         std::string(what) +
             " waits for the GPU, which cannot happen while a CUDA graph is being captured on "
             "the current stream of " +
             s.device().str() + ": copy outside the capture (before it, or after a replay)");
}
void host_copy_from_device(void* dst, runtime::DevicePtr src, std::size_t n, int ordinal) {
  Stream s = current_stream(Device::cuda(ordinal));
  if (s.is_default()) return runtime::copy_to_host(dst, src, n);
  refuse_while_capturing(s, "reading a tensor back to the host");
  runtime::copy_to_host(dst, src, n, s.handle());
  s.synchronize();
}
void device_copy_from_host(runtime::DevicePtr dst, const void* src, std::size_t n, int ordinal) {
  Stream s = current_stream(Device::cuda(ordinal));
  if (s.is_default()) return runtime::copy_to_device(dst, src, n);
  refuse_while_capturing(s, "copying host data into a tensor");
  runtime::copy_to_device(dst, src, n, s.handle());
  s.synchronize();
}
void device_copy(runtime::DevicePtr dst, runtime::DevicePtr src, std::size_t n, int ordinal) {
  Stream s = current_stream(Device::cuda(ordinal));
  runtime::copy_device_to_device(dst, src, n, s.handle());
}

std::vector<std::int64_t> row_major(const std::vector<std::int64_t>& shape) {
  std::vector<std::int64_t> s(shape.size());
  std::int64_t n = 1;
  for (std::size_t d = shape.size(); d-- > 0;) {
    s[d] = n;
    n *= std::max<std::int64_t>(shape[d], 1);
  }
  return s;
}

// The largest element offset a view reaches (its offset when empty).
std::int64_t last_offset(const std::vector<std::int64_t>& shape,
                         const std::vector<std::int64_t>& strides, std::int64_t offset) {
  std::int64_t hi = offset;
  for (std::size_t d = 0; d < shape.size(); ++d)
    if (shape[d] == 0) return offset;
  for (std::size_t d = 0; d < shape.size(); ++d) hi += (shape[d] - 1) * strides[d];
  return hi;
}

// Calls f(offset in elements) for every element of the view, row-major.
template <class F>
void for_each_offset(const std::vector<std::int64_t>& shape,
                     const std::vector<std::int64_t>& strides, std::int64_t offset, F&& f) {
  for (std::int64_t e : shape)
    if (e == 0) return;
  std::vector<std::int64_t> idx(shape.size(), 0);
  std::int64_t off = offset;
  while (true) {
    f(off);
    std::size_t d = shape.size();
    while (d-- > 0) {
      if (++idx[d] < shape[d]) {
        off += strides[d];
        break;
      }
      off -= (shape[d] - 1) * strides[d];
      idx[d] = 0;
    }
    if (d == static_cast<std::size_t>(-1)) return;
  }
}

}  // namespace

Tensor Tensor::empty(std::vector<std::int64_t> shape, DType dtype, Device device,
                     std::source_location loc) {
  if (dtype.is_void() || dtype.is_handle() || dtype.bytes() == 0)
    fail("tx.Tensor.empty", "", loc, "dtype " + dtype.name() + " has no elements");
  const std::int64_t n = element_count(shape, "tx.Tensor.empty", loc);
  const auto es = static_cast<std::size_t>(dtype.bytes());
  if (static_cast<std::uint64_t>(n) > std::numeric_limits<std::size_t>::max() / es)
    fail("tx.Tensor.empty", "", loc, "shape " + shape_str(shape) + " is too large");
  auto st = std::make_shared<Storage>();
  st->device = device;
  st->bytes = static_cast<std::size_t>(n) * es;
  if (device.is_cuda()) {
    std::string why;
    if (!runtime::cuda_available(&why))
      fail("tx.Tensor.empty", device.str(), loc, "no usable GPU: " + why,
           "create the tensor on Device::host(), or set TX_DEVICE=host");
    const int count = runtime::device_count();
    if (device.index < 0 || device.index >= count)
      fail("tx.Tensor.empty", device.str(), loc,
           "no such GPU: this machine has " + std::to_string(count) + " (cuda:0" +
               (count > 1 ? " .. cuda:" + std::to_string(count - 1) : std::string()) + ")");
    st->stream = current_stream(device);
    st->dev = runtime::device_alloc_cached(st->bytes, device.index, st->stream.handle(),
                                           st->stream.is_tx_owned());
  } else {
    // aligned_alloc wants a multiple of the alignment, and a distinct
    // pointer even for an empty tensor.
    const std::size_t rounded = st->bytes == 0 ? 64 : (st->bytes + 63) / 64 * 64;
    st->host = std::aligned_alloc(64, rounded);
    if (!st->host)
      fail("tx.Tensor.empty", "host", loc,
           "out of memory (" + std::to_string(st->bytes) + " bytes)");
  }
  Tensor t;
  t.storage_ = std::move(st);
  t.strides_ = row_major(shape);
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  return t;
}

Tensor Tensor::from_blob(void* data, std::vector<std::int64_t> shape, DType dtype, Device device,
                         std::vector<std::int64_t> strides, std::function<void()> release,
                         std::source_location loc) {
  const char* op = "tx.Tensor.from_blob";
  if (dtype.is_void() || dtype.is_handle() || dtype.bytes() == 0)
    fail(op, "", loc, "dtype " + dtype.name() + " has no elements");
  const std::int64_t n = element_count(shape, "tx.Tensor.from_blob", loc);
  if (strides.empty()) strides = row_major(shape);
  if (strides.size() != shape.size())
    fail(op, "strides", loc,
         std::to_string(strides.size()) + " strides for the " + std::to_string(shape.size()) +
             " dimensions of shape " + shape_str(shape));
  for (std::int64_t s : strides)
    if (s < 0)
      fail(op, "strides", loc,
           "negative stride " + std::to_string(s) + " in " + shape_str(strides) +
               " (tx views take strides of 0 or more)");
  if (!data && n > 0)
    fail(op, "data", loc, "a null pointer for " + std::to_string(n) + " elements");
  if (device.is_cuda()) {
    std::string why;
    if (!runtime::cuda_available(&why)) fail(op, device.str(), loc, "no usable GPU: " + why);
    // The driver knows where the memory lives: a host pointer, or memory of
    // another GPU, is refused here rather than faulting in a kernel.
    if (n > 0) {
      int owner = runtime::pointer_device(
          static_cast<runtime::DevicePtr>(reinterpret_cast<std::uintptr_t>(data)));
      if (owner < 0)
        fail(op, "data", loc,
             "the pointer is not device memory the CUDA driver knows (a host pointer? pass "
             "Device::host())");
      if (owner != device.index)
        fail(op, "data", loc,
             "the memory is on cuda:" + std::to_string(owner) + ", not " + device.str());
    }
  }
  auto st = std::make_shared<Storage>();
  st->device = device;
  st->borrowed = true;
  st->release = std::move(release);
  st->bytes = n == 0 ? 0
                     : static_cast<std::size_t>(last_offset(shape, strides, 0) + 1) *
                           static_cast<std::size_t>(dtype.bytes());
  if (device.is_cuda())
    st->dev = static_cast<runtime::DevicePtr>(reinterpret_cast<std::uintptr_t>(data));
  else
    st->host = data;
  Tensor t;
  t.storage_ = std::move(st);
  t.shape_ = std::move(shape);
  t.strides_ = std::move(strides);
  t.dtype_ = dtype;
  return t;
}

Tensor Tensor::from_symmetric(void* local, std::vector<std::int64_t> shape, DType dtype,
                              Device device, std::shared_ptr<const SymmetricInfo> info,
                              std::function<void()> release) {
  if (!info) fail("tx.Tensor.from_symmetric", "info", {}, "is null");
  Tensor t = from_blob(local, std::move(shape), dtype, device, {}, std::move(release));
  t.storage_->symmetric = std::move(info);
  return t;
}

bool Tensor::is_contiguous() const {
  std::int64_t want = 1;
  for (std::size_t d = shape_.size(); d-- > 0;) {
    if (shape_[d] == 0) return true;
    if (shape_[d] != 1 && strides_[d] != want) return false;
    want *= shape_[d];
  }
  return true;
}

bool Tensor::is_borrowed() const { return storage_ && storage_->borrowed; }

const SymmetricInfo* Tensor::symmetric() const {
  return storage_ ? storage_->symmetric.get() : nullptr;
}

Tensor Tensor::as_strided(std::vector<std::int64_t> shape, std::vector<std::int64_t> strides,
                          std::int64_t storage_offset) const {
  const char* op = "tx.Tensor.as_strided";
  if (!storage_) fail(op, "", {}, "the tensor is undefined");
  element_count(shape, "tx.Tensor.as_strided");
  if (strides.size() != shape.size())
    fail(op, "strides", {},
         std::to_string(strides.size()) + " strides for shape " + shape_str(shape));
  for (std::int64_t s : strides)
    if (s < 0) fail(op, "strides", {}, "negative stride " + std::to_string(s));
  if (storage_offset < 0) fail(op, "storage_offset", {}, "is negative");
  const auto es = static_cast<std::int64_t>(dtype_.bytes());
  const std::int64_t have = static_cast<std::int64_t>(storage_->bytes) / es;
  const std::int64_t hi = last_offset(shape, strides, storage_offset);
  if (element_count(shape, "tx.Tensor.as_strided") > 0 && hi >= have)
    fail(op, "", {},
         "shape " + shape_str(shape) + " with strides " + shape_str(strides) + " at offset " +
             std::to_string(storage_offset) + " reaches element " + std::to_string(hi) +
             ", past the " + std::to_string(have) + " elements of the storage");
  Tensor t = *this;
  t.shape_ = std::move(shape);
  t.strides_ = std::move(strides);
  t.offset_ = storage_offset;
  return t;
}

Tensor Tensor::transpose(int dim0, int dim1) const {
  std::vector<int> p(shape_.size());
  for (std::size_t d = 0; d < p.size(); ++d) p[d] = static_cast<int>(d);
  const int r = static_cast<int>(shape_.size());
  for (int d : {dim0, dim1})
    if (d < 0 || d >= r)
      fail("tx.Tensor.transpose", "dim " + std::to_string(d), {},
           "out of range for a tensor of " + std::to_string(r) + " dimensions");
  std::swap(p[static_cast<std::size_t>(dim0)], p[static_cast<std::size_t>(dim1)]);
  return permute(p);
}

Tensor Tensor::permute(const std::vector<int>& dims) const {
  const char* op = "tx.Tensor.permute";
  if (!storage_) fail(op, "", {}, "the tensor is undefined");
  if (dims.size() != shape_.size())
    fail(op, "dims", {},
         std::to_string(dims.size()) + " dims for a tensor of " + std::to_string(shape_.size()));
  std::vector<bool> seen(dims.size(), false);
  std::vector<std::int64_t> shape, strides;
  for (int d : dims) {
    if (d < 0 || d >= static_cast<int>(dims.size()) || seen[static_cast<std::size_t>(d)])
      fail(op, "dims", {}, "is not a permutation of 0 .. " + std::to_string(dims.size() - 1));
    seen[static_cast<std::size_t>(d)] = true;
    shape.push_back(shape_[static_cast<std::size_t>(d)]);
    strides.push_back(strides_[static_cast<std::size_t>(d)]);
  }
  Tensor t = *this;
  t.shape_ = std::move(shape);
  t.strides_ = std::move(strides);
  return t;
}

Tensor Tensor::slice(int dim, std::int64_t start, std::int64_t stop, std::int64_t step) const {
  const char* op = "tx.Tensor.slice";
  if (!storage_) fail(op, "", {}, "the tensor is undefined");
  if (dim < 0 || dim >= static_cast<int>(shape_.size()))
    fail(op, "dim " + std::to_string(dim), {},
         "out of range for a tensor of " + std::to_string(shape_.size()) + " dimensions");
  const auto d = static_cast<std::size_t>(dim);
  if (step <= 0) fail(op, "step", {}, "must be positive, got " + std::to_string(step));
  stop = std::min(stop, shape_[d]);
  if (start < 0 || start > stop)
    fail(op, "start", {},
         std::to_string(start) + " outside [0, " + std::to_string(stop) + "] on dimension " +
             std::to_string(dim) + " of extent " + std::to_string(shape_[d]));
  Tensor t = *this;
  t.offset_ += start * strides_[d];
  t.shape_[d] = (stop - start + step - 1) / step;
  t.strides_[d] *= step;
  if (t.shape_[d] == 0) t.offset_ = offset_;
  return t;
}

Tensor Tensor::expand(std::vector<std::int64_t> shape) const {
  const char* op = "tx.Tensor.expand";
  if (!storage_) fail(op, "", {}, "the tensor is undefined");
  if (shape.size() < shape_.size())
    fail(op, "shape", {},
         shape_str(shape) + " has fewer dimensions than the tensor's " + shape_str(shape_));
  const std::size_t lead = shape.size() - shape_.size();
  std::vector<std::int64_t> strides(shape.size(), 0);
  for (std::size_t d = 0; d < shape.size(); ++d) {
    if (d < lead) continue;  // a new dimension: stride 0
    std::int64_t have = shape_[d - lead];
    if (have == shape[d]) {
      strides[d] = strides_[d - lead];
    } else if (have != 1) {
      fail(op, "shape", {},
           "cannot expand " + shape_str(shape_) + " to " + shape_str(shape) + ": dimension " +
               std::to_string(d) + " has extent " + std::to_string(have) + ", not 1");
    }
  }
  Tensor t = *this;
  t.shape_ = std::move(shape);
  t.strides_ = std::move(strides);
  return t;
}

namespace {
std::atomic<runtime::DeviceGather>& device_gather() {
  static std::atomic<runtime::DeviceGather> g{nullptr};
  return g;
}
}  // namespace

void runtime::set_device_gather(DeviceGather gather) { device_gather().store(gather); }

Tensor Tensor::contiguous() const {
  if (!storage_) fail("tx.Tensor.contiguous", "", {}, "the tensor is undefined");
  if (is_contiguous()) return *this;
  if (device().is_cuda())
    if (runtime::DeviceGather g = device_gather().load()) {
      Tensor dense = empty(shape_, dtype_, device());
      g(*this, dense);
      return dense;
    }
  std::vector<std::uint8_t> bytes = to_bytes();
  return from_bytes(bytes.data(), bytes.size(), shape_, dtype_, device());
}

Tensor Tensor::from_bytes(const void* data, std::size_t nbytes, std::vector<std::int64_t> shape,
                          DType dtype, Device device, std::source_location loc) {
  if (dtype.is_void() || dtype.is_handle() || dtype.bytes() == 0)
    fail("tx.Tensor.from_bytes", "", loc, "dtype " + dtype.name() + " has no elements");
  const auto want = static_cast<std::uint64_t>(element_count(shape, "tx.Tensor.from_bytes", loc)) *
                    static_cast<std::uint64_t>(dtype.bytes());
  if (nbytes != want)
    fail("tx.Tensor.from_bytes", "", loc,
         std::to_string(nbytes) + " bytes given for shape " + shape_str(shape) + " of " +
             dtype.name() + ", which needs " + std::to_string(want));
  Tensor t = empty(std::move(shape), dtype, device);
  t.copy_from_bytes(data, nbytes);
  return t;
}

Tensor Tensor::from_doubles(const std::vector<double>& values, std::vector<std::int64_t> shape,
                            DType dtype, Device device, std::source_location loc) {
  const std::int64_t n = element_count(shape, "tx.Tensor.from_doubles", loc);
  if (static_cast<std::uint64_t>(values.size()) != static_cast<std::uint64_t>(n))
    fail("tx.Tensor.from_doubles", "", loc,
         std::to_string(values.size()) + " values given for shape " + shape_str(shape) +
             ", which has " + std::to_string(n) + " elements");
  if (dtype.is_void() || dtype.is_handle() || dtype.bytes() == 0)
    fail("tx.Tensor.from_doubles", "", loc, "dtype " + dtype.name() + " has no elements");
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

Tensor Tensor::reshape(std::vector<std::int64_t> shape, std::source_location loc) const {
  if (!storage_) fail("tx.Tensor.reshape", "", loc, "the tensor is undefined");
  std::int64_t n = element_count(shape, "tx.Tensor.reshape", loc);
  if (n != numel())
    fail("tx.Tensor.reshape", "", loc,
         "shape " + shape_str(shape) + " holds " + std::to_string(n) + " elements, the tensor " +
             std::to_string(numel()));
  if (!is_contiguous())
    fail("tx.Tensor.reshape", "", loc,
         "the tensor is a strided view (strides " + shape_str(strides_) +
             "); call .contiguous() first");
  Tensor t = *this;
  t.strides_ = row_major(shape);
  t.shape_ = std::move(shape);
  return t;
}

std::size_t Tensor::nbytes() const {
  return static_cast<std::size_t>(numel()) * static_cast<std::size_t>(dtype_.bytes());
}

void* Tensor::data_ptr() const {
  if (!storage_) return nullptr;
  return storage_->base() + offset_ * dtype_.bytes();
}

void Tensor::copy_from_bytes(const void* data, std::size_t nbytes) {
  if (!storage_) fail("tx.Tensor.copy_from_bytes", "", {}, "the tensor is undefined");
  if (nbytes != this->nbytes())
    fail("tx.Tensor.copy_from_bytes", "", {},
         std::to_string(nbytes) + " bytes given for a tensor of " + std::to_string(this->nbytes()));
  if (nbytes == 0) return;
  const auto es = static_cast<std::int64_t>(dtype_.bytes());
  if (is_contiguous()) {
    if (storage_->device.is_cuda())
      device_copy_from_host(reinterpret_cast<std::uintptr_t>(data_ptr()), data, nbytes,
                            storage_->device.index);
    else
      std::memcpy(data_ptr(), data, nbytes);
    return;
  }
  for (std::size_t d = 0; d < shape_.size(); ++d)
    if (strides_[d] == 0 && shape_[d] > 1)
      fail("tx.Tensor.copy_from_bytes", "", {},
           "the tensor is an expanded view (stride 0 on dimension " + std::to_string(d) +
               "): its elements share memory, so it cannot be written element by element");
  // Scatter into the span of storage the view covers (read first on the
  // GPU, so that the gaps keep their values).
  const std::int64_t hi = last_offset(shape_, strides_, offset_);
  const std::int64_t span = (hi - offset_ + 1) * es;
  const auto* src = static_cast<const unsigned char*>(data);
  auto scatter = [&](unsigned char* base) {
    std::int64_t i = 0;
    for_each_offset(shape_, strides_, 0,
                    [&](std::int64_t off) { std::memcpy(base + off * es, src + (i++) * es, es); });
  };
  if (storage_->device.is_cuda()) {
    std::vector<unsigned char> tmp(static_cast<std::size_t>(span));
    const auto at = reinterpret_cast<std::uintptr_t>(data_ptr());
    host_copy_from_device(tmp.data(), at, tmp.size(), storage_->device.index);
    scatter(tmp.data());
    device_copy_from_host(at, tmp.data(), tmp.size(), storage_->device.index);
  } else {
    scatter(static_cast<unsigned char*>(data_ptr()));
  }
}

std::vector<std::uint8_t> Tensor::to_bytes() const {
  std::vector<std::uint8_t> out(nbytes());
  if (out.empty()) return out;
  const auto es = static_cast<std::int64_t>(dtype_.bytes());
  if (is_contiguous()) {
    if (storage_->device.is_cuda())
      host_copy_from_device(out.data(), reinterpret_cast<std::uintptr_t>(data_ptr()), out.size(),
                            storage_->device.index);
    else
      std::memcpy(out.data(), data_ptr(), out.size());
    return out;
  }
  // Gather from the span of storage the view covers.
  const std::int64_t hi = last_offset(shape_, strides_, offset_);
  const std::int64_t span = (hi - offset_ + 1) * es;
  std::vector<unsigned char> tmp;
  const unsigned char* base = static_cast<const unsigned char*>(data_ptr());
  if (storage_->device.is_cuda()) {
    tmp.resize(static_cast<std::size_t>(span));
    host_copy_from_device(tmp.data(), reinterpret_cast<std::uintptr_t>(data_ptr()), tmp.size(),
                          storage_->device.index);
    base = tmp.data();
  }
  std::int64_t i = 0;
  for_each_offset(shape_, strides_, 0, [&](std::int64_t off) {
    std::memcpy(out.data() + (i++) * es, base + off * es, static_cast<std::size_t>(es));
  });
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
  if (!is_contiguous()) return contiguous().to(d);
  Tensor t = empty(shape_, dtype_, d);
  const std::size_t bytes = nbytes();
  const auto src_dev = reinterpret_cast<std::uintptr_t>(data_ptr());
  if (bytes == 0) return t;
  if (storage_->device.is_cuda() && d.is_cuda()) {
    if (storage_->device.index != d.index) {  // between GPUs: through the host
      std::vector<std::uint8_t> b = to_bytes();
      t.copy_from_bytes(b.data(), b.size());
      return t;
    }
    device_copy(t.storage_->dev, src_dev, bytes, d.index);
  } else if (d.is_cuda()) {
    device_copy_from_host(t.storage_->dev, data_ptr(), bytes, d.index);
  } else if (storage_->device.is_cuda()) {
    host_copy_from_device(t.storage_->host, src_dev, bytes, storage_->device.index);
  } else {
    std::memcpy(t.storage_->host, data_ptr(), bytes);
  }
  return t;
}

void Tensor::fill_bits(std::uint64_t pattern) {
  if (!storage_) fail("tx.Tensor.fill_bits", "", {}, "the tensor is undefined");
  const auto es = static_cast<std::size_t>(dtype_.bytes());
  std::vector<std::uint8_t> bytes(nbytes());
  for (std::size_t i = 0; i + es <= bytes.size(); i += es)
    std::memcpy(bytes.data() + i, &pattern, es);
  copy_from_bytes(bytes.data(), bytes.size());
}

}  // namespace tx
