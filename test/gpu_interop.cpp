// Issue 16 on the GPU: memory tx did not allocate (a cuMemAlloc'ed buffer
// through Tensor::from_blob), strided device views through the op library,
// streams (ordering on a caller's stream, two streams overlapping, events),
// the stream-ordered allocator (10,000 temporaries without a device
// synchronization), device 1 on a one-GPU machine, 8 threads with a stream
// each.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <thread>
#include <vector>

#include "test_support.hpp"
#include "tx/ops/ops.hpp"
#include "tx/runtime/cuda_driver.hpp"
#include "tx/tx.hpp"

using namespace tx;

namespace {

double gelu_ref(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }

// A kernel that spins for about `cycles` clock cycles per thread, then
// writes A[t] = A[t] + 1: long enough that ordering and overlap show.
PrimFunc slow_increment(std::int64_t n) {
  return T::prim_func("slow_inc", [&](Handle A_ptr) {
    auto A = T::match_buffer(A_ptr, {n}, f32);
    auto bx = T::cta_id({n / 128});
    auto t = T::thread_id({128});
    Var i = T::let(bx * 128 + t, "i");
    // A dependent chain of 200,000 multiplies (about 0.4 ms), kept alive by
    // the store (x * 0 is not folded: x could be NaN).
    auto R = T::alloc_buffer({1}, f32, scope::local, std::nullopt, "R");
    R(0) = A(i);
    for (Var k : T::serial(200000, "k")) {
      (void)k;
      R(0) = R(0) * 1.0000001f;
    }
    A(i) = A(i) + 1.0f + R(0) * 0.0f;
  });
}

}  // namespace

TEST_CASE("a kernel and the op library run on device memory tx did not allocate") {
  const std::int64_t n = 4096;
  runtime::DevicePtr raw = runtime::device_alloc(n * 4);  // the caller's buffer
  std::vector<double> v = test::random_values(n, f32, -3.0, 3.0);
  std::vector<float> f(v.begin(), v.end());
  runtime::copy_to_device(raw, f.data(), n * 4);
  int released = 0;
  {
    Tensor X = Tensor::from_blob(reinterpret_cast<void*>(raw), {n}, f32, Device::cuda(), {},
                                 [&] { ++released; });
    CHECK(X.is_borrowed());
    CHECK(reinterpret_cast<runtime::DevicePtr>(X.data_ptr()) == raw);
    std::vector<double> g = ops::gelu(X).to_doubles();
    for (std::int64_t i = 0; i < n; ++i)
      CHECK(g[static_cast<std::size_t>(i)] ==
            doctest::Approx(gelu_ref(f[static_cast<std::size_t>(i)])).epsilon(2e-5));
    // Written through tx, read through the caller's pointer.
    ops::run("relu", {X}, X);
    std::vector<float> back(n);
    runtime::copy_to_host(back.data(), raw, n * 4);
    for (std::int64_t i = 0; i < n; ++i)
      CHECK(back[static_cast<std::size_t>(i)] == std::max(0.0f, f[static_cast<std::size_t>(i)]));
    // A host pointer passed as device memory is refused, not faulted on.
    CHECK_THROWS_WITH_AS(Tensor::from_blob(f.data(), {n}, f32, Device::cuda()),
                         doctest::Contains("not device memory"), Error);
  }
  CHECK(released == 1);
  runtime::device_free(raw);
}

TEST_CASE("strided device views through the op library") {
  std::vector<double> a = test::random_values(256 * 128, f16, -3.0, 3.0);
  Tensor A = Tensor::from_doubles(a, {256, 128}, f16, Device::cuda());
  Tensor B = Tensor::from_doubles(test::random_values(128 * 256, f16, -3.0, 3.0), {128, 256}, f16,
                                  Device::cuda());
  std::vector<double> b = B.to_doubles();
  std::vector<double> s = ops::add(A.transpose(0, 1), B).to_doubles();
  for (int r = 0; r < 128; ++r)
    for (int c = 0; c < 256; ++c)
      CHECK(s[static_cast<std::size_t>(r * 256 + c)] ==
            doctest::Approx(a[static_cast<std::size_t>(c * 128 + r)] +
                            b[static_cast<std::size_t>(r * 256 + c)])
                .epsilon(2e-3));
}

