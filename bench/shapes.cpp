// bench/shapes: a serving workload's sweep of 200 token counts (1..8192,
// hidden 4096), each op called once per size, timed end to end from a cold
// kernel cache (the first call's compile included), with shape-generic
// kernels and with one kernel per exact shape. bench/shapes.py times PyTorch
// eager and torch.compile(dynamic=True) on the same sizes; bench/shapes.sh
// runs everything, each measurement in a fresh process.
//
//   bench_shapes --sizes                       the 200 token counts (JSON)
//   bench_shapes --run generic|exact OP DTYPE  one cold sweep; prints a JSON line
//   bench_shapes --first-calls OP DTYPE        a fresh process's first calls, step by step
//
// OP: gelu (T, 4096), add (T, 4096) + (4096,), silu_and_mul (T, 8192).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "tx/ops/ops.hpp"
#include "tx/runtime/cuda_driver.hpp"
#include "tx/runtime/nvrtc.hpp"
#include "tx/tx.hpp"

using namespace tx;

namespace {

constexpr std::int64_t kHidden = 4096;

// Log-uniform in [1, 8192] from a fixed 64-bit LCG: decode steps (a few
// tokens) and prefills (thousands) as a serving mix, the same list every run.
std::vector<std::int64_t> sizes() {
  std::vector<std::int64_t> out;
  std::uint64_t s = 0x9e3779b97f4a7c15ull;
  while (out.size() < 200) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    double u = static_cast<double>(s >> 11) / 9007199254740992.0;  // [0, 1)
    out.push_back(std::max<std::int64_t>(1, static_cast<std::int64_t>(std::exp2(u * 13.0))));
  }
  return out;
}

int run(const std::string& mode, const std::string& op, DType t) {
  const bool exact = mode == "exact";
  std::vector<std::int64_t> ts = sizes();
  // Inputs and outputs made up front (a server's tensors exist already).
  std::vector<std::vector<Tensor>> inputs;
  std::vector<Tensor> outputs;
  Tensor bias = Tensor::empty({kHidden}, t, Device::cuda());
  bias.fill_bits(0x3c00);
  for (std::int64_t n : ts) {
    std::int64_t cols = op == "silu_and_mul" ? 2 * kHidden : kHidden;
    Tensor x = Tensor::empty({n, cols}, t, Device::cuda());
    x.fill_bits(0x3a00);
    inputs.push_back(op == "add" ? std::vector<Tensor>{x, bias} : std::vector<Tensor>{x});
    outputs.push_back(Tensor::empty({n, kHidden}, t, Device::cuda()));
  }
  runtime::synchronize("bench");
  ops::CacheStats s0 = ops::cache_stats();
  const std::uint64_t nvrtc0 = runtime::nvrtc_compile_count();
  // Host time of the calls (the GPU runs behind them), split by kind: the
  // first call, later calls on a token count not seen before (planning, the
  // class's kernel from the memory cache or a compile), and repeated counts.
  using clock = std::chrono::steady_clock;
  auto ms = [](clock::time_point a, clock::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
  };
  double first_ms = 0, new_ms = 0, repeat_ms = 0;
  std::set<std::int64_t> seen;
  auto t0 = clock::now();
  for (std::size_t i = 0; i < ts.size(); ++i) {
    auto c0 = clock::now();
    ops::run(op, inputs[i], outputs[i], {}, {.exact_shape = exact});
    const double c = ms(c0, clock::now());
    (i == 0 ? first_ms : seen.count(ts[i]) ? repeat_ms : new_ms) += c;
    seen.insert(ts[i]);
  }
  runtime::synchronize("bench");
  auto t1 = clock::now();
  ops::CacheStats s1 = ops::cache_stats();
  // The same sweep again, warm: what the steady state costs.
  auto t2 = clock::now();
  for (std::size_t i = 0; i < ts.size(); ++i)
    ops::run(op, inputs[i], outputs[i], {}, {.exact_shape = exact});
  runtime::synchronize("bench");
  auto t3 = clock::now();
  std::printf(
      "{\"impl\": \"tx %s\", \"op\": \"%s\", \"dtype\": \"%s\", \"cold_ms\": %.3f, "
      "\"warm_ms\": %.3f, \"compiles\": %llu, \"nvrtc\": %llu, \"nvrtc_loaded\": %s, "
      "\"host_first_ms\": %.3f, \"host_new_sizes_ms\": %.3f, \"new_sizes\": %zu, "
      "\"host_repeats_ms\": %.3f}\n",
      mode.c_str(), op.c_str(), t.name().c_str(), ms(t0, t1), ms(t2, t3),
      static_cast<unsigned long long>(s1.compiles - s0.compiles),
      static_cast<unsigned long long>(runtime::nvrtc_compile_count() - nvrtc0),
      runtime::nvrtc_loaded() ? "true" : "false", first_ms, new_ms, seen.size() - 1, repeat_ms);
  return 0;
}

