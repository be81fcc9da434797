// CUDA graphs: a sequence of tx launches recorded once and replayed as one.
//
//   tx::Graph g = tx::Graph::capture([&] {
//     k(X, Y);                 // a tx kernel
//     tx::ops::gelu(Y, Z);     // a tx op (out= form: no allocation)
//   });
//   for (int step = 0; step < n; ++step) g.replay();  // one driver call for all of them
//
// capture() runs `launches` with a stream of its own as the current stream
// of `device` (a StreamGuard), captured (cuStreamBeginCapture, thread-local
// mode): nothing runs then, every launch is recorded with the tensors it was
// given. replay() runs the recorded launches again on the device's current
// stream (or the one given), in order, reading and writing those same
// tensors' memory: refill the inputs in place between replays, and keep every
// tensor alive while the graph is. A replay costs one cuGraphLaunch, where
// direct launches cost one cuLaunchKernel each plus tx's binding (see
// bench/launch.cpp).
//
// tx launches never synchronize, allocate outside the stream's order or read
// back to the host, so any sequence of them can be captured. What cannot be
// captured is set-up work (a first call that compiles and loads a kernel, a
// table an op builds on first use, an allocation without a stream-ordered
// pool): run each op once before capturing. Such a call made while capturing
// fails with a tx error that says so, and the capture is abandoned.
//
// Under torch.cuda.graph, tx's PyTorch ops (tx_torch) launch on PyTorch's
// current stream, which PyTorch is capturing: nothing more is needed.
#pragma once

#include <functional>
#include <memory>
#include <source_location>

#include "tx/runtime/stream.hpp"
#include "tx/runtime/tensor.hpp"

namespace tx {

class Graph {
 public:
  Graph() = default;
  static Graph capture(const std::function<void()>& launches, Device device = Device::cuda(),
                       std::source_location loc = std::source_location::current());
  // On the device's current stream.
  void replay(std::source_location loc = std::source_location::current()) const;
  void replay(const Stream& stream,
              std::source_location loc = std::source_location::current()) const;
  Device device() const;
  // The recorded graph's nodes (kernels, copies, allocations).
  std::size_t nodes() const;
  bool empty() const { return !state_; }

  struct State;

 private:
  std::shared_ptr<State> state_;
};

}  // namespace tx
