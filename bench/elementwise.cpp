// bench/elementwise: tx's elementwise ops against a device-to-device copy of
// the same bytes (the ceiling) in the same run, and -- through the Python
// script beside it -- PyTorch eager and torch.compile on the same cases.
//
//   bench_elementwise --cases            print the case list (JSON) for the Python side
//   bench_elementwise --out tx.json      time every case, write JSON
//   bench_elementwise --jit              JIT timings (cold / disk / memory, NVRTC alone)
//
// Timing: CUDA events around each launch, 5 warm-ups, median of 30; inputs
// larger than L2 except in the small-size cases; bytes = read + write.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "bench_util.hpp"
#include "tx/ops/ops.hpp"
#include "tx/ops/registry.hpp"
#include "tx/runtime/cuda_driver.hpp"
#include "tx/runtime/disk_cache.hpp"
#include "tx/runtime/nvrtc.hpp"
#include "tx/tx.hpp"

using namespace tx;
using bench::time_ms;
using Shape = std::vector<std::int64_t>;

namespace {

struct Case {
  std::string label;  // e.g. "gelu 2^28"
  std::string op;     // library op, or "cast"
  DType dtype;
  std::vector<Shape> shapes;
  ops::Params params{};
  DType cast_to = void_t;  // for "cast"
  bool small = false;      // small-size regime (host overhead matters)
};

std::string shape_str(const Shape& s) {
  std::string r = "[";
  for (std::size_t i = 0; i < s.size(); ++i) r += (i ? "," : "") + std::to_string(s[i]);
  return r + "]";
}

std::vector<Case> cases() {
  std::vector<Case> c;
  const Shape big{1 << 28}, square{16384, 16384};
  for (DType t : {f32, f16, bf16}) {
    for (const char* op : {"sqrt", "exp", "gelu", "silu", "relu"}) {
      c.push_back({std::string(op) + " 2^28", op, t, {big}});
      c.push_back({std::string(op) + " 16384x16384", op, t, {square}});
    }
    c.push_back({"add same-shape 2^28", "add", t, {big, big}});
    c.push_back({"add (1024,20480)+(20480,)", "add", t, {{1024, 20480}, {20480}}});
    c.push_back({"add (16,256,56,56)+(256,1,1)", "add", t, {{16, 256, 56, 56}, {256, 1, 1}}});
    c.push_back(
        {"masked_fill (1024,20480)", "masked_fill", t, {{1024, 20480}, {1024, 20480}}, {-1e4}});
    c.push_back({"where (1024,20480)", "where", t, {{1024, 20480}, {1024, 20480}, {1024, 20480}}});
    c.push_back({"clamp 2^28", "clamp", t, {big}, {-0.5, 0.5}});
    c.push_back({"silu_and_mul (2048,2x28672)", "silu_and_mul", t, {{2048, 2 * 28672}}});
    c.push_back({"gelu_tanh_and_mul (2048,2x28672)", "gelu_tanh_and_mul", t, {{2048, 2 * 28672}}});
    c.push_back({"cast to f8e4m3 2^28", "cast", t, {big}, {}, f8e4m3});
  }
  c.push_back({"relu f8e4m3 2^28", "relu", f8e4m3, {big}});
  // Beyond the list: an fp8 binary op, and fp8 ops with real math in
  // both fp8 formats (each element converted in and out around f32 math).
  c.push_back({"add f8e4m3 2^28", "add", f8e4m3, {big, big}});
  c.push_back({"gelu f8e4m3 2^28", "gelu", f8e4m3, {big}});
  c.push_back({"silu f8e5m2 2^28", "silu", f8e5m2, {big}});
  for (DType t : {f32, f16, bf16}) {
    c.push_back({"gelu 4096", "gelu", t, {{4096}}, {}, void_t, true});
    c.push_back({"gelu 2^20", "gelu", t, {{1 << 20}}, {}, void_t, true});
    c.push_back({"add 4096", "add", t, {{4096}, {4096}}, {}, void_t, true});
    c.push_back({"add 2^20", "add", t, {{1 << 20}, {1 << 20}}, {}, void_t, true});
  }
  return c;
}

// Fills a tensor on the GPU with hashed pseudo-random values in [lo, hi)
// (bool: about half true): a tx kernel, so inputs of 2^28 elements need no
// host round trip.
void fill_random(Tensor& t, double lo, double hi, std::uint32_t seed) {
  std::int64_t n = t.numel();
  DType dt = t.dtype();
  const int threads = 256;
  std::int64_t blocks = (n + threads - 1) / threads;
  PrimFunc f = T::prim_func("bench_fill", [&](Handle Y_ptr) {
    auto Y = T::match_buffer(Y_ptr, {n}, dt, std::nullopt, "y");
    auto bx = T::cta_id({blocks}, "bx");
    auto tid = T::thread_id({threads}, "tid");
    Var i = T::let(bx * threads + tid, "i");
    T::if_(i < n, [&] {
      Expr h = cast(i, u32) * 2654435761u + seed;
      Var hv = T::let(h, "h0");
      Var h2 = T::let((hv ^ (hv >> 15)) * 2246822519u, "h1");
      Var h3 = T::let(h2 ^ (h2 >> 13), "h2");
      if (dt.is_bool()) {
        Y(i) = (h3 & 1u) == 1u;
      } else {
        Expr u = cast(h3 >> 8, f32) * (1.0 / 16777216.0);
        Y(i) = cast(u * (hi - lo) + lo, dt);
      }
    });
  });
  compile(f, {.device = Device::cuda()})(t.reshape({n}));  // the kernel is declared flat
}

struct Result {
  Case c;
  std::size_t bytes = 0;
  double tx_ms = 0, copy_ms = 0, host_us = 0;
  double gpu_ms = 0;  // back to back (--compare-exact only): the kernel alone
  std::string config;
};

Result run_case(const Case& c, bool exact = false, bool back_to_back = false) {
  Result r;
  r.c = c;
  std::vector<Tensor> in;
  std::uint32_t seed = 12345;
  for (std::size_t k = 0; k < c.shapes.size(); ++k) {
    bool mask = (c.op == "where" && k == 0) || (c.op == "masked_fill" && k == 1);
    DType dt = mask ? boolean : c.dtype;
    Tensor t = Tensor::empty(c.shapes[k], dt, Device::cuda());
    fill_random(t, c.op == "sqrt" ? 0.01 : -3.0, 3.0, seed++);
    in.push_back(t);
    r.bytes += t.nbytes();
  }
  std::function<void()> launch;
  Tensor out;
  if (c.op == "cast") {
    out = Tensor::empty(c.shapes[0], c.cast_to, Device::cuda());
    launch = [&] { ops::cast(in[0], out); };
    r.config = "register_copy";
  } else {
    std::vector<Shape> shapes;
    for (auto& t : in) shapes.push_back(t.shape());
    auto op = std::make_shared<ops::Elementwise>(c.op, shapes, c.dtype, c.params,
                                                 ops::Config{.exact_shape = exact}, Device::cuda());
    out = Tensor::empty(op->out_shape(), op->out_dtype(), Device::cuda());
    launch = [op, &in, &out] { (*op)(in, out); };
    ops::Config k = op->config();
    r.config = std::string(ops::strategy_name(*k.strategy)) + " t" + std::to_string(k.threads) +
               " v" + std::to_string(k.num_per_thread);
  }
  r.bytes += out.nbytes();
  r.tx_ms = time_ms(launch);
  if (back_to_back) r.gpu_ms = bench::time_ms_back_to_back(launch);

  // The ceiling: a device-to-device copy moving the same bytes (read + write).
  std::size_t half = r.bytes / 2;
  runtime::DevicePtr a = runtime::device_alloc(half), b = runtime::device_alloc(half);
  runtime::memset_device(a, 1, half);
  r.copy_ms = time_ms([&] { runtime::copy_device_to_device(b, a, half); });
  runtime::device_free(a);
  runtime::device_free(b);

  // Host cost of one call: enqueue many back to back, wall clock per call.
  runtime::synchronize("bench");
  const int calls = c.small ? 200 : 50;
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < calls; ++i) launch();
  auto t1 = std::chrono::steady_clock::now();
  runtime::synchronize("bench");
  r.host_us = std::chrono::duration<double, std::micro>(t1 - t0).count() / calls;
  return r;
}

