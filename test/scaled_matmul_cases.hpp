// tx::ops::scaled_matmul and tx::ops::quantize_fp8 on the device
// TX_GROUPED_DEVICE (the host JIT in host_gemm_family, an sm_90 GPU in
// gpu_gemm_family): every form of the scales (one per tensor, per row of A /
// column of B, per 1 x 128 / 128 x 128 block) against a float64 product of the scaled fp8
// values, partial K blocks and column tiles, bf16 / f32 out; the quantizer
// against float64; the errors.
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "grouped_matmul_cases.hpp"

namespace scaledcase {

using namespace tx;
using groupedcase::device;
using ops::detail::ScaleForm;

struct Problem {
  std::int64_t M, N, K;
  ScaleForm a = ScaleForm::blocks, b = ScaleForm::blocks;
  DType t = f8e4m3, out = bf16;
  bool b_nk = true;  // b passed as the transpose of an (N, K) tensor
};

inline std::int64_t blocks(std::int64_t n) { return (n + 127) / 128; }

struct Inputs {
  std::vector<double> a, b, sa, sb;  // b (K, N) logical; sa, sb in their logical shapes
  Tensor A, B, SA, SB;               // as the op takes them
};

inline Inputs make_inputs(const Problem& p, const Device& d) {
  Inputs in;
  in.a = tx::test::random_values(static_cast<std::size_t>(p.M * p.K), p.t, -4, 4);
  in.b = tx::test::random_values(static_cast<std::size_t>(p.K * p.N), p.t, -4, 4);
  in.A = Tensor::from_doubles(in.a, {p.M, p.K}, p.t, d);
  if (p.b_nk) {
    std::vector<double> nk(in.b.size());
    for (std::int64_t k = 0; k < p.K; ++k)
      for (std::int64_t n = 0; n < p.N; ++n)
        nk[static_cast<std::size_t>(n * p.K + k)] = in.b[static_cast<std::size_t>(k * p.N + n)];
    in.B = Tensor::from_doubles(nk, {p.N, p.K}, p.t, d).transpose(0, 1);
  } else {
    in.B = Tensor::from_doubles(in.b, {p.K, p.N}, p.t, d);
  }
  // Scales over several octaves, as real ones (2^-6 .. 2^2).
  auto scales = [](std::size_t n) {
    std::vector<double> s = tx::test::random_values(n, f32, -6, 2);
    for (double& v : s) v = std::exp2(v);
    return s;
  };
  const std::int64_t KB = blocks(p.K), NB = blocks(p.N);
  if (p.a == ScaleForm::tensor) {
    in.sa = scales(1);
    in.SA = Tensor::from_doubles(in.sa, {1}, f32, d);
  } else {
    const std::int64_t cols = p.a == ScaleForm::rows ? 1 : KB;
    in.sa = scales(static_cast<std::size_t>(p.M * cols));
    in.SA = Tensor::from_doubles(in.sa, {p.M, cols}, f32, d);
  }
  if (p.b == ScaleForm::tensor) {
    in.sb = scales(1);
    in.SB = Tensor::from_doubles(in.sb, {1}, f32, d);
  } else if (p.b == ScaleForm::rows) {  // one per column of B: (1, N)
    in.sb = scales(static_cast<std::size_t>(p.N));
    in.SB = Tensor::from_doubles(in.sb, {1, p.N}, f32, d);
  } else {
    // Given as the weights' (N / 128, K / 128) scales, transposed.
    in.sb = scales(static_cast<std::size_t>(KB * NB));
    std::vector<double> nk(in.sb.size());
    for (std::int64_t kb = 0; kb < KB; ++kb)
      for (std::int64_t nb = 0; nb < NB; ++nb)
        nk[static_cast<std::size_t>(nb * KB + kb)] = in.sb[static_cast<std::size_t>(kb * NB + nb)];
    in.SB = Tensor::from_doubles(nk, {NB, KB}, f32, d).transpose(0, 1);
  }
  return in;
}

// The worst |got - want| / tol over C, want = sum_k a sa b sb in float64;
// tol: f32 sums (K 2^-23), the tensor cores' ~14-bit fp8 accumulation within
// a K block (2^-12), of sum |terms|, plus one rounding of the output.
inline double error(const Problem& p, const Inputs& in, const Tensor& C) {
  const std::vector<double> got = C.to_doubles();
  const std::int64_t KB = blocks(p.K), NB = blocks(p.N);
  const double ulp = p.out == bf16 ? 0x1p-8 : p.out == f16 ? 0x1p-11 : 0x1p-24;
  double worst = 0;
  for (std::int64_t i = 0; i < p.M; ++i)
    for (std::int64_t j = 0; j < p.N; ++j) {
      double want = 0, mag = 0;
      for (std::int64_t k = 0; k < p.K; ++k) {
        const std::int64_t kb = k / 128;
        const double sa = p.a == ScaleForm::tensor ? in.sa[0]
                          : p.a == ScaleForm::rows ? in.sa[static_cast<std::size_t>(i)]
                                                   : in.sa[static_cast<std::size_t>(i * KB + kb)];
        const double sb = p.b == ScaleForm::tensor ? in.sb[0]
                          : p.b == ScaleForm::rows
                              ? in.sb[static_cast<std::size_t>(j)]
                              : in.sb[static_cast<std::size_t>(kb * NB + j / 128)];
        const double x = in.a[static_cast<std::size_t>(i * p.K + k)] * sa *
                         in.b[static_cast<std::size_t>(k * p.N + j)] * sb;
        want += x;
        mag += std::fabs(x);
      }
      const double tol =
          (static_cast<double>(p.K) * 0x1p-23 + 0x1p-12) * mag + ulp * std::fabs(want) + 1e-30;
      const double g = got[static_cast<std::size_t>(i * p.N + j)];
      if (std::isnan(g)) return INFINITY;
      worst = std::max(worst, std::fabs(g - want) / tol);
    }
  return worst;
}

// The worst |y - x w^T| / sum_k |x w| over rows i = 0, si, 2 si, ... and
// columns j = 0, sj, ...: y (M, N), x (M, K), w (N, K), row-major doubles.
inline double product_error(const std::vector<double>& x, const std::vector<double>& w,
                            const std::vector<double>& y, std::int64_t M, std::int64_t N,
                            std::int64_t K, std::int64_t si = 1, std::int64_t sj = 1) {
  double worst = 0;
  for (std::int64_t i = 0; i < M; i += si)
    for (std::int64_t j = 0; j < N; j += sj) {
      double want = 0, mag = 0;
      for (std::int64_t k = 0; k < K; ++k) {
        const double t =
            x[static_cast<std::size_t>(i * K + k)] * w[static_cast<std::size_t>(j * K + k)];
        want += t;
        mag += std::fabs(t);
      }
      worst = std::max(worst, std::fabs(y[static_cast<std::size_t>(i * N + j)] - want) / mag);
    }
  return worst;
}

inline const char* form(ScaleForm f) {
  return f == ScaleForm::tensor ? "tensor" : f == ScaleForm::rows ? "rows" : "blocks";
}

}  // namespace scaledcase

