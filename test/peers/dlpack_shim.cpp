// A small C interface over tx for test/peers/dlpack_peers.py: PyTorch and
// CuPy hand tx their tensors through DLPack capsules (ctypes passes the
// DLManagedTensor* inside), tx runs its ops on the caller's stream, and
// hands its own tensors back the same way. Everything a C++ program linking
// tx would do, reachable from Python without a binding library.
#include <execinfo.h>

#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "tx/ops/ops.hpp"
#include "tx/runtime/nvrtc.hpp"
#include "tx/runtime/stream.hpp"
#include "tx/tx.hpp"

using namespace tx;

namespace {
// TX_PEERS_TRACE=1: each step on stderr (a crash inside a Python process
// shows no C++ stack).
void on_fault(int sig) {
  void* frames[64];
  int n = backtrace(frames, 64);
  std::fprintf(stderr, "tx_peers: signal %d, native stack:\n", sig);
  backtrace_symbols_fd(frames, n, 2);
  std::_Exit(128 + sig);
}
void trace(const char* what) {
  static const bool on = [] {
    bool t = std::getenv("TX_PEERS_TRACE") != nullptr;
    if (t) std::signal(SIGSEGV, on_fault);
    return t;
  }();
  if (on) {
    std::fprintf(stderr, "tx_peers: %s\n", what);
    std::fflush(stderr);
  }
}
thread_local std::string g_error;
Tensor g_kept;  // a tx tensor the peer reads and writes through DLPack

template <class F>
int guarded(F&& f) {
  try {
    f();
    return 0;
  } catch (const std::exception& e) {
    g_error = e.what();
    return 1;
  }
}
}  // namespace

extern "C" {

const char* tx_peers_error() { return g_error.c_str(); }

int tx_peers_dlpack_available() { return dlpack_available() ? 1 : 0; }

// y = gelu(x) in place, on the caller's CUstream: tx takes ownership of
// `m` (a DLManagedTensor*) and calls its deleter when done. *seen gets the
// data address tx used (zero-copy: the peer's own).
int tx_peers_gelu_inplace(void* m, void* cu_stream, std::uintptr_t* seen) {
  return guarded([&] {
    trace("from_dlpack");
    Tensor x = Tensor::from_dlpack(static_cast<DLManagedTensor*>(m));
    *seen = reinterpret_cast<std::uintptr_t>(x.data_ptr());
    trace(("borrowed " + x.device().str() + ", nvrtc " +
           std::to_string(runtime::nvrtc_version().first) + "." +
           std::to_string(runtime::nvrtc_version().second))
              .c_str());
    StreamGuard on(Stream::wrap(cu_stream, x.device()));
    trace("gelu");
    ops::gelu(x, x);
    trace("gelu queued");
  });
}

// The same with DLPack 1.x's versioned struct (CuPy's __dlpack__ hands one
// out when asked for max_version (1, 0)).
int tx_peers_gelu_inplace_versioned(void* m, void* cu_stream, std::uintptr_t* seen) {
  return guarded([&] {
    Tensor x = Tensor::from_dlpack(static_cast<DLManagedTensorVersioned*>(m));
    *seen = reinterpret_cast<std::uintptr_t>(x.data_ptr());
    StreamGuard on(Stream::wrap(cu_stream, x.device()));
    ops::gelu(x, x);
  });
}

// out = x + y over the peer's tensors (views allowed), on the caller's
// stream; the result is a new tx tensor handed back as a DLManagedTensor*.
int tx_peers_add(void* mx, void* my, void* cu_stream, void** result) {
  return guarded([&] {
    Tensor x = Tensor::from_dlpack(static_cast<DLManagedTensor*>(mx));
    Tensor y = Tensor::from_dlpack(static_cast<DLManagedTensor*>(my));
    StreamGuard on(Stream::wrap(cu_stream, x.device()));
    Tensor z = ops::add(x, y);
    *result = z.to_dlpack();
  });
}

// A tx tensor of n f32 values 0.5 * i on the GPU, kept here and handed out
// through DLPack (the peer's view keeps the storage alive on its own too).
int tx_peers_make(std::int64_t n, void** result, std::uintptr_t* data) {
  return guarded([&] {
    std::vector<float> v(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = 0.5f * float(i);
    g_kept = Tensor::from_vector(v, {n}, Device::cuda());
    *data = reinterpret_cast<std::uintptr_t>(g_kept.data_ptr());
    *result = g_kept.to_dlpack();
  });
}

// The sum of the kept tensor as tx reads it now (after the peer wrote it).
int tx_peers_kept_sum(double* sum) {
  return guarded([&] {
    double s = 0;
    for (double x : g_kept.to_doubles()) s += x;
    *sum = s;
  });
}

int tx_peers_release() {
  return guarded([] { g_kept = Tensor(); });
}
}
