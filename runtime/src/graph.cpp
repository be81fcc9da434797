// tx::Graph (tx/runtime/graph.hpp): stream capture into a CUDA graph, and its
// replay.
#include "tx/runtime/graph.hpp"

#include <exception>

#include "tx/error.hpp"
#include "tx/runtime/cuda_driver.hpp"

namespace tx {

struct Graph::State {
  Device device;
  Stream stream;  // the capture's (kept: a graph may refer to its stream's pool)
  runtime::GraphHandle graph = nullptr;
  runtime::GraphExecHandle exec = nullptr;
  std::size_t nodes = 0;
  ~State() { runtime::graph_destroy(device.index, graph, exec); }
};

Graph Graph::capture(const std::function<void()>& launches, Device device,
                     std::source_location loc) {
  const char* op = "tx.Graph.capture";
  if (!device.is_cuda())
    fail(op, device.str(), loc, "CUDA graphs record GPU launches; the device is " + device.str());
  std::string why;
  if (!runtime::cuda_available(&why)) fail(op, device.str(), loc, "no usable GPU: " + why);
  auto st = std::make_shared<State>();
  st->device = device;
  // A stream of its own: the legacy default stream cannot be captured, and
  // a capture on the caller's stream would take in work other code queues
  // there meanwhile.
  st->stream = Stream::create(device);
  const int ordinal = device.index;
  const runtime::StreamHandle s = st->stream.handle();
  {
    StreamGuard on(st->stream);
    runtime::begin_capture(ordinal, s, op);
    try {
      launches();
    } catch (...) {
      // End the (now invalid) capture before the error goes on: the stream
      // must not stay in capture mode.
      try {
        runtime::GraphHandle g = runtime::end_capture(ordinal, s, op);
        runtime::graph_destroy(ordinal, g, nullptr);
      } catch (const Error&) {
      }
      throw;
    }
  }
  st->graph = runtime::end_capture(ordinal, s, op);
  st->nodes = runtime::graph_node_count(st->graph);
  st->exec = runtime::graph_instantiate(ordinal, st->graph, op);
  Graph g;
  g.state_ = std::move(st);
  return g;
}

void Graph::replay(std::source_location loc) const {
  if (!state_) fail("tx.Graph.replay", "", loc, "the Graph is empty; make one with Graph::capture");
  replay(current_stream(state_->device), loc);
}

void Graph::replay(const Stream& stream, std::source_location loc) const {
  if (!state_) fail("tx.Graph.replay", "", loc, "the Graph is empty; make one with Graph::capture");
  if (!(stream.device() == state_->device))
    fail("tx.Graph.replay", stream.device().str(), loc,
         "the graph was captured on " + state_->device.str() + ", the stream is on " +
             stream.device().str());
  runtime::graph_launch(state_->device.index, state_->exec, stream.handle(), "tx.Graph.replay");
}

Device Graph::device() const {
  if (!state_) fail("tx.Graph.device", "", {}, "the Graph is empty; make one with Graph::capture");
  return state_->device;
}

std::size_t Graph::nodes() const { return state_ ? state_->nodes : 0; }

}  // namespace tx
