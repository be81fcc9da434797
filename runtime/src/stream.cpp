// Streams, the per-thread current stream, and events (tx/runtime/stream.hpp).
#include "tx/runtime/stream.hpp"

#include <algorithm>
#include <array>
#include <optional>

#include "tx/error.hpp"
#include "tx/runtime/cuda_driver.hpp"

namespace tx {

namespace {

// Device indices a thread may have a current stream for.
constexpr int kMaxDevices = 64;

int checked_index(Device d, const char* op) {
  if (!d.is_cuda()) fail(op, d.str(), {}, "streams belong to CUDA devices, not the host");
  std::string why;
  if (!runtime::cuda_available(&why)) fail(op, d.str(), {}, "no usable GPU: " + why);
  int n = runtime::device_count();
  if (d.index < 0 || d.index >= n)
    fail(op, d.str(), {}, "no such GPU: this machine has " + std::to_string(n));
  return d.index;
}

thread_local std::array<std::optional<Stream>, kMaxDevices> t_current;

}  // namespace

struct Stream::State {
  int ordinal = 0;
  runtime::StreamHandle handle = nullptr;
  bool owned = false;
  ~State() {
    if (owned) runtime::stream_destroy(ordinal, handle);
  }
};

Stream Stream::default_stream(Device device) {
  if (device.is_cuda() && (device.index < 0 || device.index >= kMaxDevices))
    fail("tx.Stream.default_stream", device.str(), {}, "no such GPU");
  Stream s;
  s.device_ = device;
  return s;
}

Stream Stream::create(Device device) {
  int ordinal = checked_index(device, "tx.Stream.create");
  auto st = std::make_shared<State>();
  st->ordinal = ordinal;
  st->handle = runtime::stream_create(ordinal);
  st->owned = true;
  Stream s;
  s.state_ = std::move(st);
  s.device_ = device;
  return s;
}

bool Stream::is_tx_owned() const { return !state_ || state_->owned; }

Stream Stream::wrap(void* cu_stream, Device device) {
  int ordinal = checked_index(device, "tx.Stream.wrap");
  auto st = std::make_shared<State>();
  st->ordinal = ordinal;
  st->handle = cu_stream;
  Stream s;
  s.state_ = std::move(st);
  s.device_ = device;
  return s;
}

Device Stream::device() const { return device_; }
void* Stream::handle() const { return state_ ? state_->handle : nullptr; }

void Stream::synchronize() const {
  int ordinal = checked_index(device_, "tx.Stream.synchronize");
  runtime::stream_synchronize(ordinal, handle(), "tx.Stream.synchronize");
}

Stream current_stream(Device device) {
  if (!device.is_cuda() || device.index < 0 || device.index >= kMaxDevices)
    return Stream::default_stream(Device::cuda(0));
  const auto& s = t_current[static_cast<std::size_t>(device.index)];
  return s ? *s : Stream::default_stream(device);
}

StreamGuard::StreamGuard(const Stream& s) : index_(s.device().index) {
  if (!s.device().is_cuda() || index_ < 0 || index_ >= kMaxDevices)
    fail("tx.StreamGuard", s.device().str(), {}, "a stream guard needs a CUDA device");
  previous_ = current_stream(s.device());
  t_current[static_cast<std::size_t>(index_)] = s;
}

StreamGuard::~StreamGuard() {
  auto& slot = t_current[static_cast<std::size_t>(index_)];
  if (previous_.is_default())
    slot.reset();
  else
    slot = previous_;
}

MemoryStats memory_stats(Device device) {
  int ordinal = checked_index(device, "tx.memory_stats");
  runtime::PoolStats p = runtime::pool_stats(ordinal);
  const std::uint64_t cached = runtime::cached_block_bytes(ordinal);
  return {p.stream_ordered, p.reserved_bytes, p.used_bytes - std::min(cached, p.used_bytes),
          p.peak_reserved_bytes, cached};
}

void empty_cache(Device device) { runtime::pool_trim(checked_index(device, "tx.empty_cache")); }

struct Event::State {
  int ordinal = 0;
  runtime::EventHandle handle = nullptr;
  bool recorded = false;
  ~State() { runtime::event_destroy(ordinal, handle); }
};

Event::Event(Device device, bool timing) : state_(std::make_shared<State>()) {
  state_->ordinal = checked_index(device, "tx.Event");
  state_->handle = runtime::event_create(state_->ordinal, timing);
}

void Event::record(const Stream& s) {
  if (s.device().index != state_->ordinal)
    fail("tx.Event.record", s.device().str(), {},
         "the event belongs to cuda:" + std::to_string(state_->ordinal));
  runtime::event_record(state_->ordinal, state_->handle, s.handle());
  state_->recorded = true;
}

void Event::wait(const Stream& s) const {
  if (s.device().index != state_->ordinal)
    fail("tx.Event.wait", s.device().str(), {},
         "the event belongs to cuda:" + std::to_string(state_->ordinal));
  runtime::stream_wait_event(state_->ordinal, s.handle(), state_->handle);
}

void Event::synchronize() const { runtime::event_synchronize(state_->ordinal, state_->handle); }
bool Event::done() const { return runtime::event_query(state_->ordinal, state_->handle); }

float Event::elapsed_since(const Event& start) const {
  if (!state_->recorded || !start.state_->recorded)
    fail("tx.Event.elapsed_since", "", {}, "both events must be recorded first");
  return runtime::event_elapsed_ms(state_->ordinal, start.state_->handle, state_->handle);
}

}  // namespace tx
