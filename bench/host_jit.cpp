// bench/host_jit: the host fallback's two costs.
//
//  1. Compile: lowered IR -> callable (host passes, LLVM IR, O2, machine
//     code) for every seed program, cold (the caches bypassed with
//     TX_HOST_CACHE=0; median and best of 7), from the disk cache (read and
//     link an object an earlier compile stored: what a new process pays;
//     median and best of 50) and from memory (median of 200), plus the
//     one-time start of the LLJIT.
//  2. Run: 2^24-element f32 elementwise kernels over a grid of CTAs
//     (T::cta_id), written per thread (each thread a strided column) and
//     per tile (register tiles through Tx::cta::copy / Tx::cta::<op>),
//     against a plain C++ loop compiled into this program (-O2 in the
//     default RelWithDebInfo build); on one worker thread and on all.
//  3. Straight-line code: a dot product of n terms written with a C++ loop
//     (`acc = acc + A(i) * B(i)`, one thread), n = 10^3 .. 10^5: the time to
//     record it, to lower it, to host-JIT it plain and checked, and per
//     term, which stays flat when the JIT is linear in the kernel's size.
//
//   bench_host_jit            # prints all the tables
//   bench_host_jit dot [n..]  # only the dot products (default sizes, or these)
//
// Times are wall-clock, median and best of 7 runs (the best is the steadier
// figure on a shared machine); results are checked against the plain loop.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "tx/runtime/disk_cache.hpp"
#include "tx/tx.hpp"

// The seed programs, without their main().
#define TX_SAMPLE_NO_MAIN
#include "../samples/cta_sqrt_smem.cpp"
#include "../samples/thread_sum_local.cpp"
#include "../samples/warp_copy_reg.cpp"
#include "../samples/warp_sqrt_reg.cpp"
#include "../samples/warp_sum_shuffle.cpp"

using namespace tx;

namespace {

using clock_type = std::chrono::steady_clock;

double ms_since(clock_type::time_point t0) {
  return std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
}

struct Timing {
  double median = 0, best = 0;
};

Timing time_ms(int reps, const std::function<void()>& f) {
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    auto t0 = clock_type::now();
    f();
    t.push_back(ms_since(t0));
  }
  std::sort(t.begin(), t.end());
  return {t[t.size() / 2], t.front()};
}

constexpr std::int64_t kN = std::int64_t{1} << 24;
constexpr int kThreads = 256, kPerThread = 8, kPerCta = kThreads * kPerThread;

// Each thread handles elements tid, tid + 256, ...: neighbouring threads
// touch neighbouring addresses (the GPU's coalesced pattern).
PrimFunc per_thread(const std::string& name, const std::function<Expr(Expr)>& op) {
  return T::prim_func(name, [&](Handle A_ptr, Handle B_ptr) {
    auto A = T::match_buffer(A_ptr, {kN}, f32);
    auto B = T::match_buffer(B_ptr, {kN}, f32);
    auto cta = T::cta_id({kN / kPerCta});
    auto tid = T::thread_id({kThreads});
    for (Var j : T::serial(kPerThread)) {
      Var i = T::let(cta * kPerCta + j * kThreads + tid);
      B(i) = op(A(i));
    }
  });
}

// Register tiles: each thread holds 8 consecutive elements (two 128-bit
// copies), the tile op runs on registers.
PrimFunc per_tile(const std::string& name,
                  const std::function<void(TileOperand, TileOperand)>& op) {
  return T::prim_func(name, [&](Handle A_ptr, Handle B_ptr) {
    auto A = T::match_buffer(A_ptr, {kN / kPerThread, kPerThread}, f32);
    auto B = T::match_buffer(B_ptr, {kN / kPerThread, kPerThread}, f32);
    auto cta = T::cta_id({kN / kPerCta});
    T::thread_id({kThreads});
    auto R = T::alloc_buffer({kThreads, kPerThread}, f32, scope::local,
                             TileLayout(S({kThreads, kPerThread}, {1 * axes::tx, 1})));
    auto rows = region(span(cta * kThreads, kThreads), {0, kPerThread});
    Tx::cta::copy(R, A[rows]);
    op(R, R);
    Tx::cta::copy(B[rows], R);
  });
}

__attribute__((noinline)) void plain_sqrt(const float* a, float* b, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) b[i] = std::sqrt(a[i]);
}
__attribute__((noinline)) void plain_silu(const float* a, float* b, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) b[i] = a[i] / (1.0f + std::exp(-a[i]));
}

void set_threads(const char* n) {
  if (n)
    setenv("TX_HOST_THREADS", n, 1);
  else
    unsetenv("TX_HOST_THREADS");
}

// The dot product of issue 45: a kernel of ~4n operations in one block.
PrimFunc dot_kernel(int n) {
  return T::prim_func("dot", [&](Handle A_ptr, Handle B_ptr, Handle C_ptr) {
    auto A = T::match_buffer(A_ptr, {n}, f32);
    auto B = T::match_buffer(B_ptr, {n}, f32);
    auto C = T::match_buffer(C_ptr, {1}, f32);
    T::thread_id({1});
    Expr acc = 0.0f;
    for (int i = 0; i < n; ++i) acc = acc + A(i) * B(i);
    C(0) = acc;
  });
}