TEST_CASE("scaled_matmul: every form of the scales against float64 (partial blocks)") {
  using namespace scaledcase;
  for (ScaleForm a : {ScaleForm::tensor, ScaleForm::rows, ScaleForm::blocks})
    for (ScaleForm b : {ScaleForm::tensor, ScaleForm::rows, ScaleForm::blocks}) {
      const Problem p{.M = 70, .N = 136, .K = 336, .a = a, .b = b, .b_nk = a != ScaleForm::rows};
      CAPTURE(form(a));
      CAPTURE(form(b));
      Inputs in = make_inputs(p, device());
      Tensor C = ops::scaled_matmul(in.A, in.B, in.SA, in.SB);
      CHECK(C.dtype() == bf16);
      CHECK(error(p, in, C) <= 1.0);
    }
  // e5m2, f32 out.
  const Problem p{.M = 33, .N = 64, .K = 128, .t = f8e5m2, .out = f32};
  Inputs in = make_inputs(p, device());
  CHECK(error(p, in, ops::scaled_matmul(in.A, in.B, in.SA, in.SB, {.out_dtype = f32})) <= 1.0);
  // Into the caller's (poisoned) tensor; a wrong one is an error naming out.
  Tensor C = Tensor::empty({p.M, p.N}, f32, device());
  C.fill_bits(tx::test::poison_bits(f32));
  ops::scaled_matmul_out(in.A, in.B, in.SA, in.SB, C, {.out_dtype = f32});
  CHECK(error(p, in, C) <= 1.0);
  CHECK_THROWS_WITH_AS(ops::scaled_matmul_out(in.A, in.B, in.SA, in.SB, C),
                       doctest::Contains("operand out"), Error);
}