void write_cases_json(std::ostream& os) {
  os << "[\n";
  auto cs = cases();
  for (std::size_t i = 0; i < cs.size(); ++i) {
    const Case& c = cs[i];
    os << "  {\"label\": \"" << c.label << "\", \"op\": \"" << c.op << "\", \"dtype\": \""
       << c.dtype.name() << "\", \"shapes\": [";
    for (std::size_t k = 0; k < c.shapes.size(); ++k)
      os << (k ? ", " : "") << shape_str(c.shapes[k]);
    os << "], \"params\": [";
    for (std::size_t k = 0; k < c.params.size(); ++k) os << (k ? ", " : "") << c.params[k];
    os << "], \"cast_to\": \"" << (c.cast_to.is_void() ? "" : c.cast_to.name())
       << "\", \"small\": " << (c.small ? "true" : "false") << "}" << (i + 1 < cs.size() ? "," : "")
       << "\n";
  }
  os << "]\n";
}

// JIT timings of one op: cold (no cache anywhere), from the disk cache (a
// fresh process would see this: the in-memory caches are bypassed by a new
// shape), from memory, and NVRTC alone on the same source.
void jit_timings(std::ostream& os) {
  using clock = std::chrono::steady_clock;
  auto ms = [](clock::time_point a, clock::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
  };
  runtime::current_device();
  const std::string arch = runtime::current_device().arch();
  // NVRTC's first compile in a process loads its builtins: pay that first,
  // so neither measurement below includes it.
  runtime::nvrtc_compile("extern \"C\" __global__ void warm() {}", "warm.cu", arch,
                         runtime::NvrtcTarget::cubin);
  std::int64_t n = 1000003 + (std::chrono::steady_clock::now().time_since_epoch().count() % 1000);
  // Kernels are shape-generic: a new shape is no new kernel. A parameter no
  // cache has seen is (leaky_relu's slope, derived from n).
  const double slope = 0.01 + static_cast<double>(n % 1000) * 1e-6;
  // NVRTC alone on the source of an op (lowered on the host: no GPU compile).
  ops::Elementwise probe("leaky_relu", {{n}}, f16, {slope * 2}, {}, Device::host());
  auto t2 = clock::now();
  runtime::nvrtc_compile(probe.kernel().cuda_source(), "probe.cu", arch,
                         runtime::NvrtcTarget::cubin);
  auto t3 = clock::now();
  // Cold: a kernel no cache has seen, built and loaded.
  auto t0 = clock::now();
  ops::Elementwise cold("leaky_relu", {{n}}, f16, {slope}, {}, Device::cuda());
  cold.kernel().prepare_gpu();
  auto t1 = clock::now();
  // Memory: the same op again in this process.
  auto t4 = clock::now();
  ops::Elementwise again("leaky_relu", {{n}}, f16, {slope}, {}, Device::cuda());
  again.kernel().prepare_gpu();
  auto t5 = clock::now();
  os << "{\"cold_ms\": " << ms(t0, t1) << ", \"nvrtc_alone_ms\": " << ms(t2, t3)
     << ", \"memory_ms\": " << ms(t4, t5) << ", \"n\": " << n << "}\n";
}

