// bench/gemm: tx's tensor-core GEMM (samples/gemm.cpp: a cp.async ring of
// shared tiles, ldmatrix + mma.sync m16n8k16) over eight tilings per shape,
// the fastest reported, on the shapes; bench/gemm.py times torch.matmul (cuBLAS) and a
// Triton kernel on the same shapes and writes the report (bench/run_gemm.sh
// runs both).
//
// On sm_90 it ends with fp8 (e4m3) rows: ops::matmul's wgmma kernel with B
// stored (N, K), the operand layout torch._scaled_mm takes.
//
//   bench_gemm --out tx.json
//   TX_GEMM_QUICK=1 bench_gemm   (bf16 4096^3 only: for tuning runs; =8192: 8192^3)
//   TX_GEMM_ONLY="128x256x32 w64x64 s3" bench_gemm   (one tiling: for profiling)
//
// TFLOP/s = 2 M N K / time. Timing: CUDA events around each call, 10
// warm-ups, median of 50. Each case also checks 64 entries of C against
// float64 dot products of the same (rounded) inputs.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#define TX_SAMPLE_NO_MAIN
#include "../samples/gemm.cpp"
#include "../samples/gemm_hopper.cpp"
#include "bench_util.hpp"
#include "tx/ops/ops.hpp"
#include "tx/runtime/cuda_driver.hpp"

namespace {

struct GemmShape {
  std::int64_t m, n, k;
};

}  // namespace

// The tilings tried on every shape (the fastest is reported, with its name).
const std::vector<std::pair<std::string, GemmConfig>>& configs() {
  static const std::vector<std::pair<std::string, GemmConfig>> c = {
      {"128x128x32 w64x64 s3", {128, 128, 32, 64, 64, 3}},
      {"128x256x32 w64x64 s3", {128, 256, 32, 64, 64, 3}},
      {"128x256x32 w64x64 s4", {128, 256, 32, 64, 64, 4}},
      {"256x128x32 w64x64 s4", {256, 128, 32, 64, 64, 4}},
      {"128x256x64 w64x64 s4", {128, 256, 64, 64, 64, 4}},
      {"128x256x64 w64x64 s3 sw", {128, 256, 64, 64, 64, 3, 8, true}},
      {"128x256x32 w64x64 s4 sw", {128, 256, 32, 64, 64, 4, 8, true}},
      {"128x128x32 w64x64 s3 sw", {128, 128, 32, 64, 64, 3, 8, true}},
      {"256x128x32 w64x64 s3", {256, 128, 32, 64, 64, 3}},
      {"128x256x64 w64x64 s3", {128, 256, 64, 64, 64, 3}},
      {"64x128x64 w32x64 s4", {64, 128, 64, 32, 64, 4}},
      {"16x64x32 w16x16 s4", {16, 64, 32, 16, 16, 4}},
  };
  return c;
}

// The Hopper kernel's tilings (samples/gemm_hopper.cpp: TMA, mbarrier
// pipeline, wgmma, warp specialization, persistent CTAs), tried on sm_90.
const std::vector<std::pair<std::string, HopperGemmConfig>>& hopper_configs() {
  static const std::vector<std::pair<std::string, HopperGemmConfig>> c = {
      {"wgmma 128x256x64 s4", {.bm = 128, .bn = 256, .bk = 64, .stages = 4, .tma_store = false}},
      {"wgmma 128x256x64 s3", {.bm = 128, .bn = 256, .bk = 64, .stages = 3, .tma_store = false}},
      {"wgmma 128x128x64 s6", {.bm = 128, .bn = 128, .bk = 64, .stages = 6, .tma_store = false}},
      {"wgmma 64x256x64 s4", {.bm = 64, .bn = 256, .bk = 64, .stages = 4, .tma_store = false}},
      // The epilogue through shared memory and a TMA store (copy_async/tma_store;
      // the sample's default), and above straight from the registers.
      {"wgmma 128x256x64 s3 tma", {.bm = 128, .bn = 256, .bk = 64, .stages = 3, .tma_store = true}},
      {"wgmma 128x128x64 s5 tma", {.bm = 128, .bn = 128, .bk = 64, .stages = 5, .tma_store = true}},
  };
  return c;
}

