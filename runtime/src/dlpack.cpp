// DLPack: tensors exchanged with PyTorch, CuPy, JAX, ... without a copy.
//
// from_dlpack borrows the producer's memory (Tensor::from_blob) and calls
// the producer's deleter when the last tx view of it is gone; to_dlpack hands
// out a DLManagedTensor that keeps the tx storage alive until the consumer
// calls its deleter. Strides travel both ways (DLPack strides are in
// elements, as tx's). The header is Debian's libdlpack-dev or the one PyTorch
// installs (CMakeLists.txt); the versioned struct (DLPack 1.0) is supported
// when the header has it.
#include "tx/runtime/tensor.hpp"

#ifdef TX_DLPACK_HEADER
#include TX_DLPACK_HEADER
#endif

namespace tx {

#ifndef TX_DLPACK_HEADER

namespace {
[[noreturn]] void no_dlpack(const char* op) {
  fail(op, "", {}, "tx was built without a DLPack header",
       "install libdlpack-dev (apt-get) and rebuild tx");
}
}  // namespace

Tensor Tensor::from_dlpack(DLManagedTensor*) { no_dlpack("tx.Tensor.from_dlpack"); }
DLManagedTensor* Tensor::to_dlpack() const { no_dlpack("tx.Tensor.to_dlpack"); }
Tensor Tensor::from_dlpack(DLManagedTensorVersioned*) { no_dlpack("tx.Tensor.from_dlpack"); }
DLManagedTensorVersioned* Tensor::to_dlpack_versioned() const {
  no_dlpack("tx.Tensor.to_dlpack_versioned");
}
bool dlpack_available() { return false; }

#else

namespace {

// DLPack's type codes; kDLBool is 6 from DLPack 0.8 on (older headers lack
// the name, the value is the same).
constexpr int kBoolCode = 6;

DType dtype_from(const DLDataType& t, const char* op) {
  if (t.lanes != 1)
    fail(op, "dtype", {}, "vector types (" + std::to_string(t.lanes) + " lanes) are not supported");
  const int code = t.code, bits = t.bits;
  if (code == kDLInt) {
    if (bits == 8) return i8;
    if (bits == 16) return i16;
    if (bits == 32) return i32;
    if (bits == 64) return i64;
  } else if (code == kDLUInt) {
    if (bits == 8) return u8;
    if (bits == 16) return u16;
    if (bits == 32) return u32;
    if (bits == 64) return u64;
  } else if (code == kDLFloat) {
    if (bits == 16) return f16;
    if (bits == 32) return f32;
    if (bits == 64) return f64;
  } else if (code == kDLBfloat && bits == 16) {
    return bf16;
  } else if (code == kBoolCode && bits == 8) {
    return boolean;
  }
  fail(op, "dtype", {},
       "DLPack type code " + std::to_string(code) + " of " + std::to_string(bits) +
           " bits has no tx dtype");
}

DLDataType dtype_to(DType t, const char* op) {
  DLDataType d{};
  d.lanes = 1;
  d.bits = static_cast<std::uint8_t>(t.is_bool() ? 8 : t.bits);
  if (t.is_bool())
    d.code = static_cast<std::uint8_t>(kBoolCode);
  else if (t.is_int())
    d.code = kDLInt;
  else if (t.is_uint())
    d.code = kDLUInt;
  else if (t == bf16)
    d.code = kDLBfloat;
  else if (t == f16 || t == f32 || t == f64)
    d.code = kDLFloat;
  else
    fail(op, "dtype", {}, t.name() + " has no DLPack type code in this header");
  return d;
}

Device device_from(const DLDevice& d, const char* op) {
  if (d.device_type == kDLCPU || d.device_type == kDLCUDAHost) return Device::host();
  if (d.device_type == kDLCUDA) return Device::cuda(d.device_id);
  fail(op, "device", {},
       "DLPack device type " + std::to_string(static_cast<int>(d.device_type)) +
           " is neither the CPU nor a CUDA GPU");
}

// Shape, strides, pointer and dtype of a DLTensor as a borrowed tx tensor.
Tensor borrow(const DLTensor& t, std::function<void()> release, const char* op) {
  if (t.ndim < 0) fail(op, "ndim", {}, "is negative");
  std::vector<std::int64_t> shape(t.shape, t.shape + t.ndim), strides;
  if (t.strides) strides.assign(t.strides, t.strides + t.ndim);
  DType dtype = dtype_from(t.dtype, op);
  void* data = static_cast<char*>(t.data) + t.byte_offset;
  return Tensor::from_blob(data, std::move(shape), dtype, device_from(t.device, op),
                           std::move(strides), std::move(release));
}

// What a handed-out DLManagedTensor keeps alive: the tx tensor (its storage)
// and the shape and strides arrays the DLTensor points to.
struct Export {
  Tensor tensor;
  std::vector<std::int64_t> shape, strides;
};

void fill(DLTensor& out, Export& e, const char* op) {
  const Tensor& t = e.tensor;
  out.data = t.data_ptr();
  out.byte_offset = 0;
  out.ndim = static_cast<std::int32_t>(t.shape().size());
  out.shape = e.shape.data();
  out.strides = e.strides.data();
  out.dtype = dtype_to(t.dtype(), op);
  out.device.device_type = t.device().is_cuda() ? kDLCUDA : kDLCPU;
  out.device.device_id = t.device().is_cuda() ? t.device().index : 0;
}

}  // namespace

bool dlpack_available() { return true; }

Tensor Tensor::from_dlpack(DLManagedTensor* m) {
  const char* op = "tx.Tensor.from_dlpack";
  if (!m) fail(op, "", {}, "a null DLManagedTensor");
  auto release = [m] {
    if (m->deleter) m->deleter(m);
  };
  try {
    return borrow(m->dl_tensor, release, op);
  } catch (...) {
    // A tensor tx cannot take is still consumed: give it back.
    release();
    throw;
  }
}

DLManagedTensor* Tensor::to_dlpack() const {
  const char* op = "tx.Tensor.to_dlpack";
  if (!defined()) fail(op, "", {}, "the tensor is undefined");
  auto* e = new Export{*this, shape(), strides()};
  auto* m = new DLManagedTensor{};
  try {
    fill(m->dl_tensor, *e, op);
  } catch (...) {
    delete e;
    delete m;
    throw;
  }
  m->manager_ctx = e;
  m->deleter = [](DLManagedTensor* self) {
    delete static_cast<Export*>(self->manager_ctx);
    delete self;
  };
  return m;
}

#if DLPACK_MAJOR_VERSION >= 1
Tensor Tensor::from_dlpack(DLManagedTensorVersioned* m) {
  const char* op = "tx.Tensor.from_dlpack";
  if (!m) fail(op, "", {}, "a null DLManagedTensorVersioned");
  auto release = [m] {
    if (m->deleter) m->deleter(m);
  };
  try {
    if (m->version.major != DLPACK_MAJOR_VERSION)
      fail(op, "version", {},
           "DLPack " + std::to_string(m->version.major) + "." + std::to_string(m->version.minor) +
               " but tx reads " + std::to_string(DLPACK_MAJOR_VERSION) + ".x");
    return borrow(m->dl_tensor, release, op);
  } catch (...) {
    release();
    throw;
  }
}

DLManagedTensorVersioned* Tensor::to_dlpack_versioned() const {
  const char* op = "tx.Tensor.to_dlpack_versioned";
  if (!defined()) fail(op, "", {}, "the tensor is undefined");
  auto* e = new Export{*this, shape(), strides()};
  auto* m = new DLManagedTensorVersioned{};
  try {
    fill(m->dl_tensor, *e, op);
  } catch (...) {
    delete e;
    delete m;
    throw;
  }
  m->version.major = DLPACK_MAJOR_VERSION;
  m->version.minor = DLPACK_MINOR_VERSION;
  m->flags = 0;
  m->manager_ctx = e;
  m->deleter = [](DLManagedTensorVersioned* self) {
    delete static_cast<Export*>(self->manager_ctx);
    delete self;
  };
  return m;
}
#else
Tensor Tensor::from_dlpack(DLManagedTensorVersioned*) {
  fail("tx.Tensor.from_dlpack", "", {},
       "the DLPack header tx was built with (version " + std::to_string(DLPACK_VERSION) +
           ") has no versioned tensors (DLPack 1.0)");
}
DLManagedTensorVersioned* Tensor::to_dlpack_versioned() const {
  fail("tx.Tensor.to_dlpack_versioned", "", {},
       "the DLPack header tx was built with (version " + std::to_string(DLPACK_VERSION) +
           ") has no versioned tensors (DLPack 1.0)");
}
#endif

#endif

}  // namespace tx