// Where a fresh process's first calls of an op spend their time, step by
// step: building the op (planning, and the kernel: prebuilt, or lowered and
// generated), loading its GPU binary, the first launch; for the first token
// count's class and for the single-token one; then a warm call.
int first_calls(const std::string& op, DType t) {
  using clock = std::chrono::steady_clock;
  auto ms = [](clock::time_point a, clock::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
  };
  std::printf("{\"op\": \"%s\", \"dtype\": \"%s\", \"steps\": [", op.c_str(), t.name().c_str());
  bool first = true;
  for (std::int64_t tokens : {std::int64_t{37}, std::int64_t{1}, std::int64_t{37}}) {
    const std::int64_t cols = op == "silu_and_mul" ? 2 * kHidden : kHidden;
    Tensor x = Tensor::empty({tokens, cols}, t, Device::cuda());
    x.fill_bits(0x3a00);
    Tensor bias = Tensor::empty({kHidden}, t, Device::cuda());
    bias.fill_bits(0x3c00);
    std::vector<Tensor> in = op == "add" ? std::vector<Tensor>{x, bias} : std::vector<Tensor>{x};
    std::vector<std::vector<std::int64_t>> shapes;
    for (const Tensor& i : in) shapes.push_back(i.shape());
    Tensor out = Tensor::empty({tokens, kHidden}, t, Device::cuda());
    runtime::synchronize("bench");
    auto t0 = clock::now();
    ops::Elementwise e(op, shapes, t, {}, {}, Device::cuda());
    auto t1 = clock::now();
    std::string origin = e.kernel().prepare_gpu();
    auto t2 = clock::now();
    e(in, out);
    runtime::synchronize("bench");
    auto t3 = clock::now();
    std::printf(
        "%s{\"tokens\": %lld, \"build_ms\": %.3f, \"load_ms\": %.3f, \"origin\": \"%s\", "
        "\"prebuilt\": %s, \"launch_ms\": %.3f}",
        first ? "" : ", ", static_cast<long long>(tokens), ms(t0, t1), ms(t1, t2), origin.c_str(),
        e.kernel().is_prebuilt() ? "true" : "false", ms(t2, t3));
    first = false;
  }
  std::printf("]}\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    std::string a = argc > 1 ? argv[1] : "";
    if (a == "--sizes") {
      std::printf("[");
      auto s = sizes();
      for (std::size_t i = 0; i < s.size(); ++i)
        std::printf("%s%lld", i ? ", " : "", static_cast<long long>(s[i]));
      std::printf("]\n");
      return 0;
    }
    if (a == "--run" && argc == 5) {
      std::string why;
      if (!runtime::cuda_available(&why)) {
        std::printf("SKIPPED: bench_shapes needs a GPU: %s\n", why.c_str());
        return 77;
      }
      return run(argv[2], argv[3], dtype_from_string(argv[4]));
    }
    if (a == "--first-calls" && argc == 4) {
      std::string why;
      if (!runtime::cuda_available(&why)) {
        std::printf("SKIPPED: bench_shapes needs a GPU: %s\n", why.c_str());
        return 77;
      }
      return first_calls(argv[2], dtype_from_string(argv[3]));
    }
    std::fprintf(stderr,
                 "usage: bench_shapes --sizes | --run generic|exact OP DTYPE | --first-calls OP "
                 "DTYPE\n");
    return 2;
  } catch (const Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
}