// The floor under tx's host overhead: the same empty-ish launch straight
// through the driver (cuLaunchKernel via tx::runtime::launch), no tx checks.
void launch_floor(std::ostream& os) {
  using clock = std::chrono::steady_clock;
  const char* src = "extern \"C\" __global__ void tiny(float* y) { y[threadIdx.x] += 1.0f; }";
  auto out = runtime::nvrtc_compile(src, "tiny.cu", runtime::current_device().arch(),
                                    runtime::NvrtcTarget::cubin);
  auto mod = runtime::Module::load(out.cubin, "tiny");
  void* f = mod->function("tiny");
  runtime::DevicePtr y = runtime::device_alloc(4096);
  void* args[] = {&y};
  const int calls = 200;  // well inside the launch queue: host cost, not GPU throughput
  for (int i = 0; i < 100; ++i) runtime::launch(f, {1, 1, 1}, {256, 1, 1}, 0, args, "tiny");
  runtime::synchronize("floor");
  auto t0 = clock::now();
  for (int i = 0; i < calls; ++i) runtime::launch(f, {1, 1, 1}, {256, 1, 1}, 0, args, "tiny");
  auto t1 = clock::now();
  runtime::synchronize("floor");
  // The same through tx: a Kernel and its argument checks.
  Tensor t = Tensor::empty({1024}, f32, Device::cuda());
  PrimFunc pf = T::prim_func("tiny_tx", [&](Handle Y_ptr) {
    auto Y = T::match_buffer(Y_ptr, {1024}, f32, std::nullopt, "y");
    auto tid = T::thread_id({256}, "tid");
    Y(tid) = Y(tid) + 1.0f;
  });
  Kernel k = compile(pf, {.device = Device::cuda()});
  for (int i = 0; i < 100; ++i) k(t);
  runtime::synchronize("floor");
  auto t2 = clock::now();
  for (int i = 0; i < calls; ++i) k(t);
  auto t3 = clock::now();
  runtime::synchronize("floor");
  runtime::device_free(y);
  os << "{\"driver_us\": " << std::chrono::duration<double, std::micro>(t1 - t0).count() / calls
     << ", \"tx_kernel_us\": " << std::chrono::duration<double, std::micro>(t3 - t2).count() / calls
     << "}\n";
}

