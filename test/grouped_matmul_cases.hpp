// tx::ops::grouped_matmul on the device TX_GROUPED_DEVICE (host_gemm_family:
// the host JIT, which also runs the Hopper kernel as fibers; gpu_gemm_family:
// an sm_90 GPU): every expert's rows against a float64 product on fresh random
// inputs -- partial row tiles, empty experts, one expert with all the tokens,
// rows past the last offset left as they were (poisoned), partial N and K
// tiles, b as (E, K, N) and as the transpose of (E, N, K), bf16 / f16 / fp8 /
// f32; and the errors.
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "test_support.hpp"
#include "tx/ops/matmul.hpp"
#include "tx/tx.hpp"

namespace groupedcase {

using namespace tx;
using tx::test::gemm_error;

inline Device device() { return TX_GROUPED_DEVICE; }

struct Problem {
  std::int64_t N, K;
  std::vector<std::int32_t> rows;  // per expert
  std::int64_t extra = 0;          // tokens past the last expert's end (not written)
  DType t = bf16;
  bool b_nk = false;  // b given as the transpose of an (E, N, K) tensor
};

struct Inputs {
  std::int64_t T, E;
  std::vector<double> a, b;  // a (T, K); b (E, K, N) row-major, the logical values
  std::vector<std::int32_t> ends;
  Tensor A, B, Offs;  // B: (E, K, N), or a transposed view of (E, N, K) storage
};

inline Inputs make_inputs(const Problem& p, const Device& d) {
  Inputs in;
  in.E = static_cast<std::int64_t>(p.rows.size());
  in.ends.resize(p.rows.size());
  std::partial_sum(p.rows.begin(), p.rows.end(), in.ends.begin());
  in.T = (in.ends.empty() ? 0 : in.ends.back()) + p.extra;
  const double lo = p.t.is_fp8() ? -2 : -1, hi = -lo;
  in.a = tx::test::random_values(static_cast<std::size_t>(in.T * p.K), p.t, lo, hi);
  in.b = tx::test::random_values(static_cast<std::size_t>(in.E * p.K * p.N), p.t, lo, hi);
  in.A = Tensor::from_doubles(in.a, {in.T, p.K}, p.t, d);
  if (p.b_nk) {
    std::vector<double> nk(in.b.size());
    for (std::int64_t e = 0; e < in.E; ++e)
      for (std::int64_t k = 0; k < p.K; ++k)
        for (std::int64_t n = 0; n < p.N; ++n)
          nk[static_cast<std::size_t>((e * p.N + n) * p.K + k)] =
              in.b[static_cast<std::size_t>((e * p.K + k) * p.N + n)];
    in.B = Tensor::from_doubles(nk, {in.E, p.N, p.K}, p.t, d).transpose(1, 2);
  } else {
    in.B = Tensor::from_doubles(in.b, {in.E, p.K, p.N}, p.t, d);
  }
  in.Offs = Tensor::from_vector(in.ends, {in.E}, d);
  return in;
}

// The worst gemm_error over the experts (<= 1 passes); rows past the last
// end must still hold the poison (a NaN) when one was written.
inline double check_output(const Problem& p, const Inputs& in, const Tensor& C,
                           const std::uint64_t* poison) {
  const DType out_t = p.t.is_fp8() ? f32 : p.t;
  REQUIRE(C.dtype() == out_t);
  const std::vector<double> got = C.to_doubles();
  double worst = 0;
  std::int64_t r0 = 0;
  for (std::int64_t e = 0; e < in.E; ++e) {
    const std::int64_t m = p.rows[static_cast<std::size_t>(e)];
    if (m > 0) {
      std::vector<double> ae(in.a.begin() + r0 * p.K, in.a.begin() + (r0 + m) * p.K);
      std::vector<double> be(in.b.begin() + e * p.K * p.N, in.b.begin() + (e + 1) * p.K * p.N);
      std::vector<double> ge(got.begin() + r0 * p.N, got.begin() + (r0 + m) * p.N);
      const double ulp = out_t == f32 ? 0x1p-24 : out_t == bf16 ? 0x1p-8 : 0x1p-11;
      // fp8 on wgmma: each 128-deep K step summed with ~14 bits kept.
      const double mag_rel = p.t.is_fp8() ? 0x1p-12 : 0;
      worst = std::max(worst, gemm_error(ae, be, ge, m, p.N, p.K, ulp, mag_rel));
    }
    r0 += m;
  }
  if (poison && p.extra > 0) {
    // The rows past the end: untouched (still the poison, a NaN).
    for (std::size_t i = static_cast<std::size_t>(r0 * p.N); i < got.size(); ++i)
      if (!std::isnan(got[i])) {
        FAIL_CHECK("a row past the last expert's end was written: element " << i);
        break;
      }
  }
  return worst;
}

// Through the op: covered rows right.
inline double run_op(const Problem& p) {
  Inputs in = make_inputs(p, device());
  Tensor C = ops::grouped_matmul(in.A, in.B, in.Offs);
  CHECK(C.shape() == std::vector<std::int64_t>{in.T, p.N});
  return check_output(p, in, C, nullptr);
}

// A kernel (the Hopper kernel on the host, or any compiled one) launched on
// a poisoned C: covered rows right, the others untouched.
inline double run_kernel(const Problem& p, const Kernel& k) {
  Inputs in = make_inputs(p, device());
  const DType out_t = p.t.is_fp8() ? f32 : p.t;
  Tensor C = Tensor::empty({in.T, p.N}, out_t, device());
  const std::uint64_t poison = tx::test::poison_bits(out_t);
  C.fill_bits(poison);
  const Tensor bk = p.b_nk ? in.B.transpose(1, 2) : in.B;
  k.launch({in.A, bk, C, in.Offs});
  return check_output(p, in, C, &poison);
}

}  // namespace groupedcase

