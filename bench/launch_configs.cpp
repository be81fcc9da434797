// bench/launch_configs: the sweeps behind the operator library's default
// launch configuration (ops::Config: threads per CTA, elements per thread),
// each case timed against a device-to-device copy of the same bytes.
//
//   bench_launch_configs threads   threads per CTA 256 / 128 / 512 on the
//                                  elementwise benchmark's large cases
//   bench_launch_configs fp8       fp8 ops at 16 and 32 elements per thread
//   bench_launch_configs casts     casts at 4..32 elements per thread
//   bench_launch_configs strategies the seed's three kernel strategies
//                                  (direct, explicit_parallel,
//                                  register_copy) at the default threads and
//                                  elements per thread
//
// Prints one line per case: GB/s (read + write) or the fraction of the copy.
// Timing: CUDA events, 5 warm-ups, median of 30; 2^28-element inputs.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "tx/ops/ops.hpp"
#include "tx/runtime/cuda_driver.hpp"
#include "tx/tx.hpp"

using namespace tx;
using Shape = std::vector<std::int64_t>;

namespace {

runtime::DevicePtr address(const Tensor& t) {
  return static_cast<runtime::DevicePtr>(reinterpret_cast<std::uintptr_t>(t.data_ptr()));
}

double time_ms(const std::function<void()>& f) {
  for (int i = 0; i < 5; ++i) f();
  runtime::EventTimer t;
  std::vector<double> ms;
  for (int i = 0; i < 30; ++i) {
    t.start();
    f();
    t.stop();
    ms.push_back(t.elapsed_ms());
  }
  std::nth_element(ms.begin(), ms.begin() + 15, ms.end());
  return ms[15];
}

double copy_gbs(std::size_t bytes) {
  runtime::DevicePtr a = runtime::device_alloc(bytes / 2), b = runtime::device_alloc(bytes / 2);
  double ms = time_ms([&] { runtime::copy_device_to_device(b, a, bytes / 2); });
  runtime::device_free(a);
  runtime::device_free(b);
  return static_cast<double>(bytes) / ms / 1e6;
}

// Inputs filled with one repeated byte: finite, non-zero values of every dtype
// (timing only; the numeric tests check results).
std::vector<Tensor> inputs(const std::string& op, const std::vector<Shape>& shapes, DType t,
                           std::size_t* bytes) {
  std::vector<Tensor> in;
  for (std::size_t k = 0; k < shapes.size(); ++k) {
    bool mask = (op == "where" && k == 0) || (op == "masked_fill" && k == 1);
    Tensor x = Tensor::empty(shapes[k], mask ? boolean : t, Device::cuda());
    runtime::memset_device(address(x), mask ? 1 : 0x3a, x.nbytes());
    *bytes += x.nbytes();
    in.push_back(x);
  }
  return in;
}

double op_gbs(const std::string& op, const std::vector<Shape>& shapes, DType t,
              const ops::Params& p, const ops::Config& cfg, double* copy = nullptr) {
  std::size_t bytes = 0;
  std::vector<Tensor> in = inputs(op, shapes, t, &bytes);
  ops::Elementwise e(op, shapes, t, p, cfg, Device::cuda());
  Tensor y = Tensor::empty(e.out_shape(), e.out_dtype(), Device::cuda());
  bytes += y.nbytes();
  double ms = time_ms([&] { e(in, y); });
  if (copy) *copy = copy_gbs(bytes);
  return static_cast<double>(bytes) / ms / 1e6;
}

void threads_sweep() {
  struct C {
    std::string op;
    std::vector<Shape> shapes;
    ops::Params p;
  };
  const Shape big{1 << 28};
  const std::vector<C> cases = {{"sqrt", {big}, {}},
                                {"exp", {big}, {}},
                                {"gelu", {big}, {}},
                                {"silu", {big}, {}},
                                {"relu", {big}, {}},
                                {"add", {big, big}, {}},
                                {"add", {{1024, 20480}, {20480}}, {}},
                                {"add", {{16, 256, 56, 56}, {256, 1, 1}}, {}},
                                {"masked_fill", {{1024, 20480}, {1024, 20480}}, {-1e4}},
                                {"where", {{1024, 20480}, {1024, 20480}, {1024, 20480}}, {}},
                                {"clamp", {big}, {-0.5, 0.5}},
                                {"silu_and_mul", {{2048, 2 * 28672}}, {}},
                                {"gelu_tanh_and_mul", {{2048, 2 * 28672}}, {}}};
  std::printf("op                 dtype     GB/s at threads 256, 128, 512 (ratio to 256)\n");
  for (DType t : {f32, f16, bf16})
    for (const C& c : cases) {
      std::printf("%-18s %-9s", c.op.c_str(), t.name().c_str());
      double base = 0;
      for (int threads : {256, 128, 512}) {
        double g = op_gbs(c.op, c.shapes, t, c.p, {.threads = threads});
        if (threads == 256) base = g;
        std::printf("  t%d %6.0f (%.3f)", threads, g, g / base);
      }
      std::printf("\n");
    }
}

void fp8_sweep() {
  const std::int64_t n = 1 << 28;
  std::printf("op            dtype          fraction of copy at (threads, elements per thread)\n");
  for (DType t : {f8e4m3, f8e5m2})
    for (std::string op : {"relu", "gelu", "silu", "exp", "add", "mul", "gelu_and_mul"}) {
      std::vector<Shape> shapes = {{n}};
      if (op == "add" || op == "mul") shapes = {{n}, {n}};
      if (op == "gelu_and_mul") shapes = {{8192, 2 * 16384}};
      std::printf("%-13s %-14s", op.c_str(), t.name().c_str());
      for (int threads : {128, 256})
        for (int v : {16, 32}) {
          double copy = 0,
                 g = op_gbs(op, shapes, t, {}, {.threads = threads, .num_per_thread = v}, &copy);
          std::printf(" t%d v%d %.3f", threads, v, g / copy);
        }
      std::printf("\n");
    }
}

void cast_sweep() {
  const std::int64_t n = 1 << 28;
  const std::vector<std::pair<DType, DType>> pairs = {
      {f32, f8e4m3}, {f16, f8e4m3}, {bf16, f8e4m3}, {f32, f8e5m2}, {f32, f16},
      {f32, bf16},   {f16, f32},    {f8e4m3, f32},  {f8e4m3, f16}, {f8e5m2, f32}};
  std::printf(
      "cast               fraction of copy at (threads, elements per thread; v0 = default)\n");
  for (auto [from, to] : pairs) {
    Tensor x = Tensor::empty({n}, from, Device::cuda()), y = Tensor::empty({n}, to, Device::cuda());
    runtime::memset_device(address(x), 0x3a, x.nbytes());
    std::size_t bytes = x.nbytes() + y.nbytes();
    double copy = copy_gbs(bytes);
    std::printf("%-8s -> %-8s", from.short_name().c_str(), to.short_name().c_str());
    for (int threads : {128, 256})
      for (int v : {0, 4, 8, 16, 32}) {
        if (v && (v * std::max(from.bytes(), to.bytes()) > 64 ||
                  v * std::min(from.bytes(), to.bytes()) < 4))
          continue;
        double ms = time_ms([&] { ops::cast(x, y, {.threads = threads, .num_per_thread = v}); });
        std::printf(" t%d v%d %.3f", threads, v, static_cast<double>(bytes) / ms / 1e6 / copy);
      }
    std::printf("\n");
  }
}

void strategy_sweep() {
  struct C {
    std::string op;
    std::vector<Shape> shapes;
  };
  const Shape big{1 << 28};
  const std::vector<C> cases = {{"sqrt", {big}},
                                {"gelu", {big}},
                                {"silu", {big}},
                                {"add", {big, big}},
                                {"add", {{1024, 20480}, {20480}}},
                                {"add", {{16, 256, 56, 56}, {256, 1, 1}}},
                                {"silu_and_mul", {{2048, 2 * 28672}}}};
  std::printf(
      "op                 dtype     fraction of copy: direct, explicit_parallel, register_copy\n");
  for (DType t : {f32, f16, bf16})
    for (const C& c : cases) {
      std::printf("%-18s %-9s", c.op.c_str(), t.name().c_str());
      for (ops::Strategy st : {ops::Strategy::direct, ops::Strategy::explicit_parallel,
                               ops::Strategy::register_copy}) {
        double copy = 0, g = op_gbs(c.op, c.shapes, t, {}, {.strategy = st}, &copy);
        std::printf("  %s %6.0f (%.3f)", ops::strategy_name(st), g, g / copy);
      }
      std::printf("\n");
    }
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IONBF, 0);
  std::string what = argc > 1 ? argv[1] : "";
  std::string why;
  if (!runtime::cuda_available(&why)) {
    std::fprintf(stderr, "bench_launch_configs: needs a GPU (%s)\n", why.c_str());
    return 77;
  }
  try {
    if (what == "threads")
      threads_sweep();
    else if (what == "fp8")
      fp8_sweep();
    else if (what == "casts")
      cast_sweep();
    else if (what == "strategies")
      strategy_sweep();
    else {
      std::fprintf(stderr, "usage: bench_launch_configs threads|fp8|casts|strategies\n");
      return 2;
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