// Disk hit: run in a second process with the same TX_CACHE_DIR.
void jit_disk(std::ostream& os, std::int64_t n) {
  using clock = std::chrono::steady_clock;
  runtime::current_device();
  runtime::nvrtc_version();
  auto t0 = clock::now();
  const double slope = 0.01 + static_cast<double>(n % 1000) * 1e-6;  // as jit_timings
  ops::Elementwise e("leaky_relu", {{n}}, f16, {slope}, {}, Device::cuda());
  auto t1 = clock::now();
  std::string origin = e.kernel().prepare_gpu();
  auto t2 = clock::now();
  os << "{\"lower_ms\": " << std::chrono::duration<double, std::milli>(t1 - t0).count()
     << ", \"disk_ms\": " << std::chrono::duration<double, std::milli>(t2 - t0).count()
     << ", \"origin\": \"" << origin << "\"}\n";
}

// The shape-generic kernels against one kernel per exact shape, on the
// large cases of the benchmark, in one run: each kernel's bandwidth (calls
// back to back: the GPU alone), and apart from it what one call costs the
// host and one call timed alone (host time before the launch included).
// The generic launch binds extents and computes its divisors' magic
// numbers: a few hundred ns of host time that a 20-us kernel timed alone
// shows as percents of bandwidth (H200, 2026-11-27: the 17-us channel
// broadcast at 0.957 timed alone).
void compare_exact(std::ostream& os, const std::string& only) {
  os << "{\"gpu\": \"" << runtime::current_device().name << "\", \"results\": [\n";
  bool first = true;
  for (const Case& c : cases()) {
    if (c.small || c.op == "cast") continue;
    if (!only.empty() && (c.label + "|" + c.dtype.name()).find(only) == std::string::npos) continue;
    // Rounds of generic and exact alternating, the best of each: three, and
    // seven for kernels under 100 us, which vary by several percent from
    // round to round (H100, 2026-11-27: the 35-us (1024, 20480) + (20480,)
    // bf16 add measured 0.931 of exact once in three rounds each, 0.986 and
    // 0.997 in the runs before, with the same kernels).
    Result g = run_case(c, false, true), e = run_case(c, true, true);
    const int rounds = std::max(g.gpu_ms, e.gpu_ms) < 0.1 ? 7 : 3;
    for (int round = 1; round < rounds; ++round) {
      Result g2 = run_case(c, false, true), e2 = run_case(c, true, true);
      for (auto [best, r] : {std::pair{&g, &g2}, std::pair{&e, &e2}}) {
        best->gpu_ms = std::min(best->gpu_ms, r->gpu_ms);
        best->tx_ms = std::min(best->tx_ms, r->tx_ms);
        best->host_us = std::min(best->host_us, r->host_us);
      }
    }
    auto gbs = [&](double ms) { return static_cast<double>(g.bytes) / (ms * 1e6); };
    std::fprintf(stderr,
                 "%-36s %-9s generic %7.0f GB/s  exact %7.0f GB/s  ratio %.3f  | host us %.2f / "
                 "%.2f  one call alone %.3f\n",
                 c.label.c_str(), c.dtype.short_name().c_str(), gbs(g.gpu_ms), gbs(e.gpu_ms),
                 e.gpu_ms / g.gpu_ms, g.host_us, e.host_us, e.tx_ms / g.tx_ms);
    os << (first ? "" : ",\n") << "  {\"label\": \"" << c.label << "\", \"dtype\": \""
       << c.dtype.name() << "\", \"bytes\": " << g.bytes << ", \"generic_ms\": " << g.gpu_ms
       << ", \"exact_ms\": " << e.gpu_ms << ", \"generic_alone_ms\": " << g.tx_ms
       << ", \"exact_alone_ms\": " << e.tx_ms << ", \"generic_host_us\": " << g.host_us
       << ", \"exact_host_us\": " << e.host_us << ", \"copy_ms\": " << g.copy_ms << "}";
    first = false;
  }
  os << "\n]}\n";
}

}  // namespace