TEST_CASE("grouped_matmul: every expert's rows against float64 (empty experts, one with all)") {
  using namespace groupedcase;
  const std::vector<Problem> problems = {
      // Partial row tiles, an empty expert, a one-row expert; rows past the end.
      {.N = 136, .K = 96, .rows = {70, 0, 1, 130, 33}, .extra = 5},
      // One expert with every token, the others empty.
      {.N = 64, .K = 64, .rows = {0, 0, 200, 0}},
      // b stored (E, N, K), f16, K not a multiple of 64.
      {.N = 72, .K = 40, .rows = {17, 64, 129}, .t = f16, .b_nk = true},
      // float32: summed in float32 (no tensor cores).
      {.N = 24, .K = 33, .rows = {5, 9, 0, 7}, .extra = 3, .t = f32},
  };
  for (const Problem& p : problems) {
    CAPTURE(p.t.name());
    CAPTURE(p.N);
    CAPTURE(p.K);
    CHECK(run_op(p) <= 1.0);
  }
}

TEST_CASE("grouped_matmul: fp8 operands, f32 out") {
  using namespace groupedcase;
  for (DType t : {f8e4m3, f8e5m2}) {
    CAPTURE(t.name());
    CHECK(run_op({.N = 128, .K = 256, .rows = {40, 0, 90}, .t = t}) <= 1.0);
    CHECK(run_op({.N = 64, .K = 128, .rows = {3, 130}, .t = t, .b_nk = true}) <= 1.0);
  }
}

TEST_CASE("grouped_matmul_out: into the caller's tensor (rows past the end untouched), bad out") {
  using namespace groupedcase;
  const Problem p{.N = 72, .K = 64, .rows = {30, 0, 45}, .extra = 6};
  Inputs in = make_inputs(p, device());
  Tensor C = Tensor::empty({in.T, p.N}, bf16, device());
  const std::uint64_t poison = tx::test::poison_bits(bf16);
  C.fill_bits(poison);
  ops::grouped_matmul_out(in.A, in.B, in.Offs, C);
  CHECK(check_output(p, in, C, &poison) <= 1.0);
  for (const Tensor& bad : {Tensor::empty({in.T, p.N}, f32, device()),
                            Tensor::empty({in.T + 1, p.N}, bf16, device()),
                            Tensor::empty({p.N, in.T}, bf16, device()).transpose(0, 1)}) {
    try {
      ops::grouped_matmul_out(in.A, in.B, in.Offs, bad);
      FAIL_CHECK("no error for a bad out");
    } catch (const Error& e) {
      const std::string m = e.what();
      CHECK(m.find("tx.ops.grouped_matmul") != std::string::npos);
      CHECK(m.find("operand out") != std::string::npos);
      CHECK(m.find("(81, 72)") != std::string::npos);
    }
  }
}

TEST_CASE("grouped_matmul: the errors name the op, the operand and the reason") {
  using namespace groupedcase;
  const Device d = device();
  Tensor a = Tensor::empty({10, 32}, bf16, d), b = Tensor::empty({3, 32, 16}, bf16, d);
  Tensor offs = Tensor::from_vector(std::vector<std::int32_t>{2, 5, 10}, {3}, d);
  auto msg = [](const std::function<void()>& f) -> std::string {
    try {
      f();
    } catch (const Error& e) {
      return e.what();
    }
    return "(no error)";
  };
  auto has = [](const std::string& m, std::initializer_list<const char*> parts) {
    for (const char* p : parts)
      if (m.find(p) == std::string::npos) return false;
    return m.find("tx.ops.grouped_matmul") != std::string::npos;
  };
  CHECK(has(msg([&] {
              ops::grouped_matmul(a, b.reshape({96, 16}), offs);
            }),
            {"operand b", "(E, K, N)"}));
  CHECK(has(msg([&] {
              ops::grouped_matmul(a, Tensor::empty({3, 16, 16}, bf16, d), offs);
            }),
            {"inner extents differ"}));
  CHECK(has(msg([&] {
              ops::grouped_matmul(a, Tensor::empty({3, 32, 16}, f16, d), offs);
            }),
            {"dtype float16"}));
  CHECK(has(
      msg([&] {
        ops::grouped_matmul(a, b, Tensor::from_vector(std::vector<std::int64_t>{2, 5, 10}, {3}, d));
      }),
      {"operand offsets", "int32"}));
  CHECK(
      has(msg([&] {
            ops::grouped_matmul(a, b, Tensor::from_vector(std::vector<std::int32_t>{2, 5}, {2}, d));
          }),
          {"one end per expert", "(3,)"}));
  CHECK(has(msg([&] { ops::grouped_matmul(a, b.transpose(0, 1), offs); }), {"strided view"}));
  // This source line is the one named.
  const std::string line = msg([&] { ops::grouped_matmul(a.transpose(0, 1), b, offs); });
  CHECK(line.find("grouped_matmul_cases.hpp") != std::string::npos);
  if (!d.is_cuda()) {
    // Offsets at hand on the host are checked.
    CHECK(has(msg([&] {
                ops::grouped_matmul(
                    a, b, Tensor::from_vector(std::vector<std::int32_t>{4, 3, 10}, {3}, d));
              }),
              {"offsets[1] = 3", "below the previous end 4"}));
    CHECK(has(msg([&] {
                ops::grouped_matmul(
                    a, b, Tensor::from_vector(std::vector<std::int32_t>{4, 6, 11}, {3}, d));
              }),
              {"offsets[2] = 11", "passes the 10 rows"}));
  }
}
