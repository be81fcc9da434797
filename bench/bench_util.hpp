// What the GPU benchmarks share: the timing of one call (CUDA events around
// each call, warm-ups, the median) and a deterministic input tensor.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <functional>
#include <mutex>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "tx/runtime/cuda_driver.hpp"
#include "tx/tx.hpp"

namespace bench {

// fn(0), ..., fn(n - 1) on up to one thread per core, each index once; the
// first exception is rethrown after every thread has stopped. For compiling a
// benchmark's kernels up front (a compile takes seconds and runs alone on a
// core: NVRTC and ptxas in a worker process each, docs/reliability.md).
inline void parallel_for(std::size_t n, const std::function<void(std::size_t)>& fn) {
  const std::size_t workers =
      std::min<std::size_t>(n, std::max(1u, std::thread::hardware_concurrency()));
  std::atomic<std::size_t> next{0};
  std::exception_ptr first;
  std::mutex mu;
  std::vector<std::thread> threads;
  for (std::size_t w = 0; w < workers; ++w)
    threads.emplace_back([&] {
      for (std::size_t i; (i = next++) < n;) {
        try {
          fn(i);
        } catch (...) {
          std::lock_guard<std::mutex> lock(mu);
          if (!first) first = std::current_exception();
        }
      }
    });
  for (auto& t : threads) t.join();
  if (first) std::rethrow_exception(first);
}

inline double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

// Milliseconds per call of f on the GPU alone: events around `calls`
// calls enqueued back to back, so the host's time to enqueue the next call
// overlaps the one running (a kernel's own bandwidth; time_ms below adds
// the host's time before the launch, which for a 20-us kernel is several
// percent). The median over `reps` such groups, divided by `calls`.
inline double time_ms_back_to_back(const std::function<void()>& f, int calls = 10, int warm = 5,
                                   int reps = 30) {
  for (int i = 0; i < warm; ++i) f();
  tx::runtime::EventTimer t;
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    t.start();
    for (int c = 0; c < calls; ++c) f();
    t.stop();
    ms.push_back(t.elapsed_ms() / calls);
  }
  return median(ms);
}

// Milliseconds per call of f: CUDA events around each call on the current
// stream, waiting for each (so a call's host time before its launch
// counts, as a caller who times one call sees it), `warm` calls first.
inline double time_ms(const std::function<void()>& f, int warm = 5, int reps = 30) {
  return time_ms_back_to_back(f, /*calls=*/1, warm, reps);
}

// A tensor on the GPU with values in [-1, 1) from a fixed xorshift sequence.
inline tx::Tensor random_tensor(std::vector<std::int64_t> shape, tx::DType t) {
  std::int64_t n = 1;
  for (auto e : shape) n *= e;
  std::vector<double> v(static_cast<std::size_t>(n));
  std::uint64_t s = 88172645463325252ull;
  for (auto& x : v) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    x = static_cast<double>(s % 2000) / 1000.0 - 1.0;
  }
  return tx::Tensor::from_doubles(v, std::move(shape), t, tx::Device::cuda());
}

// The copy limit for a case that moves `bytes` (half read, half written):
// the time of a device-to-device copy of bytes / 2.
inline double copy_ms(std::size_t bytes) {
  namespace rt = tx::runtime;
  const std::size_t half = bytes / 2;
  rt::DevicePtr a = rt::device_alloc(half), b = rt::device_alloc(half);
  rt::memset_device(a, 1, half);
  const double ms = time_ms([&] { rt::copy_device_to_device(b, a, half); });
  rt::device_free(a);
  rt::device_free(b);
  rt::synchronize("bench");
  return ms;
}

// One case: a line on stdout and a JSON object in `js` (after the first, a comma).
inline void report(std::ostream& js, bool& first, const std::string& label,
                   const std::string& dtype, std::size_t bytes, double tx_ms, double copy_ms) {
  const double gbs = static_cast<double>(bytes) / tx_ms / 1e6;
  const double copy_gbs = static_cast<double>(bytes) / copy_ms / 1e6;
  std::printf("%-36s %-9s tx %8.1f GB/s  copy %8.1f GB/s  %.3f of copy\n", label.c_str(),
              dtype.c_str(), gbs, copy_gbs, gbs / copy_gbs);
  js << (first ? "" : ",\n") << "  {\"label\": \"" << label << "\", \"dtype\": \"" << dtype
     << "\", \"bytes\": " << bytes << ", \"tx_ms\": " << tx_ms << ", \"copy_ms\": " << copy_ms
     << "}";
  first = false;
}

}  // namespace bench
