// Streams and events: where tx's GPU work is queued, and how it is ordered
// with the caller's.
//
// Every GPU launch of tx (a Kernel, every op of the library) and every tensor
// tx allocates on a GPU goes to the *current stream* of its device: the
// legacy default stream unless a StreamGuard in this thread says otherwise.
//
//   tx::Stream s = tx::Stream::wrap(torch_stream_ptr, tx::Device::cuda(0));
//   {
//     tx::StreamGuard on(s);          // this thread, this scope, cuda:0
//     tx::Tensor y = tx::ops::gelu(x);  // queued on s, after the caller's work
//   }
//
// A guard rather than a stream argument on each call (the model of
// c10::cuda::CUDAStreamGuard): the op library has over a hundred entry points
// and some run several kernels; a guard reaches all of them, and code that
// calls tx through another layer inherits the caller's stream. Being
// per-thread, it is also what gives each thread its own stream.
#pragma once

#include <memory>
#include <string>

#include "tx/runtime/tensor.hpp"

namespace tx {

class Stream {
 public:
  // The legacy default stream of `device` (a CUDA GPU).
  Stream() = default;
  static Stream default_stream(Device device = Device::cuda());
  // A new stream tx owns (destroyed with the last copy of this object).
  static Stream create(Device device = Device::cuda());
  // The caller's CUstream (as void*), which the caller keeps alive while tx
  // uses it.
  static Stream wrap(void* cu_stream, Device device = Device::cuda());

  Device device() const;
  void* handle() const;  // the CUstream (nullptr: the legacy default stream)
  bool is_default() const { return handle() == nullptr; }
  // The legacy default stream or one tx created: tx knows its lifetime (the
  // allocator caches freed blocks per stream only for these).
  bool is_tx_owned() const;
  // Waits until everything queued on the stream has run; a failed kernel
  // is a tx error.
  void synchronize() const;
  bool operator==(const Stream& o) const {
    return device() == o.device() && handle() == o.handle();
  }

  struct State;

 private:
  std::shared_ptr<State> state_;
  Device device_ = Device::cuda();
};

// The stream tx's GPU work on `device` goes to in this thread.
Stream current_stream(Device device = Device::cuda());

// Makes `s` the current stream of its device for this thread until the
// guard goes out of scope (guards nest).
class StreamGuard {
 public:
  explicit StreamGuard(const Stream& s);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  Stream previous_;
  int index_;
};

// The device allocator: tensors tx allocates on a GPU come from the device's
// stream-ordered pool (cuMemAllocAsync on the current stream), and dropping
// one returns its memory to the pool in that stream's order -- no device
// synchronization, unlike cuMemFree. The pool keeps what it has for reuse.
struct MemoryStats {
  bool stream_ordered = false;       // the driver has pools (else cuMemAlloc/cuMemFree)
  std::uint64_t reserved_bytes = 0;  // held by the pool: in use + cached
  std::uint64_t used_bytes = 0;      // in use by live allocations
  std::uint64_t peak_reserved_bytes = 0;
  // Freed small blocks on tx's per-stream free lists (part of reserved,
  // not of used): what the next temporaries of those sizes reuse.
  std::uint64_t cached_bytes = 0;
};
MemoryStats memory_stats(Device device = Device::cuda());
// Gives the free lists' and the pool's cached memory back to the driver
// (after synchronizing the device), as torch.cuda.empty_cache() does.
void empty_cache(Device device = Device::cuda());

// A CUDA event: a point in a stream to wait for or to time from.
class Event {
 public:
  explicit Event(Device device = Device::cuda(), bool timing = true);
  void record(const Stream& s = current_stream());
  // Makes `s` wait for this event (no host synchronization).
  void wait(const Stream& s = current_stream()) const;
  void synchronize() const;
  bool done() const;  // cuEventQuery
  // Milliseconds from `start` to this event (both recorded, with timing).
  float elapsed_since(const Event& start) const;

  struct State;

 private:
  std::shared_ptr<State> state_;
};

}  // namespace tx