TEST_CASE("scaled_matmul: scales of zero and of 2^40, f32 out") {
  using namespace scaledcase;
  const Problem p{.M = 96, .N = 136, .K = 256, .out = f32};
  Inputs in = make_inputs(p, device());
  // Row 3's blocks zero, row 5's huge; one of B's blocks zero, another huge.
  const std::int64_t KB = blocks(p.K), NB = blocks(p.N);
  for (std::int64_t kb = 0; kb < KB; ++kb) {
    in.sa[static_cast<std::size_t>(3 * KB + kb)] = 0.0;
    in.sa[static_cast<std::size_t>(5 * KB + kb)] = 0x1p40;
  }
  in.sb[static_cast<std::size_t>(0 * NB + 1)] = 0.0;
  in.sb[static_cast<std::size_t>(1 * NB + 0)] = 0x1p40;
  in.SA = Tensor::from_doubles(in.sa, {p.M, KB}, f32, device());
  std::vector<double> nk(in.sb.size());
  for (std::int64_t kb = 0; kb < KB; ++kb)
    for (std::int64_t nb = 0; nb < NB; ++nb)
      nk[static_cast<std::size_t>(nb * KB + kb)] = in.sb[static_cast<std::size_t>(kb * NB + nb)];
  in.SB = Tensor::from_doubles(nk, {NB, KB}, f32, device()).transpose(0, 1);
  Tensor C = ops::scaled_matmul(in.A, in.B, in.SA, in.SB, {.out_dtype = f32});
  CHECK(error(p, in, C) <= 1.0);
  const std::vector<double> c = C.to_doubles();
  for (std::int64_t j = 0; j < p.N; ++j) CHECK(c[static_cast<std::size_t>(3 * p.N + j)] == 0.0);
}

TEST_CASE("quantize_fp8: scales are the blocks' amax / 448, the data x / scale in fp8") {
  using namespace scaledcase;
  // K 300: a partial last block (a thread per block); 384: the warp-per-block row kernel.
  for (auto [t, K] : {std::pair{bf16, std::int64_t{300}}, std::pair{f32, std::int64_t{300}},
                      std::pair{bf16, std::int64_t{384}}, std::pair{f16, std::int64_t{384}}}) {
    const std::int64_t M = 9, KB = (K + 127) / 128;
    CAPTURE(t.name());
    CAPTURE(K);
    std::vector<double> x = tx::test::random_values(static_cast<std::size_t>(M * K), t, -30, 30);
    x[5] = 0;  // zeros stay zeros
    Tensor X = Tensor::from_doubles(x, {M, K}, t, device());
    auto [q, s] = ops::quantize_fp8(X);
    REQUIRE(q.dtype() == f8e4m3);
    REQUIRE(s.shape() == std::vector<std::int64_t>{M, KB});
    const std::vector<double> qd = q.to_doubles(), sd = s.to_doubles();
    for (std::int64_t i = 0; i < M; ++i)
      for (std::int64_t kb = 0; kb < KB; ++kb) {
        double amax = 0;
        for (std::int64_t k = kb * 128; k < std::min<std::int64_t>(K, kb * 128 + 128); ++k)
          amax = std::max(amax, std::fabs(x[static_cast<std::size_t>(i * K + k)]));
        const double scale = sd[static_cast<std::size_t>(i * KB + kb)];
        CHECK(scale == doctest::Approx(amax / 448.0).epsilon(1e-6));
        for (std::int64_t k = kb * 128; k < std::min<std::int64_t>(K, kb * 128 + 128); ++k) {
          const double want = x[static_cast<std::size_t>(i * K + k)] / scale;
          const double got = qd[static_cast<std::size_t>(i * K + k)];
          // e4m3: 3 mantissa bits, one rounding (subnormals below 2^-6: 2^-9 apart).
          CHECK(std::fabs(got - want) <= std::max(std::fabs(want) * 0x1p-4, 0x1p-10));
          CHECK(std::fabs(got) <= 448.0);
        }
      }
    CHECK(qd[5] == 0.0);
  }
  CHECK_THROWS_WITH_AS(ops::quantize_fp8(Tensor::empty({4, 8}, f8e4m3, device())),
                       doctest::Contains("tx.ops.quantize_fp8"), Error);
  CHECK_THROWS_WITH_AS(ops::quantize_fp8(Tensor::empty({4, 8}, bf16, device()), {.block_rows = 0}),
                       doctest::Contains("operand block_rows"), Error);
}