TEST_CASE("every view class on the device: memory order, slices, broadcasts, unaligned memory") {
  const std::int64_t m = 192, n = 320;
  std::vector<double> a = test::random_values(m * n, f32, -3.0, 3.0);
  std::vector<double> b = test::random_values(m * 2 * n, f32, -3.0, 3.0);
  Tensor A = Tensor::from_doubles(a, {m, n}, f32, Device::cuda());
  Tensor W = Tensor::from_doubles(b, {m, 2 * n}, f32, Device::cuda());
  auto at = [&](std::int64_t r, std::int64_t c) { return a[static_cast<std::size_t>(r * n + c)]; };
  auto wt = [&](std::int64_t r, std::int64_t c) {
    return b[static_cast<std::size_t>(r * 2 * n + c)];
  };
  // A transposed pair: the result keeps their memory order.
  Tensor At = A.transpose(0, 1), Wt = W.slice(1, 0, n).contiguous().transpose(0, 1);
  Tensor S = ops::add(At, Wt);
  CHECK(S.strides() == std::vector<std::int64_t>{1, n});
  std::vector<double> s = S.to_doubles();
  for (std::int64_t r = 0; r < n; ++r)
    for (std::int64_t c = 0; c < m; ++c)
      CHECK(s[static_cast<std::size_t>(r * m + c)] == doctest::Approx(at(c, r) + wt(c, r)));
  // A slice of wider rows (vector rows), times an expanded column.
  Tensor col = A.slice(1, 7, 8);  // (m, 1), stride (n, 1)
  std::vector<double> p = ops::mul(W.slice(1, n, 2 * n), col.expand({m, n})).to_doubles();
  for (std::int64_t r = 0; r < m; ++r)
    for (std::int64_t c = 0; c < n; ++c)
      CHECK(p[static_cast<std::size_t>(r * n + c)] == doctest::Approx(wt(r, n + c) * at(r, 7)));
  // Unaligned borrowed memory: read element by element, never a fault.
  auto base = reinterpret_cast<std::uintptr_t>(A.data_ptr());
  Tensor U = Tensor::from_blob(reinterpret_cast<void*>(base + 4), {m * n - 1}, f32, Device::cuda());
  std::vector<double> g = ops::gelu(U).to_doubles();
  for (std::size_t i = 0; i < g.size(); i += 97)
    CHECK(g[i] == doctest::Approx(gelu_ref(a[i + 1])).epsilon(2e-5));
  // Tensor::contiguous() gathers on the device, with a kernel.
  Tensor C = W.transpose(0, 1).slice(0, 3, 2 * n, 2).contiguous();
  CHECK(C.is_contiguous());
  std::vector<double> cv = C.to_doubles();
  for (std::int64_t r = 0; r < n - 1; ++r)
    for (std::int64_t c = 0; c < m; ++c)
      CHECK(cv[static_cast<std::size_t>(r * m + c)] == wt(c, 3 + 2 * r));
}

TEST_CASE("a kernel on a caller's stream runs after the caller's work on it") {
  const std::int64_t n = 128 * 132;
  Stream s = Stream::create();
  Tensor A = Tensor::from_doubles(std::vector<double>(n, 1.0), {n}, f32, Device::cuda());
  Kernel slow = compile(slow_increment(n), {.device = Device::cuda()});
  {
    StreamGuard on(s);
    slow(A);                                 // the "foreign" producer: slow, on s
    Tensor B = ops::mul(A, A);               // must see A = 2 everywhere
    std::vector<double> b = B.to_doubles();  // copies on s, then waits for it
    for (double x : b) CHECK(x == 4.0);
  }
  CHECK(current_stream().is_default());
}