int main(int argc, char** argv) {
  std::string out_path = "tx_elementwise.json";
  std::string only;
  try {
    for (int i = 1; i < argc; ++i) {
      std::string a = argv[i];
      if (a == "--cases") {
        write_cases_json(std::cout);
        return 0;
      }
      if (a == "--jit") {
        jit_timings(std::cout);
        return 0;
      }
      if (a == "--tune") {
        // Autotuning, opt-in: searches once, remembers the winner on disk, reuses it.
        for (int pass = 0; pass < 2; ++pass) {
          auto t0 = std::chrono::steady_clock::now();
          ops::Elementwise e("gelu", {{1 << 24}}, f16, {}, {.tune = true}, Device::cuda());
          auto t1 = std::chrono::steady_clock::now();
          ops::Config c = e.config();
          std::printf("tune pass %d: %s threads=%d npt=%d in %.0f ms\n", pass,
                      ops::strategy_name(*c.strategy), c.threads, c.num_per_thread,
                      std::chrono::duration<double, std::milli>(t1 - t0).count());
        }
        return 0;
      }
      if (a == "--launch-floor") {
        launch_floor(std::cout);
        return 0;
      }
      if (a == "--jit-disk" && i + 1 < argc) {
        jit_disk(std::cout, std::atoll(argv[++i]));
        return 0;
      }
      if (a == "--compare-exact") {
        compare_exact(std::cout, only);  // --only before --compare-exact filters
        return 0;
      }
      if (a == "--out" && i + 1 < argc) out_path = argv[++i];
      if (a == "--only" && i + 1 < argc) only = argv[++i];  // "label|dtype" substring filter
    }
    std::string why;
    if (!runtime::cuda_available(&why)) {
      std::printf("SKIPPED: bench_elementwise needs a GPU: %s\n", why.c_str());
      return 77;
    }
    const auto& dev = runtime::current_device();
    std::ofstream js(out_path);
    js << "{\"gpu\": \"" << dev.name << "\", \"results\": [\n";
    std::printf("%-36s %-9s %10s %10s %8s %9s  %s\n", "case", "dtype", "copy GB/s", "tx GB/s",
                "tx/copy", "host us", "config");
    auto cs = cases();
    if (!only.empty()) {
      std::vector<Case> keep;
      for (auto& c : cs)
        if ((c.label + "|" + c.dtype.name()).find(only) != std::string::npos) keep.push_back(c);
      cs = keep;
    }
    for (std::size_t i = 0; i < cs.size(); ++i) {
      Result r = run_case(cs[i]);
      double tx_gbs = static_cast<double>(r.bytes) / (r.tx_ms * 1e6);
      double copy_gbs = static_cast<double>(r.bytes) / (r.copy_ms * 1e6);
      std::printf("%-36s %-9s %10.0f %10.0f %8.3f %9.2f  %s\n", r.c.label.c_str(),
                  r.c.dtype.short_name().c_str(), copy_gbs, tx_gbs, tx_gbs / copy_gbs, r.host_us,
                  r.config.c_str());
      std::fflush(stdout);
      js << "  {\"label\": \"" << r.c.label << "\", \"dtype\": \"" << r.c.dtype.name()
         << "\", \"bytes\": " << r.bytes << ", \"tx_ms\": " << r.tx_ms
         << ", \"copy_ms\": " << r.copy_ms << ", \"host_us\": " << r.host_us << ", \"config\": \""
         << r.config << "\"}" << (i + 1 < cs.size() ? "," : "") << "\n";
    }
    js << "]}\n";
  } catch (const Error& e) {
    std::cerr << e.what() << "\n";
    return 2;
  }
  return 0;
}
