// tx::ops::grouped_matmul on an sm_90 GPU: the Hopper kernel (and the SIMT
// one elsewhere) against float64, at sizes where every CTA takes several
// tiles; the plan names the kernel.
#define TX_GROUPED_DEVICE tx::Device::cuda()
#include "grouped_matmul_cases.hpp"
#include "tx/runtime/cuda_driver.hpp"

TEST_CASE("grouped_matmul on the GPU: mixture-of-experts shapes, skewed routing") {
  using namespace groupedcase;
  const bool hopper = runtime::current_device().cc_major == 9;
  std::mt19937 rng(20261129);
  for (std::int64_t E : {8, 64}) {
    // Skewed: a few experts take most tokens, some none.
    std::vector<std::int32_t> rows(static_cast<std::size_t>(E));
    for (auto& r : rows) {
      const auto u = static_cast<std::int32_t>(rng() % 100);
      r = u < 20   ? 0
          : u < 90 ? static_cast<std::int32_t>(rng() % 96)
                   : 400 + static_cast<std::int32_t>(rng() % 300);
    }
    for (DType t : {bf16, f8e4m3}) {
      const Problem p{.N = 512, .K = 384, .rows = rows, .extra = 9, .t = t, .b_nk = t.is_fp8()};
      CAPTURE(E);
      CAPTURE(t.name());
      Inputs in = make_inputs(p, device());
      const std::string plan = ops::grouped_matmul_plan(in.A, in.B, in.Offs);
      CAPTURE(plan);
      if (hopper) CHECK(plan.rfind("tensor cores grouped", 0) == 0);
      CHECK(run_op(p) <= 1.0);
      // The kernel itself, on a poisoned output: rows past the end untouched.
      if (hopper) {
        const ops::MatmulTiling& tiling = ops::detail::grouped_matmul_tiling(t, false);
        Kernel k = compile(ops::detail::grouped_matmul_kernel(
                               E, p.N, p.K, t, tiling, runtime::current_device().sm_count, p.b_nk),
                           {.device = Device::cuda()});
        CHECK(run_kernel(p, k) <= 1.0);
      }
    }
  }
}