// Records, lowers and host-JITs dot products of each size (the in-memory and
// disk caches bypassed), plain and in the checked mode (TX_CHECK=1's host
// form: a check call per load), runs the plain kernel once and checks it
// against a double sum.
void bench_dot(const std::vector<int>& sizes) {
  const std::uint64_t test_poison = 0x7fc00001;  // a NaN: a result never written shows
  setenv("TX_HOST_CACHE", "0", 1);
  std::printf(
      "dot product of n terms, one thread: seconds (host JIT = host passes, LLVM IR, "
      "code generation, link)\n");
  std::printf("%8s %8s %8s %9s %11s %9s %11s %8s %s\n", "n", "record", "lower", "host JIT",
              "us/term", "checked", "us/term", "run [ms]", "check");
  for (int n : sizes) {
    auto t0 = clock_type::now();
    PrimFunc f = dot_kernel(n);
    double record = ms_since(t0) / 1e3;
    auto t1 = clock_type::now();
    Kernel k = compile(f, {.device = Device::host(), .checked = false});
    double lower = ms_since(t1) / 1e3;
    auto t2 = clock_type::now();
    runtime::host_compile(k.info());
    double jit = ms_since(t2) / 1e3;
    auto t3 = clock_type::now();
    runtime::host_compile(k.info(), /*checked=*/true);
    double checked = ms_since(t3) / 1e3;
    std::vector<double> a(static_cast<std::size_t>(n)), b(a.size());
    std::srand(static_cast<unsigned>(n));
    for (std::size_t i = 0; i < a.size(); ++i) {
      a[i] = std::rand() / (RAND_MAX + 1.0) - 0.5;
      b[i] = std::rand() / (RAND_MAX + 1.0) - 0.5;
    }
    Tensor A = Tensor::from_doubles(a, {n}, f32, Device::host());
    Tensor B = Tensor::from_doubles(b, {n}, f32, Device::host());
    Tensor C = Tensor::from_doubles({std::nan("")}, {1}, f32, Device::host());
    k(A, B, C);  // the launch compiles once more (no cache)
    C.fill_bits(test_poison);
    auto t4 = clock_type::now();
    k(A, B, C);
    double run = ms_since(t4) / 1e3;
    double want = 0, mag = 0;
    std::vector<float> af(A.to_vector<float>()), bf(B.to_vector<float>());
    for (std::size_t i = 0; i < a.size(); ++i) {
      double p = static_cast<double>(af[i]) * bf[i];
      want += p, mag += std::fabs(p);
    }
    // f32 accumulation in order: within n ulp of the magnitudes.
    bool ok = std::fabs(C.to_doubles()[0] - want) <= n * 6e-8 * mag;
    std::printf("%8d %8.3f %8.3f %9.3f %11.2f %9.3f %11.2f %8.4f %s\n", n, record, lower, jit,
                jit / n * 1e6, checked, checked / n * 1e6, run * 1e3, ok ? "ok" : "MISMATCH");
    std::fflush(stdout);
  }
  unsetenv("TX_HOST_CACHE");
}

}  // namespace

