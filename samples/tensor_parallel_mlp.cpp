// A tensor-parallel MLP block over several ranks (Megatron's split, with the
// sequence split between blocks): Y = gelu(X W1) W2 where
//   - X (M, D) arrives split by rows: rank r holds rows [r m, (r + 1) m);
//   - W1 (D, F) is split by columns and W2 (F, D) by rows: rank r holds
//     W1[:, r f : (r + 1) f] and W2[r f : (r + 1) f, :], f = F / ranks;
//   - Y leaves split by rows again, like X.
// Per rank:
//   H_r = all_gather(X) @ W1_r          (M, f)   tx::ops::AllGatherMatmul
//   Y_r = rows r of sum_q gelu(H_q) W2_q (m, D)   tx::ops::MatmulReduceScatter
// Each GEMM overlaps its communication where that pays (the ops' plans say
// which path ran). The result is checked against float64 on the host.
//
// One GPU per rank when there are two GPUs or more, else host ranks
// (threads of this process, kernels on the host JIT).
//
//   tensor_parallel_mlp [--ranks=N] [--device=host]
#include <cmath>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "tx/ops/dist.hpp"
#include "tx/ops/ops.hpp"
#include "tx/runtime/cuda_driver.hpp"
#include "tx/tx.hpp"

using namespace tx;

namespace {

// Rows [r0, r0 + rows) and columns [c0, c0 + cols) of a row-major matrix.
std::vector<double> block(const std::vector<double>& a, std::int64_t width, std::int64_t r0,
                          std::int64_t rows, std::int64_t c0, std::int64_t cols) {
  std::vector<double> out;
  for (std::int64_t i = r0; i < r0 + rows; ++i)
    for (std::int64_t j = c0; j < c0 + cols; ++j)
      out.push_back(a[static_cast<std::size_t>(i * width + j)]);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const int gpus = runtime::device_count();
    bool host = gpus < 2;
    int ranks = host ? 2 : gpus;
    for (int i = 1; i < argc; ++i) {
      if (!std::strcmp(argv[i], "--device=host")) host = true;
      if (!std::strncmp(argv[i], "--ranks=", 8)) ranks = std::atoi(argv[i] + 8);
    }
    if (!host && ranks > gpus) ranks = gpus;
    if (host && !runtime::host_jit_available()) {
      std::printf("tensor_parallel_mlp: needs two GPUs or the host JIT (this build has neither)\n");
      return 77;
    }
    // Small on the host (its kernels are SIMT), a real layer's width on GPUs.
    // Rows and hidden columns per rank: small on the host (its kernels are
    // SIMT), a real layer's width on GPUs.
    const std::int64_t m = host ? 8 : 1024, f = host ? 24 : 8192, D = host ? 32 : 4096;
    const std::int64_t M = ranks * m, F = ranks * f;
    const DType t = bf16;

    // Fresh inputs, rounded to bf16 (the reference multiplies what tx does).
    std::mt19937_64 g(std::random_device{}());
    std::uniform_real_distribution<double> u(-1.0, 1.0);
    auto random = [&](std::int64_t n, double scale) {
      std::vector<double> v(static_cast<std::size_t>(n));
      for (double& x : v) x = quantize(u(g) * scale, t);
      return v;
    };
    const std::vector<double> X = random(M * D, 1.0), W1 = random(D * F, 1.0 / std::sqrt(D)),
                              W2 = random(F * D, 1.0 / std::sqrt(F));

    std::vector<Device> devices;
    for (int r = 0; r < ranks; ++r) devices.push_back(host ? Device::host() : Device::cuda(r));
    std::mutex mu;
    std::vector<std::vector<double>> Y(static_cast<std::size_t>(ranks));
    std::string plans;
    dist::Group::run_local(devices, [&](dist::Group& grp) {
      const int r = grp.rank();
      const Device dev = grp.device();
      Tensor x = Tensor::from_doubles(block(X, D, r * m, m, 0, D), {m, D}, t, dev);
      Tensor w1 = Tensor::from_doubles(block(W1, F, 0, D, r * f, f), {D, f}, t, dev);
      Tensor w2 = Tensor::from_doubles(block(W2, D, r * f, f, 0, D), {f, D}, t, dev);

      ops::AllGatherMatmul up(grp, /*max_rows=*/m, /*K=*/D, t);        // collective
      ops::MatmulReduceScatter down(grp, /*max_rows=*/m, /*N=*/D, t);  // collective
      Tensor h = ops::gelu(up(x, w1));  // (M, f): every row, this rank's columns
      Tensor y = down(h, w2);           // (m, D): this rank's rows of the sum

      std::vector<double> got = y.to_doubles();
      std::lock_guard<std::mutex> lock(mu);
      Y[static_cast<std::size_t>(r)] = got;
      if (r == 0) plans = "  up:   " + up.plan(m, f) + "\n  down: " + down.plan(m, f) + "\n";
    });

    // float64: gelu(X W1) W2, with H rounded to bf16 as tx stores it.
    // Every row on the host; 16 rows spread over M on GPUs (a float64 GEMM
    // of the whole layer would take minutes).
    double worst = 0;
    const std::int64_t row_step = host ? 1 : M / 16;
    for (std::int64_t i = 0; i < M; i += row_step) {
      std::vector<double> hrow(static_cast<std::size_t>(F));
      for (std::int64_t k = 0; k < F; ++k) {
        double s = 0;
        for (std::int64_t j = 0; j < D; ++j)
          s += X[static_cast<std::size_t>(i * D + j)] * W1[static_cast<std::size_t>(j * F + k)];
        s = quantize(s, t);
        hrow[static_cast<std::size_t>(k)] =
            quantize(0.5 * s * (1 + std::erf(s / std::sqrt(2.0))), t);
      }
      for (std::int64_t j = 0; j < D; ++j) {
        double want = 0;
        for (std::int64_t k = 0; k < F; ++k)
          want += hrow[static_cast<std::size_t>(k)] * W2[static_cast<std::size_t>(k * D + j)];
        const double got =
            Y[static_cast<std::size_t>(i / m)][static_cast<std::size_t>(i % m * D + j)];
        worst = std::max(worst, std::abs(got - want) / (1.0 + std::abs(want)));
      }
    }
    // bf16 outputs of sums of rounded terms: a few units of bf16's 2^-8.
    const bool ok = worst <= 0.02;
    std::printf(
        "tensor_parallel_mlp: %d ranks on %s, M %lld D %lld F %lld\n%s"
        "largest error against float64 %.2e (relative to 1 + |y|): %s\n",
        ranks, host ? "the host" : "GPUs", static_cast<long long>(M), static_cast<long long>(D),
        static_cast<long long>(F), plans.c_str(), worst, ok ? "ok" : "WRONG");
    return ok ? 0 : 1;
  } catch (const Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
}
