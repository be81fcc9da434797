// The GEMM family beyond ops::matmul on an sm_90 GPU: grouped_matmul and
// scaled_matmul (the Hopper kernels; the SIMT ones elsewhere) against
// float64, at sizes where every CTA takes several tiles; the plans name the
// kernels.
#define TX_GROUPED_DEVICE tx::Device::cuda()
#include "grouped_matmul_cases.hpp"
#include "scaled_matmul_cases.hpp"
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

TEST_CASE("scaled_matmul on the GPU: DeepSeek-V3's block scales at a layer's size") {
  using namespace scaledcase;
  const bool hopper = runtime::current_device().cc_major == 9;
  for (std::int64_t M : {48, 1000}) {
    const Problem p{.M = M, .N = 1536, .K = 1024};
    CAPTURE(M);
    Inputs in = make_inputs(p, device());
    const std::string plan = ops::scaled_matmul_plan(in.A, in.B, in.SA, in.SB);
    CAPTURE(plan);
    if (hopper) CHECK(plan.rfind("tensor cores", 0) == 0);
    CHECK(error(p, in, ops::scaled_matmul(in.A, in.B, in.SA, in.SB)) <= 1.0);
  }
  // quantize_fp8 then scaled_matmul: close to the bf16 product.
  const std::int64_t M = 256, N = 512, K = 768;
  std::vector<double> x = tx::test::random_values(static_cast<std::size_t>(M * K), bf16, -2, 2);
  std::vector<double> w = tx::test::random_values(static_cast<std::size_t>(N * K), bf16, -2, 2);
  Tensor X = Tensor::from_doubles(x, {M, K}, bf16, device());
  Tensor W = Tensor::from_doubles(w, {N, K}, bf16, device());
  auto [xq, xs] = ops::quantize_fp8(X);
  // W's fp8 values are the exact operands here (one scale for B), so the
  // bound is x's rounding alone; scaled_matmul_cases.hpp runs the whole
  // recipe (W in 128 x 128 blocks) against the unquantized product.
  auto [wq, ws] = ops::quantize_fp8(W);
  (void)ws;
  Tensor one = Tensor::from_doubles({1.0}, {1}, f32, device());
  Tensor Y = ops::scaled_matmul(xq, wq.transpose(0, 1), xs, one, {.out_dtype = f32});
  const double worst = product_error(x, wq.to_doubles(), Y.to_doubles(), M, N, K, 17, 13);
  // x's fp8 rounding: 2^-4 of each term at worst, far less on average.
  CHECK(worst < 0x1p-5);
}
