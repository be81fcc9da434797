// On the GPU: what promotion costs an elementwise op (the conversion fused
// into the op's kernel against the same op on one dtype, and against
// converting first with ops::cast), and the float32 / float64 matmul (the
// tiled SIMT kernel; PyTorch's default has TF32 off too). CUDA events around
// each call, median of 20 after 3 warm-ups. docs/ops.md quotes the output.
//
//   bench_promotion [N]      N elements for the elementwise cases (default 2^26)
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "tx/ops/ops.hpp"
#include "tx/runtime/cuda_driver.hpp"
#include "tx/tx.hpp"

using namespace tx;

namespace {

double median_ms(const std::function<void()>& f) {
  for (int i = 0; i < 3; ++i) f();
  std::vector<float> t;
  runtime::EventTimer timer;
  for (int i = 0; i < 20; ++i) {
    timer.start();
    f();
    timer.stop();
    t.push_back(timer.elapsed_ms());
  }
  std::sort(t.begin(), t.end());
  return (t[9] + t[10]) / 2;
}

Tensor filled(std::int64_t n, DType t, std::vector<std::int64_t> shape) {
  Tensor x = Tensor::empty(std::move(shape), t);
  x.fill_bits(t == bf16  ? 0x3f80
              : t == f16 ? 0x3c00
              : t == f64 ? 0x3ff0000000000000ull
                         : 0x3f800000);
  (void)n;
  return x;
}

}  // namespace

int main(int argc, char** argv) {
  if (!default_device().is_cuda()) {
    std::printf("no GPU\n");
    return 77;
  }
  const std::int64_t n = argc > 1 ? std::atoll(argv[1]) : std::int64_t{1} << 26;
  std::printf("%s, %lld elements\n", runtime::current_device().name.c_str(),
              static_cast<long long>(n));
  std::printf("| case | ms | GB/s (bytes read + written) |\n|---|---|---|\n");
  auto line = [&](const char* what, double ms, double bytes) {
    std::printf("| %s | %.3f | %.0f |\n", what, ms, bytes / ms / 1e6);
  };
  Tensor a32 = filled(n, f32, {n}), b32 = filled(n, f32, {n}), bb = filled(n, bf16, {n});
  Tensor o32 = Tensor::empty({n}, f32), tmp = Tensor::empty({n}, f32),
         obf = Tensor::empty({n}, bf16);
  line("add f32 + f32 -> f32", median_ms([&] { ops::add(a32, b32, o32); }), 12.0 * n);
  line("add f32 + bf16 -> f32 (promoted, one kernel)", median_ms([&] { ops::add(a32, bb, o32); }),
       10.0 * n);
  line("cast bf16 -> f32, then add f32 + f32 (two kernels)", median_ms([&] {
         ops::cast(bb, tmp);
         ops::add(a32, tmp, o32);
       }),
       10.0 * n);
  line("add bf16 + bf16 -> bf16", median_ms([&] { ops::add(bb, bb, obf); }), 6.0 * n);
  line("add bf16 + bf16 -> f32 out=", median_ms([&] { ops::add(bb, bb, o32); }), 8.0 * n);
  line("mul bf16 * 0.5 (scalar) -> bf16", median_ms([&] { ops::mul(bb, 0.5, obf); }), 4.0 * n);
  std::printf("\n| matmul | plan | ms | TFLOP/s |\n|---|---|---|---|\n");
  for (DType t : {f32, f64})
    for (std::int64_t s : {1024, 4096}) {
      if (t == f64 && s > 1024) continue;
      Tensor A = filled(s * s, t, {s, s}), B = filled(s * s, t, {s, s});
      const double ms = median_ms([&] { ops::matmul(A, B); });
      std::printf("| %s %lld^3 | %s | %.3f | %.2f |\n", t.name().c_str(), static_cast<long long>(s),
                  ops::matmul_plan(A, B).substr(0, 19).c_str(), ms, 2.0 * s * s * s / ms / 1e9);
    }
  return 0;
}
