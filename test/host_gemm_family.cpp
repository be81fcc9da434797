// The GEMM family beyond ops::matmul on the host JIT: grouped_matmul and
// scaled_matmul (their SIMT kernels through the ops, quantize_fp8), and
// their Hopper kernels themselves run as fibers on the host -- TMA boxes of
// the 3-d experts tensor, the persistent scheduler over every expert's row
// tiles, the masked epilogue; block scales folded per K step -- against
// float64.
#define TX_GROUPED_DEVICE tx::Device::host()
#include "grouped_matmul_cases.hpp"
#include "scaled_matmul_cases.hpp"

TEST_CASE("grouped_matmul's Hopper kernel on the host: tilings, b layouts, fp8, rounds") {
  using namespace groupedcase;
  struct Run {
    Problem p;
    bool small;         // the 64-row tiling
    std::int64_t ctas;  // persistent CTAs (several rounds each)
  };
  const std::vector<Run> runs = {
      // 128-row tiles with the TMA-store epilogue: tiles that end inside an
      // expert (next expert's rows read, not stored), an empty expert, rows
      // past the end, partial N and K.
      {{.N = 264, .K = 200, .rows = {150, 0, 1, 149}, .extra = 7}, false, 3},
      // 64-row tiles, b stored (E, N, K), f16, one expert with all the tokens.
      {{.N = 128, .K = 128, .rows = {0, 190, 0}, .extra = 2, .t = f16, .b_nk = true}, true, 2},
      // fp8 (b K-major), promotion per 128-deep step, f32 out.
      {{.N = 136, .K = 256, .rows = {70, 0, 60}, .extra = 3, .t = f8e4m3, .b_nk = true}, false, 2},
      // 12 row tiles of 64 (groups of 8 and 4 in the item order) by 2 column
      // tiles, 3 CTAs over 8 rounds: every item once, groups across experts.
      {{.N = 264, .K = 96, .rows = {200, 300, 0, 130}, .extra = 4}, true, 3},
  };
  for (const Run& r : runs) {
    CAPTURE(r.p.t.name());
    CAPTURE(r.small);
    const auto E = static_cast<std::int64_t>(r.p.rows.size());
    const ops::MatmulTiling& tiling = ops::detail::grouped_matmul_tiling(r.p.t, r.small, r.p.N);
    Kernel k = compile(
        ops::detail::grouped_matmul_kernel(E, r.p.N, r.p.K, r.p.t, tiling, r.ctas, r.p.b_nk),
        {.device = Device::host()});
    CHECK(run_kernel(r.p, k) <= 1.0);
  }
}

TEST_CASE("grouped_matmul's SIMT kernel: rows past the last end are not written") {
  using namespace groupedcase;
  const Problem p{.N = 40, .K = 24, .rows = {3, 0, 11}, .extra = 6};
  Kernel k =
      compile(ops::detail::grouped_matmul_simt(3, p.N, p.K, p.t), {.device = Device::host()});
  CHECK(run_kernel(p, k) <= 1.0);
}

TEST_CASE("scaled_matmul's Hopper kernel on the host: block, row and tensor scales") {
  using namespace scaledcase;
  const std::vector<Problem> problems = {
      {.M = 200, .N = 136, .K = 336},  // partial rows, columns and K block
      {.M = 40, .N = 128, .K = 256, .a = ScaleForm::rows, .b = ScaleForm::blocks},
      {.M = 130, .N = 64, .K = 128, .a = ScaleForm::blocks, .b = ScaleForm::tensor, .out = f32},
      {.M = 64, .N = 128, .K = 384, .a = ScaleForm::tensor, .b = ScaleForm::tensor},
      // torch._scaled_mm's row-wise recipe: per row of A, per column of B
      // (a partial column tile: N 200).
      {.M = 150, .N = 200, .K = 256, .a = ScaleForm::rows, .b = ScaleForm::rows},
  };
  for (const Problem& p : problems) {
    CAPTURE(form(p.a));
    CAPTURE(form(p.b));
    CAPTURE(p.M);
    Inputs in = make_inputs(p, Device::host());
    Kernel k =
        compile(ops::detail::scaled_matmul_kernel(p.M, p.N, p.K, p.t, p.out, p.a, p.b, false, 2),
                {.device = Device::host()});
    Tensor C = Tensor::empty({p.M, p.N}, p.out, Device::host());
    C.fill_bits(tx::test::poison_bits(p.out));
    // The kernel's forms: B as (N, K), sb as (nb, kb).
    const Tensor sb = p.b == ScaleForm::blocks ? in.SB.transpose(0, 1).contiguous()
                      : p.b == ScaleForm::rows ? in.SB
                                               : in.SB.reshape({1});
    k.launch({in.A, in.B.transpose(0, 1), C, in.SA, sb});
    CHECK(error(p, in, C) <= 1.0);
  }
}