int main(int argc, char** argv) {
  std::string out = argc > 2 && std::string(argv[1]) == "--out" ? argv[2] : "gemm_tx.json";
  const std::vector<GemmShape> shapes = {{4096, 4096, 4096},
                                         {8192, 8192, 8192},
                                         {4096, 11008, 4096},
                                         {128, 4096, 4096},
                                         {16, 4096, 4096}};
  std::ofstream js(out);
  js << "[\n";
  bool first = true;
  int bad = 0;
  // TX_GEMM_QUICK=1: bf16 4096^3 only; TX_GEMM_QUICK=8192: bf16 8192^3 only.
  const char* quick_env = std::getenv("TX_GEMM_QUICK");
  const bool quick = quick_env != nullptr;
  const std::int64_t quick_m = quick && std::string(quick_env) == "8192" ? 8192 : 4096;
  for (DType t : {bf16, f16})
    for (const GemmShape& s : shapes) {
      if (quick && (t != bf16 || s.m != quick_m || s.n != quick_m)) continue;
      char label[96];
      std::snprintf(label, sizeof label, "(%lld, %lld, %lld)", static_cast<long long>(s.m),
                    static_cast<long long>(s.n), static_cast<long long>(s.k));
      double ms = -1, err = -1;
      std::string note, best;
      Tensor A = bench::random_tensor({s.m, s.k}, t), B = bench::random_tensor({s.k, s.n}, t);
      Tensor C = Tensor::empty({s.m, s.n}, t, Device::cuda());
      Tensor Cbest = Tensor::empty({s.m, s.n}, t, Device::cuda());
      const char* only = std::getenv("TX_GEMM_ONLY");
      // Times one tiling's kernel; the fastest so far leaves its C in Cbest.
      auto try_tiling = [&](const std::string& name, const PrimFunc& f) {
        Kernel k = compile(f, {.device = Device::cuda()});
        double one = bench::time_ms([&] { k(A, B, C); }, 10, 50);
        std::printf("  %-20s %-5s %-22s %8.3f ms\n", label, t.short_name().c_str(), name.c_str(),
                    one);
        if (ms < 0 || one < ms) {
          ms = one;
          best = name;
          k(A, B, Cbest);
        }
      };
      for (const auto& [name, cfg] : configs()) {
        if (only && name != only) continue;
        if (s.m % cfg.bm || s.n % cfg.bn || s.k % cfg.bk) continue;
        try_tiling(name, gemm(s.m, s.n, s.k, t, cfg));
      }
      const runtime::DeviceInfo& dev0 = runtime::device_info(0);
      for (const auto& [name, cfg0] : hopper_configs()) {
        if (dev0.cc_major != 9) break;
        if (only && name != only) continue;
        HopperGemmConfig cfg = cfg0;
        cfg.ctas = dev0.sm_count;
        if (s.m % cfg.bm || s.n % cfg.bn || s.k % cfg.bk) continue;
        try_tiling(name, gemm_hopper(s.m, s.n, s.k, t, cfg));
      }
      if (ms < 0) {
        note = "no tiling divides the shape (no predicated tiles yet)";
      } else {
        // 64 entries against float64 (inputs as rounded to t).
        std::vector<double> a = A.to_doubles(), b = B.to_doubles(), c = Cbest.to_doubles();
        err = 0;
        std::uint64_t r = 12345;
        for (int q = 0; q < 64; ++q) {
          r = r * 6364136223846793005ull + 1442695040888963407ull;
          std::int64_t i = static_cast<std::int64_t>((r >> 33) % static_cast<std::uint64_t>(s.m));
          std::int64_t j = static_cast<std::int64_t>((r >> 13) % static_cast<std::uint64_t>(s.n));
          double want = 0, mag = 0;
          for (std::int64_t p = 0; p < s.k; ++p) {
            const double x =
                a[static_cast<std::size_t>(i * s.k + p)] * b[static_cast<std::size_t>(p * s.n + j)];
            want += x;
            mag += std::fabs(x);
          }
          // f32 accumulation over K terms plus one rounding to t.
          double ulp = t == bf16 ? 1.0 / 256 : 1.0 / 2048;
          double tol = static_cast<double>(s.k) * 0x1p-23 * mag + ulp * std::fabs(want) + 1e-6;
          err = std::max(err, std::fabs(c[static_cast<std::size_t>(i * s.n + j)] - want) / tol);
        }
        if (!(err <= 1.0)) ++bad;
      }
      double tflops = ms > 0 ? 2.0 * s.m * s.n * s.k / (ms * 1e-3) / 1e12 : 0;
      std::printf("gemm %-20s %-5s tx %8.3f ms %7.1f TFLOP/s  [%s]  check %.3f %s\n", label,
                  t.short_name().c_str(), ms, tflops, best.c_str(), err, note.c_str());
      // tx::ops::matmul with its default tiling choice (C allocated per call).
      const std::string plan = ops::matmul_plan(A, B);
      const double ops_ms = bench::time_ms([&] { ops::matmul(A, B); }, 10, 50);
      // Ten calls between two events: the host's work for a call overlaps the
      // GPU's for the one before, so this is the GPU's time per call (split-K:
      // both kernels), without the library's host time of a lone call.
      const double ops_b2b_ms = bench::time_ms(
                                    [&] {
                                      for (int r = 0; r < 10; ++r) ops::matmul(A, B);
                                    },
                                    2, 15) /
                                10;
      std::printf(
          "     %-20s %-5s tx::ops::matmul %8.3f ms %7.1f TFLOP/s (back to back %8.3f ms)  [%s]\n",
          label, t.short_name().c_str(), ops_ms, 2.0 * s.m * s.n * s.k / (ops_ms * 1e-3) / 1e12,
          ops_b2b_ms, plan.c_str());
      js << (first ? "" : ",\n") << "  {\"shape\": [" << s.m << ", " << s.n << ", " << s.k
         << "], \"dtype\": \"" << t.name() << "\", \"tx_ms\": " << ms
         << ", \"tx_tflops\": " << tflops << ", \"tiling\": \"" << best << "\", \"check\": " << err
         << ", \"note\": \"" << note << "\", \"ops_matmul_ms\": " << ops_ms
         << ", \"ops_matmul_b2b_ms\": " << ops_b2b_ms << ", \"ops_matmul_plan\": \"" << plan
         << "\"}";
      first = false;
    }
  // fp8 (e4m3) on sm_90: ops::matmul's wgmma kernel over its fp8 tilings,
  // with B stored (N, K) -- the layout torch._scaled_mm takes, passed as that
  // tensor's transpose -- and f32 out; tx::ops::matmul on the same operands.
  const runtime::DeviceInfo& dev = runtime::device_info(0);
  const std::vector<GemmShape> fp8_shapes = {
      {4096, 4096, 4096}, {8192, 8192, 8192}, {4096, 11008, 4096}};
  for (const GemmShape& s : fp8_shapes) {
    if (dev.cc_major != 9 || quick) break;
    const DType t = f8e4m3;
    char label[96];
    std::snprintf(label, sizeof label, "(%lld, %lld, %lld)", static_cast<long long>(s.m),
                  static_cast<long long>(s.n), static_cast<long long>(s.k));
    Tensor A = bench::random_tensor({s.m, s.k}, t), Bnk = bench::random_tensor({s.n, s.k}, t);
    Tensor C = Tensor::empty({s.m, s.n}, f32, Device::cuda());
    Tensor Cbest = Tensor::empty({s.m, s.n}, f32, Device::cuda());
    double ms = -1;
    std::string best;
    for (const ops::MatmulTiling& c : ops::matmul_tilings()) {
      if (!c.wgmma || c.bk != 128 || s.m % c.bm || s.n % c.bn || s.k % c.bk) continue;
      Kernel k = compile(ops::detail::matmul_kernel(s.m, s.n, s.k, t, c, 1, dev.sm_count, true),
                         {.device = Device::cuda()});
      const double one = bench::time_ms([&] { k(A, Bnk, C); }, 10, 50);
      std::printf("  %-20s %-5s %-22s %8.3f ms\n", label, t.short_name().c_str(), c.str().c_str(),
                  one);
      if (ms < 0 || one < ms) {
        ms = one;
        best = c.str();
        k(A, Bnk, Cbest);
      }
    }
    // 64 entries against float64; f32 out: f32 accumulation and one f32 rounding.
    std::vector<double> a = A.to_doubles(), bt = Bnk.to_doubles(), c = Cbest.to_doubles();
    double err = 0;
    std::uint64_t r = 12345;
    for (int q = 0; q < 64; ++q) {
      r = r * 6364136223846793005ull + 1442695040888963407ull;
      std::int64_t i = static_cast<std::int64_t>((r >> 33) % static_cast<std::uint64_t>(s.m));
      std::int64_t j = static_cast<std::int64_t>((r >> 13) % static_cast<std::uint64_t>(s.n));
      double want = 0, mag = 0;
      for (std::int64_t p = 0; p < s.k; ++p) {
        const double x =
            a[static_cast<std::size_t>(i * s.k + p)] * bt[static_cast<std::size_t>(j * s.k + p)];
        want += x;
        mag += std::fabs(x);
      }
      double tol = static_cast<double>(s.k) * 0x1p-23 * mag + 0x1p-24 * std::fabs(want) + 1e-6;
      err = std::max(err, std::fabs(c[static_cast<std::size_t>(i * s.n + j)] - want) / tol);
    }
    if (!(err <= 1.0)) ++bad;
    const double tflops = 2.0 * s.m * s.n * s.k / (ms * 1e-3) / 1e12;
    std::printf("gemm %-20s %-5s tx %8.3f ms %7.1f TFLOP/s  [%s]  check %.3f\n", label,
                t.short_name().c_str(), ms, tflops, best.c_str(), err);
    const Tensor B = Bnk.transpose(0, 1);  // (K, N), as torch's b.t()
    const std::string plan = ops::matmul_plan(A, B);
    const double ops_ms = bench::time_ms([&] { ops::matmul(A, B); }, 10, 50);
    const double ops_b2b_ms = bench::time_ms(
                                  [&] {
                                    for (int q = 0; q < 10; ++q) ops::matmul(A, B);
                                  },
                                  2, 15) /
                              10;
    std::printf("     %-20s %-5s tx::ops::matmul %8.3f ms (back to back %8.3f ms)  [%s]\n", label,
                t.short_name().c_str(), ops_ms, ops_b2b_ms, plan.c_str());
    js << (first ? "" : ",\n") << "  {\"shape\": [" << s.m << ", " << s.n << ", " << s.k
       << "], \"dtype\": \"" << t.name() << "\", \"b_layout\": \"nk\", \"tx_ms\": " << ms
       << ", \"tx_tflops\": " << tflops << ", \"tiling\": \"" << best << "\", \"check\": " << err
       << ", \"note\": \"\", \"ops_matmul_ms\": " << ops_ms
       << ", \"ops_matmul_b2b_ms\": " << ops_b2b_ms << ", \"ops_matmul_plan\": \"" << plan << "\"}";
    first = false;
  }
  js << "\n]\n";
  return bad ? 1 : 0;
}