TEST_CASE("quantize_fp8 in 128 x 128 blocks (a weight's), then scaled_matmul with them") {
  using namespace scaledcase;
  // W (N, K) = (200, 300): partial blocks both ways; e4m3 and e5m2.
  const std::int64_t N = 200, K = 300, M = 37, NB = 2, KB = 3;
  for (DType q8 : {f8e4m3, f8e5m2}) {
    CAPTURE(q8.name());
    const double fp8_max = q8 == f8e4m3 ? 448.0 : 57344.0;
    std::vector<double> w = tx::test::random_values(static_cast<std::size_t>(N * K), bf16, -3, 3);
    w[7] = 40.0;  // one block's maximum far above the others'
    Tensor W = Tensor::from_doubles(w, {N, K}, bf16, device());
    auto [wq, ws] = ops::quantize_fp8(W, {.block_rows = 128, .dtype = q8});
    REQUIRE(ws.shape() == std::vector<std::int64_t>{NB, KB});
    const std::vector<double> qd = wq.to_doubles(), sd = ws.to_doubles();
    for (std::int64_t nb = 0; nb < NB; ++nb)
      for (std::int64_t kb = 0; kb < KB; ++kb) {
        double amax = 0;
        for (std::int64_t n = nb * 128; n < std::min<std::int64_t>(N, nb * 128 + 128); ++n)
          for (std::int64_t k = kb * 128; k < std::min<std::int64_t>(K, kb * 128 + 128); ++k)
            amax = std::max(amax, std::fabs(w[static_cast<std::size_t>(n * K + k)]));
        const double scale = sd[static_cast<std::size_t>(nb * KB + kb)];
        CHECK(scale == doctest::Approx(amax / fp8_max).epsilon(1e-6));
        for (std::int64_t n = nb * 128; n < std::min<std::int64_t>(N, nb * 128 + 128); n += 7)
          for (std::int64_t k = kb * 128; k < std::min<std::int64_t>(K, kb * 128 + 128); ++k) {
            const double want = w[static_cast<std::size_t>(n * K + k)] / scale;
            const double got = qd[static_cast<std::size_t>(n * K + k)];
            const double rel = q8 == f8e4m3 ? 0x1p-4 : 0x1p-3;
            CHECK(std::fabs(got - want) <= std::max(std::fabs(want) * rel, 0x1p-16 * fp8_max));
          }
      }
    // DeepSeek-V3's recipe end to end (e4m3): x in 1 x 128 blocks, W in 128 x
    // 128, against the float64 product of the unquantized values.
    if (q8 != f8e4m3) continue;
    std::vector<double> x = tx::test::random_values(static_cast<std::size_t>(M * K), bf16, -2, 2);
    Tensor X = Tensor::from_doubles(x, {M, K}, bf16, device());
    auto [xq, xs] = ops::quantize_fp8(X);
    Tensor Y =
        ops::scaled_matmul(xq, wq.transpose(0, 1), xs, ws.transpose(0, 1), {.out_dtype = f32});
    const double worst = product_error(x, w, Y.to_doubles(), M, N, K);
    // Each product's two roundings: (1 + 2^-4)^2 - 1 < 0.13 of |x w|; a lost
    // or misplaced scale is off by O(1).
    CHECK(worst <= 0.14);
  }
}

TEST_CASE("scaled_matmul: the errors name the op, the operand and the reason") {
  using namespace scaledcase;
  const Device d = device();
  Tensor a = Tensor::empty({64, 256}, f8e4m3, d), b = Tensor::empty({256, 128}, f8e4m3, d);
  Tensor one = Tensor::from_doubles({1.0}, {1}, f32, d);
  auto throws = [&](const Tensor& x, const Tensor& y, const Tensor& sa, const Tensor& sb,
                    const char* what) {
    CAPTURE(what);
    CHECK_THROWS_WITH_AS(ops::scaled_matmul(x, y, sa, sb), doctest::Contains(what), Error);
  };
  throws(a, b, Tensor::empty({64, 3}, f32, d), one, "one per 1 x 128 block (64, 2)");
  throws(a, b, one, Tensor::empty({1, 127}, f32, d), "one per column (1, 128)");
  throws(a, b, one, Tensor::empty({128, 1}, f32, d), "one per column (1, 128)");
  throws(a, b, Tensor::from_doubles({1.0}, {1}, f64, d), one, "scales are float32");
  throws(Tensor::empty({64, 256}, bf16, d), b, one, one, "float8_e4m3fn / float8_e5m2");
  throws(a, Tensor::empty({128, 128}, f8e4m3, d), one, one, "inner extents differ");
  CHECK_THROWS_WITH_AS(ops::scaled_matmul(a, b, one, one, {.out_dtype = f8e4m3}),
                       doctest::Contains("operand out_dtype"), Error);
}
