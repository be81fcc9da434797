// The operator library end to end: five ops on one tensor pipeline, each a
// kernel written in the tx DSL, compiled on first use, cached after.
//
//   y = silu_and_mul(x)             (M, 2N) -> (M, N): a gated MLP activation
//   y = add(y, bias)                bias (N,) broadcast over the rows
//   y = clamp(y, -4, 4)
//   m = gt(y, 0)                    a bool mask
//   z = where(m, y, gelu(y))        keep positives, gelu the rest
//
// Runs on the GPU, or on the host JIT where there is none (--device=host
// forces it); checks every element against a double-precision reference.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <optional>
#include <random>
#include <tx/ops/ops.hpp>
#include <tx/tx.hpp>

using namespace tx;

int main(int argc, char** argv) {
  std::optional<Device> chosen;  // else tx's default, read inside the try: TX_DEVICE may be bad
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--device=host") == 0) {
      chosen = Device::host();
    } else if (std::strcmp(argv[i], "--device=cuda") == 0) {
      chosen = Device::cuda();
    } else {
      std::fprintf(stderr, "usage: %s [--device=cuda|host]\n", argv[0]);
      return 2;
    }
  }
  const std::int64_t M = 64, N = 512;
  std::mt19937_64 rng(std::random_device{}());
  std::uniform_real_distribution<double> u(-3, 3);
  std::vector<double> xv(M * 2 * N), bv(N);
  for (auto& v : xv) v = quantize(u(rng), f32);
  for (auto& v : bv) v = quantize(u(rng), f32);
  try {
    const Device dev = chosen ? *chosen : default_device();
    if (!dev.is_cuda() && !runtime::host_jit_available()) {
      std::cout << "SKIPPED: no GPU and no host JIT\n";
      return 77;
    }
    Tensor x = Tensor::from_doubles(xv, {M, 2 * N}, f32, dev);
    Tensor bias = Tensor::from_doubles(bv, {N}, f32, dev);

    Tensor y = ops::silu_and_mul(x);
    y = ops::add(y, bias);
    y = ops::clamp(y, -4.0, 4.0);
    Tensor m = ops::gt(y, Tensor::from_doubles({0.0}, {}, f32, dev));
    Tensor z = ops::where(m, y, ops::gelu(y));

    std::vector<double> got = z.to_doubles(), want(M * N);
    double worst = 0;
    for (std::int64_t r = 0; r < M; ++r)
      for (std::int64_t c = 0; c < N; ++c) {
        double g = xv[r * 2 * N + c], v = xv[r * 2 * N + N + c];
        double t = g / (1 + std::exp(-g)) * v + bv[c];
        t = std::min(std::max(t, -4.0), 4.0);
        double w = t > 0 ? t : 0.5 * t * std::erfc(-t / std::sqrt(2.0));
        want[r * N + c] = w;
        worst = std::max(worst, std::fabs(got[r * N + c] - w) / (1e-6 + 1e-5 * std::fabs(w)));
      }
    std::printf("ran silu_and_mul, add, clamp, gt, where, gelu on %s: %lld x %lld\n",
                dev.str().c_str(), static_cast<long long>(M), static_cast<long long>(N));
    std::printf("max error (relative to tolerance): %.3g -> %s\n", worst,
                worst <= 1 ? "PASS" : "FAIL");
    return worst <= 1 ? 0 : 1;
  } catch (const Error& e) {
    std::cerr << e.what() << "\n";
    return 2;
  }
}