TEST_CASE("two streams overlap; events order and time them") {
  const std::int64_t n = 128 * 8;  // a few CTAs: the GPU has room for both
  Tensor A = Tensor::from_doubles(std::vector<double>(n, 0.0), {n}, f32, Device::cuda());
  Tensor B = Tensor::from_doubles(std::vector<double>(n, 0.0), {n}, f32, Device::cuda());
  Kernel slow = compile(slow_increment(n), {.device = Device::cuda()});
  slow(A);  // load and warm
  synchronize();
  Stream s1 = Stream::create(), s2 = Stream::create();
  auto time_it = [&](bool two) {
    Event start, stop;
    start.record(s1);
    {
      StreamGuard on(s1);
      slow(A);
    }
    if (two) {
      start.wait(s2);
      StreamGuard on(s2);
      slow(B);
    } else {
      StreamGuard on(s1);
      slow(B);
    }
    Event done2;
    done2.record(two ? s2 : s1);
    done2.wait(s1);
    stop.record(s1);
    stop.synchronize();
    return stop.elapsed_since(start);
  };
  float serial = time_it(false), overlapped = time_it(true);
  MESSAGE("two slow kernels: one stream " << serial << " ms, two streams " << overlapped << " ms");
  CHECK(overlapped < 0.75f * serial);
}

TEST_CASE("10,000 temporaries without a device synchronization") {
  Tensor X = Tensor::from_doubles(test::random_values(4096, f32), {4096}, f32, Device::cuda());
  MemoryStats m0 = memory_stats();
  CHECK(m0.stream_ordered);
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 10000; ++i) {
    Tensor y = ops::gelu(X);  // allocated and freed in stream order
    (void)y;
  }
  auto t1 = std::chrono::steady_clock::now();
  synchronize();
  double us = std::chrono::duration<double, std::micro>(t1 - t0).count() / 10000;
  MemoryStats m1 = memory_stats();
  MESSAGE("gelu(x) with a new result, 4096 elements: " << us << " us per call (host); pool "
                                                       << m1.reserved_bytes << " bytes reserved");
  // The pool reuses a few blocks rather than growing with the calls.
  CHECK(m1.reserved_bytes < m0.reserved_bytes + (64u << 20));
  empty_cache();
  CHECK(memory_stats().reserved_bytes <= m1.reserved_bytes);
}

TEST_CASE("device 1 on a one-GPU machine is a clear error") {
  if (runtime::device_count() > 1) {
    MESSAGE("this machine has several GPUs: cuda:1 is real here");
    return;
  }
  CHECK_THROWS_WITH_AS(Tensor::empty({4}, f32, Device::cuda(1)), doctest::Contains("no such GPU"),
                       Error);
  CHECK_THROWS_WITH_AS(Stream::create(Device::cuda(1)), doctest::Contains("no such GPU"), Error);
  auto f = T::prim_func("k1", [&](Handle A_ptr) {
    auto A = T::match_buffer(A_ptr, {32}, f32);
    auto t = T::thread_id({32});
    A(t) = A(t) + 1.0f;
  });
  CHECK_THROWS_WITH_AS(compile(f, {.device = Device::cuda(1)}), doctest::Contains("no such GPU"),
                       Error);
}

TEST_CASE("8 threads, each on its own stream") {
  std::atomic<int> failures{0};
  std::vector<std::thread> pool;
  for (int i = 0; i < 8; ++i)
    pool.emplace_back([&, i] {
      try {
        Stream s = Stream::create();
        StreamGuard on(s);
        std::vector<double> v =
            test::random_values(10000 + 1000 * static_cast<std::size_t>(i), f32);
        Tensor X =
            Tensor::from_doubles(v, {static_cast<std::int64_t>(v.size())}, f32, Device::cuda());
        for (int round = 0; round < 20; ++round) {
          std::vector<double> g = ops::gelu(X).to_doubles();
          for (std::size_t k = 0; k < g.size(); k += 97)
            if (std::abs(g[k] - gelu_ref(static_cast<float>(v[k]))) > 1e-4) {
              ++failures;
              return;
            }
        }
      } catch (const std::exception& e) {
        MESSAGE(e.what());
        ++failures;
      }
    });
  for (auto& t : pool) t.join();
  CHECK(failures == 0);
}
