// Launch host time: a sequence of 10 tx launches called directly against the
// same 10 captured once into a CUDA graph (tx::Graph) and replayed.
//
//   bench_launch [--json FILE]
//
// Two sequences: 10 tx ops (ops::gelu, ops::add, ... in their out= forms,
// shape-generic kernels) and 10 launches of one tx Kernel. For each, the
// host's time per sequence (enqueueing only: the wall clock around 50
// sequences queued back to back, the GPU synchronized between groups so the
// launch queue never fills), the median over groups; and the GPU time per
// sequence (CUDA events around 10 sequences back to back). Direct launches
// cannot go below cuLaunchKernel's own cost per kernel (the launch floor of
// bench_elementwise); a replay is one cuGraphLaunch for the ten.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "bench_util.hpp"
#include "tx/ops/ops.hpp"
#include "tx/tx.hpp"

using namespace tx;

namespace {

// Microseconds of host time per call of f, enqueued back to back.
double host_us(const std::function<void()>& f, int calls = 50, int groups = 40) {
  using clock = std::chrono::steady_clock;
  for (int i = 0; i < 10; ++i) f();
  synchronize();
  std::vector<double> us;
  for (int g = 0; g < groups; ++g) {
    auto t0 = clock::now();
    for (int c = 0; c < calls; ++c) f();
    auto t1 = clock::now();
    us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / calls);
    synchronize();
  }
  return bench::median(us);
}

PrimFunc scale_add() {
  return T::prim_func("bench_scale_add", [&](Handle X_ptr, Handle Y_ptr) {
    auto n = T::dim("n");
    auto X = T::match_buffer(X_ptr, {n}, f32);
    auto Y = T::match_buffer(Y_ptr, {n}, f32);
    auto bx = T::cta_id({ceildiv(n, 256)});
    auto tid = T::thread_id({256});
    auto i = T::let(bx * 256 + tid, "i");
    T::if_(i < n, [&] { Y(i) = X(i) * 0.5f + Y(i); });
  });
}

struct Row {
  std::string what;
  double direct_host_us, graph_host_us, direct_gpu_us, graph_gpu_us;
};

Row measure(const std::string& what, const std::function<void()>& ten) {
  Graph g = Graph::capture(ten);
  Row r{what, 0, 0, 0, 0};
  r.direct_host_us = host_us(ten);
  r.graph_host_us = host_us([&] { g.replay(); });
  r.direct_gpu_us = 1000.0 * bench::time_ms_back_to_back(ten);
  r.graph_gpu_us = 1000.0 * bench::time_ms_back_to_back([&] { g.replay(); });
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  std::string json;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::string(argv[i]) == "--json") json = argv[i + 1];
  std::string why;
  if (!runtime::cuda_available(&why)) {
    std::printf("bench_launch: no GPU (%s)\n", why.c_str());
    return 77;
  }
  const std::int64_t n = 1 << 14;
  Tensor A = bench::random_tensor({n}, f32), B = bench::random_tensor({n}, f32);
  Tensor C = Tensor::empty({n}, f32, Device::cuda()), D = Tensor::empty({n}, f32, Device::cuda());
  auto ten_ops = [&] {
    ops::gelu(A, C);
    ops::add(C, B, D);
    ops::mul(D, A, C);
    ops::silu(C, D);
    ops::sub(D, B, C);
    ops::exp(C, D);
    ops::maximum(D, A, C);
    ops::sqrt(B, D);
    ops::mul(C, D, C);
    ops::neg(C, D);
  };
  Kernel k = compile(scale_add(), {.device = Device::cuda()});
  auto ten_kernels = [&] {
    for (int i = 0; i < 10; ++i) k(A, B);
  };
  ten_ops();
  ten_kernels();
  synchronize();
  std::vector<Row> rows = {measure("10 tx ops (out=)", ten_ops),
                           measure("10 tx Kernel launches", ten_kernels)};
  const runtime::DeviceInfo& dev = runtime::current_device();
  std::printf("%s, %lld f32 elements per launch\n", dev.name.c_str(), static_cast<long long>(n));
  std::printf(
      "| sequence | host us / sequence: direct | replayed graph | ratio | GPU us / "
      "sequence: direct | graph |\n|---|---|---|---|---|---|\n");
  for (const Row& r : rows)
    std::printf("| %s | %.2f | %.2f | %.1fx | %.2f | %.2f |\n", r.what.c_str(), r.direct_host_us,
                r.graph_host_us, r.direct_host_us / r.graph_host_us, r.direct_gpu_us,
                r.graph_gpu_us);
  if (!json.empty()) {
    std::ofstream js(json);
    js << "[";
    for (std::size_t i = 0; i < rows.size(); ++i)
      js << (i ? ",\n " : "") << "{\"sequence\": \"" << rows[i].what
         << "\", \"direct_host_us\": " << rows[i].direct_host_us
         << ", \"graph_host_us\": " << rows[i].graph_host_us
         << ", \"direct_gpu_us\": " << rows[i].direct_gpu_us
         << ", \"graph_gpu_us\": " << rows[i].graph_gpu_us << "}";
    js << "]\n";
  }
  return 0;
}