int main(int argc, char** argv) {
  // The disk cache's measurements use a folder of their own, removed at exit
  // (TX_CACHE=0 turns them off).
  char folder[] = "/tmp/tx-bench-host-jit-XXXXXX";
  const bool own_folder = mkdtemp(folder) != nullptr;
  if (own_folder) setenv("TX_CACHE_DIR", folder, 1);
  struct Cleanup {
    std::string dir;
    ~Cleanup() {
      std::error_code ec;
      if (!dir.empty()) std::filesystem::remove_all(dir, ec);
    }
  } cleanup{own_folder ? folder : ""};
  std::string why;
  auto t0 = clock_type::now();
  if (!runtime::host_jit_available(&why)) {
    std::printf("SKIPPED: no host JIT: %s\n", why.c_str());
    return 77;
  }
  double start_ms = ms_since(t0);
  unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  std::printf("host JIT: LLVM ORC LLJIT, %u hardware threads; JIT start (first use) %.1f ms\n\n",
              hw, start_ms);
  const std::vector<int> dot_sizes = {1000, 2048, 5000, 10000, 25000, 50000, 100000};
  if (argc > 1 && std::string(argv[1]) == "dot") {
    std::vector<int> sizes;
    for (int i = 2; i < argc; ++i) sizes.push_back(std::atoi(argv[i]));
    bench_dot(sizes.empty() ? dot_sizes : sizes);
    return 0;
  }

  // ------------------------------------------------------------ compile
  // The disk column: what a new process pays for a kernel an earlier one
  // compiled (read the entry, link the object), with the in-memory cache
  // emptied before each of 50 loads from a private folder.
  const bool disk = runtime::DiskCache::instance().enabled();
  std::printf("%-20s %18s %18s %12s\n", "kernel", "cold [ms] (best)", "disk [ms] (best)",
              "memory [ms]");
  struct Sample {
    const char* name;
    PrimFunc f;
  };
  for (const Sample& s :
       {Sample{"warp_sqrt_reg", warp_sqrt()}, Sample{"cta_sqrt_smem", cta_sqrt()},
        Sample{"warp_copy_reg", warp_copy_reg()}, Sample{"thread_sum_local", thread_sum()},
        Sample{"warp_sum_shuffle", warp_sum_shuffle()}}) {
    Kernel k = compile(s.f, {.device = Device::host()});
    setenv("TX_HOST_CACHE", "0", 1);
    Timing cold = time_ms(7, [&] { runtime::host_compile(k.info()); });
    unsetenv("TX_HOST_CACHE");
    runtime::host_compile(k.info());  // stores the entry
    Timing from_disk = time_ms(disk ? 50 : 1, [&] {
      runtime::host_cache_clear_memory();
      std::string from;
      runtime::host_compile(k.info(), false, &from);
      if (disk && from != "disk") std::printf("(%s: not from the disk cache) ", s.name);
    });
    Timing cached = time_ms(200, [&] { runtime::host_compile(k.info()); });
    if (disk)
      std::printf("%-20s %10.2f (%5.2f) %10.2f (%5.2f) %12.3f\n", s.name, cold.median, cold.best,
                  from_disk.median, from_disk.best, cached.median);
    else
      std::printf("%-20s %10.2f (%5.2f) %18s %12.3f\n", s.name, cold.median, cold.best, "off",
                  cached.median);
  }

  // ---------------------------------------------------------------- run
  std::vector<double> a(static_cast<std::size_t>(kN));
  for (std::int64_t i = 0; i < kN; ++i)
    a[static_cast<std::size_t>(i)] = 0.25 + static_cast<double>((i * 7919) % 100003) / 1000.0;
  std::vector<float> af(a.begin(), a.end()), bf(a.size());

  struct RunCase {
    const char* name;
    PrimFunc f;
    void (*plain)(const float*, float*, std::int64_t);
  };
  auto silu = [](Expr x) { return x / (1.0f + exp(-x)); };
  auto root = [](Expr x) { return sqrt(x); };
  std::printf("\n2^24 f32 elements, %lld CTAs x %lld threads x %lld elements\n",
              static_cast<long long>(kN / kPerCta), static_cast<long long>(kThreads),
              static_cast<long long>(kPerThread));
  std::printf("times in ms, median of 7 (best)\n");
  std::printf("%-18s %8s %17s %17s %17s %15s\n", "kernel", "compile", "tx, 1 thread",
              "tx, all threads", "plain C++ loop", "1 thread/plain");
  for (const RunCase& c :
       {RunCase{"sqrt per thread", per_thread("sqrt_thread", root), plain_sqrt},
        RunCase{"silu per thread", per_thread("silu_thread", silu), plain_silu},
        RunCase{"sqrt per tile",
                per_tile("sqrt_tile", [](TileOperand d, TileOperand s) { Tx::cta::sqrt(d, s); }),
                plain_sqrt},
        RunCase{"silu per tile",
                per_tile("silu_tile", [](TileOperand d, TileOperand s) { Tx::cta::silu(d, s); }),
                plain_silu}}) {
    Kernel k = compile(c.f, {.device = Device::host()});
    auto tc = clock_type::now();
    runtime::host_compile(k.info());
    double compile_ms = ms_since(tc);
    bool tile = std::string(c.name).find("tile") != std::string::npos;
    std::vector<std::int64_t> shape = tile ? std::vector<std::int64_t>{kN / kPerThread, kPerThread}
                                           : std::vector<std::int64_t>{kN};
    Tensor A = Tensor::from_doubles(a, shape, f32, Device::host());
    Tensor B = Tensor::empty(shape, f32, Device::host());
    set_threads("1");
    k(A, B);
    Timing one = time_ms(7, [&] { k(A, B); });
    set_threads(nullptr);
    Timing all = time_ms(7, [&] { k(A, B); });
    c.plain(af.data(), bf.data(), kN);
    Timing base = time_ms(7, [&] { c.plain(af.data(), bf.data(), kN); });
    // Check against the plain loop (libm and LLVM may differ in the last bit).
    auto got = B.to_doubles();
    double worst = 0;
    for (std::size_t i = 0; i < got.size(); ++i)
      worst = std::max(worst,
                       std::fabs(got[i] - bf[i]) / (1e-30 + std::fabs(static_cast<double>(bf[i]))));
    std::printf("%-18s %8.1f %8.2f (%6.2f) %8.2f (%6.2f) %8.2f (%6.2f) %6.2fx (%4.2fx)%s\n", c.name,
                compile_ms, one.median, one.best, all.median, all.best, base.median, base.best,
                one.median / base.median, one.best / base.best, worst > 1e-6 ? "  MISMATCH" : "");
  }

  // ------------------------------------------------------ straight-line code
  std::printf("\n");
  bench_dot(dot_sizes);
  return 0;
}
