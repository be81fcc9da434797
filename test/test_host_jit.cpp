// The host fallback (LLVM ORC JIT): every seed program and the cases that
// stress the host lowering -- barriers in uniform loops with values live
// across them, shared-memory reductions, warp shuffles (also under a
// warp-uniform guard), multi-CTA grids (also the multi-threaded launch path),
// low-precision conversions bit-exact against tx::encode_bits, C integer
// semantics, the compile cache, the unrolling that lets a thread loop
// vectorize, and the errors for barriers and shuffles the host cannot
// schedule.
//
// Inputs are fresh random values each run (the seed is printed on failure);
// outputs are poisoned first so that unwritten elements show.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <unistd.h>

#include <bit>
#include <cmath>
#include <cstring>

#include "test_fixtures.hpp"
#include "test_support.hpp"
#include "tx/tx.hpp"

#define TX_SAMPLE_NO_MAIN
#include "cta_sqrt_smem.cpp"
#include "thread_sum_local.cpp"
#include "warp_copy_reg.cpp"
#include "warp_sqrt_reg.cpp"
#include "warp_sum_shuffle.cpp"

using namespace tx;

namespace {

bool host_ready() {
  static const bool ok = runtime::host_jit_available();
  return ok;
}
// Without the LLVM host JIT every case is reported as skipped.
#define HOST_CASE(name) TEST_CASE(name* doctest::skip(!host_ready()))

Kernel build(const PrimFunc& f) { return compile(f, {.device = Device::host()}); }

Tensor input(const std::vector<double>& v, std::vector<std::int64_t> shape, DType t = f32) {
  return Tensor::from_doubles(v, std::move(shape), t, Device::host());
}
Tensor output(std::vector<std::int64_t> shape, DType t = f32) {
  Tensor x = Tensor::empty(std::move(shape), t, Device::host());
  x.fill_bits(test::poison_bits(t));
  return x;
}

void check_close(const std::vector<double>& got, const std::vector<double>& want, double rtol,
                 double atol = 0) {
  REQUIRE(got.size() == want.size());
  double err = test::max_rel_error(got, want, atol, rtol);
  CHECK_MESSAGE(err <= 1.0,
                "max error " << err << " of tolerance (seed " << test::rng_seed() << ")");
}

// The error a host compile of `body` (in place of the kernel's lowered body) raises.
std::optional<Error> host_error(const lowering::LoweredKernel& base, const Stmt& body) {
  lowering::LoweredKernel k = base;
  k.lowered = base.lowered.with_body(body, true);
  try {
    runtime::host_compile(k);
  } catch (const Error& e) {
    return e;
  }
  return std::nullopt;
}

}  // namespace

HOST_CASE("host: every seed program matches its double-precision reference") {
  SUBCASE("warp_sqrt_reg") {
    Kernel k = build(warp_sqrt());
    auto a = test::random_values(32 * 8, f32, 0.01, 100.0);
    Tensor A = input(a, {32, 8}), B = output({32, 8});
    k(A, B);
    std::vector<double> want(a.size());
    for (std::size_t i = 0; i < a.size(); ++i) want[i] = std::sqrt(a[i]);
    check_close(B.to_doubles(), want, 1e-6);
  }
  SUBCASE("cta_sqrt_smem (in place, through shared memory)") {
    Kernel k = build(cta_sqrt());
    auto a = test::random_values(32 * 32, f32, 0.01, 100.0);
    Tensor A = input(a, {32, 32});
    k(A);
    std::vector<double> want(a.size());
    for (std::size_t i = 0; i < a.size(); ++i) want[i] = std::sqrt(a[i]);
    check_close(A.to_doubles(), want, 1e-6);
  }
  SUBCASE("warp_copy_reg (registers live across four barriers)") {
    Kernel k = build(warp_copy_reg());
    auto a = test::random_values(32 * 8, f32, -1.0, 1.0);
    Tensor A = input(a, {32, 8}), B = output({32, 8});
    k(A, B);
    std::vector<double> want(a.size());
    for (int t = 0; t < 32; ++t)
      for (int kk = 0; kk < 8; ++kk)
        want[t * 8 + kk] = quantize(a[t * 8 + kk] + (t * 100 + kk + 1), f32);
    CHECK(B.to_doubles() == want);  // one f32 addition: exact
  }
  SUBCASE("thread_sum_local") {
    Kernel k = build(thread_sum());
    auto a = test::random_values(4, f32, -10.0, 10.0);
    Tensor A = input(a, {4}), B = output({1});
    k(A, B);
    check_close(B.to_doubles(), {a[0] + a[1] + a[2] + a[3]}, 1e-6, 1e-6);
  }
  SUBCASE("warp_sum_shuffle") {
    Kernel k = build(warp_sum_shuffle());
    auto a = test::random_values(32 * 4, f32, -1.0, 1.0);
    Tensor A = input(a, {32, 4}), B = output({4});
    k(A, B);
    std::vector<double> want(4, 0.0);
    for (int r = 0; r < 32; ++r)
      for (int c = 0; c < 4; ++c) want[c] += a[r * 4 + c];
    check_close(B.to_doubles(), want, 1e-5, 1e-5);
  }
}

HOST_CASE("host: barriers inside a uniform loop and a uniform if, values live across them") {
  // Each round every thread publishes 2*A to shared memory, then reads its
  // neighbour's after the barrier; the loaded value (a let) and a register
  // buffer are used on both sides of the barriers, so they must survive in
  // per-thread storage. Odd rounds add a third, guarded, barrier phase.
  constexpr int kT = 128, kRounds = 6;
  PrimFunc f = T::prim_func("uniform_loop", [&](Handle A_ptr, Handle B_ptr) {
    auto A = T::match_buffer(A_ptr, {kRounds, kT}, f32);
    auto B = T::match_buffer(B_ptr, {kRounds, kT}, f32);
    auto tid = T::thread_id({kT});
    auto S = T::alloc_buffer({kT}, f32, scope::shared);
    auto R = T::alloc_buffer({1}, f32, scope::local);
    for (Var it : T::serial(kRounds)) {
      Var v = T::let(A(it, tid) * 2.0f);
      R(0) = v + 1.0f;
      S(tid) = v;
      T::cuda::cta_sync();
      B(it, tid) = S((tid + 1) % kT) + R(0);
      T::cuda::cta_sync();
      T::if_(it % 2 == 1, [&] {
        S(tid) = v * 3.0f;
        T::cuda::cta_sync();
        B(it, tid) = B(it, tid) + S(kT - 1 - tid);
        T::cuda::cta_sync();
      });
    }
  });
  Kernel k = build(f);
  auto a = test::random_values(kRounds * kT, f32, -1.0, 1.0);
  Tensor A = input(a, {kRounds, kT}), B = output({kRounds, kT});
  k(A, B);
  std::vector<double> want(a.size());
  for (int it = 0; it < kRounds; ++it)
    for (int t = 0; t < kT; ++t) {
      double v = 2 * a[it * kT + t];
      double w = 2 * a[it * kT + (t + 1) % kT] + (v + 1);
      if (it % 2 == 1) w += 3 * 2 * a[it * kT + (kT - 1 - t)];
      want[it * kT + t] = w;
    }
  check_close(B.to_doubles(), want, 1e-6, 1e-6);
}

HOST_CASE("host: shared-memory reduction (Tx::cta::sum on shared operands)") {
  for (auto [rows, cols, axis] : {std::tuple{16, 64, 1}, std::tuple{40, 33, 0}}) {
    CAPTURE(rows);
    CAPTURE(cols);
    std::int64_t out = axis == 1 ? rows : cols;
    PrimFunc f = T::prim_func("cta_sum", [&](Handle A_ptr, Handle D_ptr) {
      auto A = T::match_buffer(A_ptr, {rows, cols}, f32);
      auto D = T::match_buffer(D_ptr, {out}, f32);
      T::thread_id({256});
      auto As = T::alloc_buffer({rows, cols}, f32, scope::shared);
      auto Ds = T::alloc_buffer({out}, f32, scope::shared);
      Tx::cta::copy(As, A);
      T::cuda::cta_sync();
      Tx::cta::sum(Ds, As, {.axes = {axis}});
      T::cuda::cta_sync();
      Tx::cta::copy(D, Ds);
    });
    Kernel k = build(f);
    auto a = test::random_values(static_cast<std::size_t>(rows * cols), f32, -1.0, 1.0);
    Tensor A = input(a, {rows, cols}), D = output({out});
    k(A, D);
    std::vector<double> want(static_cast<std::size_t>(out), 0.0);
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < cols; ++c)
        want[static_cast<std::size_t>(axis == 1 ? r : c)] += a[r * cols + c];
    check_close(D.to_doubles(), want, 1e-5, 1e-5);
  }
}

HOST_CASE("host: warp shuffles into a laneid-replicated destination, four warps") {
  // Warp w sums rows 32w .. 32w+31 of A across its lanes (a __shfl_xor
  // butterfly) into a 4-vector that every lane holds; max as well.
  PrimFunc f = T::prim_func("warps_sum", [&](Handle A_ptr, Handle S_ptr, Handle M_ptr) {
    auto A = T::match_buffer(A_ptr, {128, 4}, f32);
    auto Sg = T::match_buffer(S_ptr, {16}, f32);
    auto Mg = T::match_buffer(M_ptr, {16}, f32);
    T::thread_id({128});
    auto warp = T::warp_id({4});
    T::lane_id({32});
    auto Rt = T::alloc_buffer({32, 4}, f32, scope::local, TileLayout(S({32, 4}, {1 * laneid, 1})));
    auto Sum = T::alloc_buffer({4}, f32, scope::local, TileLayout(S({4}), R({32}, {1 * laneid})));
    auto Max = T::alloc_buffer({4}, f32, scope::local, TileLayout(S({4}), R({32}, {1 * laneid})));
    Tx::warp::copy(Rt, A[region(span(warp * 32, 32), {0, 4})]);
    Tx::warp::sum(Sum, Rt, {.axes = {0}});
    Tx::warp::max(Max, Rt, {.axes = {0}});
    Tx::warp::copy(Sg[region(span(warp * 4, 4))], Sum);
    Tx::warp::copy(Mg[region(span(warp * 4, 4))], Max);
  });
  Kernel k = build(f);
  auto a = test::random_values(128 * 4, f32, -1.0, 1.0);
  Tensor A = input(a, {128, 4}), Sm = output({16}), Mx = output({16});
  k(A, Sm, Mx);
  std::vector<double> sum(16, 0.0), mx(16, -INFINITY);
  for (int r = 0; r < 128; ++r)
    for (int c = 0; c < 4; ++c) {
      sum[(r / 32) * 4 + c] += a[r * 4 + c];
      mx[(r / 32) * 4 + c] = std::max(mx[(r / 32) * 4 + c], a[r * 4 + c]);
    }
  check_close(Sm.to_doubles(), sum, 1e-5, 1e-5);
  CHECK(Mx.to_doubles() == mx);
}

HOST_CASE("host: a warp collective under a warp-uniform guard runs for that warp only") {
  PrimFunc f = T::prim_func("one_warp_sum", [&](Handle A_ptr, Handle S_ptr) {
    auto A = T::match_buffer(A_ptr, {32, 4}, f32);
    auto Sg = T::match_buffer(S_ptr, {4}, f32);
    T::thread_id({128});
    auto warp = T::warp_id({4});
    T::lane_id({32});
    auto Rt = T::alloc_buffer({32, 4}, f32, scope::local, TileLayout(S({32, 4}, {1 * laneid, 1})));
    auto Sum = T::alloc_buffer({4}, f32, scope::local, TileLayout(S({4}), R({32}, {1 * laneid})));
    T::if_(warp == 2, [&] {
      Tx::warp::copy(Rt, A);
      Tx::warp::sum(Sum, Rt, {.axes = {0}});
      Tx::warp::copy(Sg, Sum);
    });
  });
  Kernel k = build(f);
  auto a = test::random_values(32 * 4, f32, -1.0, 1.0);
  Tensor A = input(a, {32, 4}), Sm = output({4});
  k(A, Sm);
  std::vector<double> sum(4, 0.0);
  for (int r = 0; r < 32; ++r)
    for (int c = 0; c < 4; ++c) sum[c] += a[r * 4 + c];
  check_close(Sm.to_doubles(), sum, 1e-5, 1e-5);
}

HOST_CASE("host: f16/bf16/fp8 casts round bit for bit like the GPU") {
  // Random f32 bit patterns (every exponent, subnormals, ties, Inf, NaN) plus
  // hand-picked edges; each converted to every storage type and back.
  constexpr int kN = 1 << 14;
  std::vector<std::uint32_t> in(kN);
  std::uniform_int_distribution<std::uint32_t> bits;
  for (auto& x : in) x = bits(test::rng());
  const float edges[] = {0.0f,
                         -0.0f,
                         1.0f,
                         -1.0f,
                         1.00048828125f /* f16 tie */,
                         1.00146484375f,
                         65504.0f,
                         65519.99f,
                         65520.0f,
                         -65520.0f,
                         5.96e-8f,
                         2.98e-8f,
                         2.99e-8f,
                         448.0f,
                         464.0f,
                         480.0f,
                         -500.0f,
                         0.001953125f,
                         0.0009765625f,
                         57344.0f,
                         61439.0f,
                         61440.0f,
                         1.5258789e-05f,
                         3.0e38f,
                         3.3961e38f,
                         INFINITY,
                         -INFINITY,
                         NAN,
                         1e-40f,
                         -1e-45f};
  for (std::size_t i = 0; i < std::size(edges); ++i) in[i] = std::bit_cast<std::uint32_t>(edges[i]);
  const DType types[] = {f16, bf16, f8e4m3, f8e5m2};
  PrimFunc f = T::prim_func("casts", [&](Handle X_ptr, Handle H_ptr, Handle B_ptr, Handle E_ptr,
                                         Handle F_ptr, Handle Y_ptr) {
    auto X = T::match_buffer(X_ptr, {kN}, f32);
    TileBuffer outs[] = {T::match_buffer(H_ptr, {kN}, f16), T::match_buffer(B_ptr, {kN}, bf16),
                         T::match_buffer(E_ptr, {kN}, f8e4m3),
                         T::match_buffer(F_ptr, {kN}, f8e5m2)};
    auto Y = T::match_buffer(Y_ptr, {4, kN}, f32);
    auto cta = T::cta_id({kN / 256});
    auto tid = T::thread_id({256});
    Var i = T::let(cta * 256 + tid);
    for (int k = 0; k < 4; ++k) {
      outs[k](i) = cast(X(i), types[k]);
      Y(k, i) = cast(outs[k](i), f32);
    }
  });
  Kernel k = build(f);
  Tensor X = Tensor::from_bytes(in.data(), in.size() * 4, {kN}, f32, Device::host());
  std::vector<Tensor> outs;
  for (DType t : types) outs.push_back(output({kN}, t));
  Tensor Y = output({4, kN});
  k(X, outs[0], outs[1], outs[2], outs[3], Y);
  std::vector<float> y(4 * kN);
  auto yb = Y.to_bytes();
  std::memcpy(y.data(), yb.data(), yb.size());
  for (int t = 0; t < 4; ++t) {
    CAPTURE(types[t].name());
    auto raw = outs[static_cast<std::size_t>(t)].to_bytes();
    int bytes = types[t].bytes(), bad = 0, bad_back = 0;
    for (int i = 0; i < kN; ++i) {
      std::uint64_t got = 0;
      std::memcpy(&got, raw.data() + i * bytes, static_cast<std::size_t>(bytes));
      double x = std::bit_cast<float>(in[static_cast<std::size_t>(i)]);
      float back = y[static_cast<std::size_t>(t * kN + i)];
      if (std::isnan(x)) {
        // The GPU's canonical NaNs: 0x7FFF (f16, bf16) and 0x7F (fp8); widened
        // back, bf16 is a shift (0x7FFF0000), the others canonical 0x7FFFFFFF.
        bad += got != (bytes == 2 ? 0x7FFFu : 0x7Fu);
        bad_back +=
            std::bit_cast<std::uint32_t>(back) != (types[t] == bf16 ? 0x7FFF0000u : 0x7FFFFFFFu);
        continue;
      }
      if (got != encode_bits(x, types[t]) && bad++ < 4)
        MESSAGE(types[t].name() << "(" << x << ") = 0x" << std::hex << got << ", want 0x"
                                << encode_bits(x, types[t]));
      double want_back = decode_bits(got, types[t]);
      bad_back += !(back == want_back || (std::isnan(back) && std::isnan(want_back)));
    }
    CHECK_MESSAGE(bad == 0, bad << " wrong encodings (seed " << test::rng_seed() << ")");
    CHECK(bad_back == 0);
  }
}

HOST_CASE("host: a grid of CTAs with T::cta_id, sequential and multi-threaded") {
  SUBCASE("2-D grid") {
    PrimFunc f = T::prim_func("grid2d", [&](Handle A_ptr, Handle B_ptr) {
      auto A = T::match_buffer(A_ptr, {5, 3, 64}, f32);
      auto B = T::match_buffer(B_ptr, {5, 3, 64}, f32);
      auto cta = T::cta_id({3, 5});
      auto tid = T::thread_id({64});
      B(cta[1], cta[0], tid) = A(cta[1], cta[0], tid) * 2.0f + cast(cta[0] + 10 * cta[1], f32);
    });
    Kernel k = build(f);
    auto a = test::random_values(5 * 3 * 64, f32, -1.0, 1.0);
    Tensor A = input(a, {5, 3, 64}), B = output({5, 3, 64});
    k(A, B);
    std::vector<double> want(a.size());
    for (int y = 0; y < 5; ++y)
      for (int x = 0; x < 3; ++x)
        for (int t = 0; t < 64; ++t) {
          std::size_t i = static_cast<std::size_t>((y * 3 + x) * 64 + t);
          want[i] = quantize(quantize(a[i] * 2, f32) + (x + 10 * y), f32);
        }
    CHECK(B.to_doubles() == want);
  }
  SUBCASE("large grid (split over worker threads), with shared memory per CTA") {
    // 512 CTAs x 256 threads: enough work for the launch to use several
    // threads, each with its own shared memory; every CTA reverses its slice
    // through shared memory, so CTAs sharing storage would show.
    constexpr int kC = 512, kT = 256;
    PrimFunc f = T::prim_func("reverse_slices", [&](Handle A_ptr, Handle B_ptr) {
      auto A = T::match_buffer(A_ptr, {kC * kT}, f32);
      auto B = T::match_buffer(B_ptr, {kC * kT}, f32);
      auto cta = T::cta_id({kC});
      auto tid = T::thread_id({kT});
      auto S = T::alloc_buffer({kT}, f32, scope::shared);
      S(tid) = A(cta * kT + tid);
      T::cuda::cta_sync();
      B(cta * kT + tid) = S(kT - 1 - tid);
    });
    Kernel k = build(f);
    auto a = test::random_values(kC * kT, f32, -1.0, 1.0);
    Tensor A = input(a, {kC * kT}), B = output({kC * kT}), B2 = output({kC * kT});
    k(A, B);
    k(A, B2);
    std::vector<double> want(a.size());
    for (int c = 0; c < kC; ++c)
      for (int t = 0; t < kT; ++t) want[c * kT + t] = a[c * kT + kT - 1 - t];
    CHECK(B.to_doubles() == want);
    CHECK(B2.to_bytes() == B.to_bytes());
  }
}

HOST_CASE("host: integer and float semantics follow the CUDA code") {
  constexpr int kN = 256;
  PrimFunc f = T::prim_func(
      "semantics", [&](Handle A_ptr, Handle B_ptr, Handle X_ptr, Handle I_ptr, Handle F_ptr) {
        auto A = T::match_buffer(A_ptr, {kN}, i32);
        auto Bv = T::match_buffer(B_ptr, {kN}, i32);
        auto X = T::match_buffer(X_ptr, {kN}, f32);
        auto I = T::match_buffer(I_ptr, {6, kN}, i32);
        auto F = T::match_buffer(F_ptr, {4, kN}, f32);
        auto t = T::thread_id({kN});
        Expr a = A(t), b = Bv(t), x = X(t);
        I(0, t) = floordiv(a, b);
        I(1, t) = floormod(a, b);
        I(2, t) = a / b;
        I(3, t) = a % b;
        I(4, t) = cast(x * 1e9f, i32);  // saturates
        I(5, t) = cast(cast(a, i8) + cast(b, i8), i32);
        F(0, t) = max(x, cast(b, f32));
        F(1, t) = min(x, cast(b, f32));
        F(2, t) = round(x);
        F(3, t) = fmod(x, 0.75f);
      });
  Kernel k = build(f);
  std::vector<double> a = test::random_values(kN, i32, -1000, 1000);
  std::vector<double> b = test::random_values(kN, i32, -9, 10);
  for (auto& v : b) v = v == 0 ? 3 : v;
  std::vector<double> x = test::random_values(kN, f32, -8, 8);
  x[0] = NAN;
  x[1] = 2.5;
  x[2] = -3.5;
  x[3] = 0.5;
  Tensor A = input(a, {kN}, i32), B = input(b, {kN}, i32), X = input(x, {kN});
  Tensor I = output({6, kN}, i32), F = output({4, kN});
  k(A, B, X, I, F);
  auto iv = I.to_doubles();
  auto fv = F.to_doubles();
  // max / min with a NaN give the GPU's canonical NaN, bit for bit.
  auto fb = F.to_bytes();
  std::uint32_t nan_max, nan_min;
  std::memcpy(&nan_max, fb.data(), 4);
  std::memcpy(&nan_min, fb.data() + 4 * kN, 4);
  CHECK(nan_max == 0x7FFFFFFFu);
  CHECK(nan_min == 0x7FFFFFFFu);
  for (int i = 0; i < kN; ++i) {
    CAPTURE(i);
    auto ai = static_cast<std::int64_t>(a[static_cast<std::size_t>(i)]);
    auto bi = static_cast<std::int64_t>(b[static_cast<std::size_t>(i)]);
    double xi = quantize(x[static_cast<std::size_t>(i)], f32);
    std::int64_t fd = ai / bi - ((ai % bi != 0) && ((ai < 0) != (bi < 0)));
    CHECK(iv[i] == fd);
    CHECK(iv[kN + i] == ai - fd * bi);
    CHECK(iv[2 * kN + i] == ai / bi);
    CHECK(iv[3 * kN + i] == ai % bi);
    double big = static_cast<double>(static_cast<float>(xi * 1e9));
    double sat = std::isnan(xi) ? 0 : std::clamp(std::trunc(big), -2147483648.0, 2147483647.0);
    CHECK(iv[4 * kN + i] == sat);
    // C arithmetic on chars is done in int: the i8 sum does not wrap before the cast.
    CHECK(iv[5 * kN + i] == static_cast<std::int8_t>(ai) + static_cast<std::int8_t>(bi));
    double mx = std::isnan(xi) ? NAN : std::max(xi, double(bi));
    double mn = std::isnan(xi) ? NAN : std::min(xi, double(bi));
    CHECK((fv[i] == mx || (std::isnan(mx) && std::isnan(fv[i]))));
    CHECK((fv[kN + i] == mn || (std::isnan(mn) && std::isnan(fv[kN + i]))));
    CHECK((fv[2 * kN + i] == std::nearbyint(xi) || std::isnan(xi)));
    CHECK((fv[3 * kN + i] == static_cast<double>(std::fmod(static_cast<float>(xi), 0.75f)) ||
           std::isnan(xi)));
  }
}

HOST_CASE("host: compiling the same kernel twice JITs once") {
  lowering::LoweredKernel k1 = lowering::lower(warp_sqrt());
  lowering::LoweredKernel k2 = lowering::lower(warp_sqrt());  // a new, equal IR
  auto h1 = runtime::host_compile(k1);
  auto h2 = runtime::host_compile(k2);
  CHECK(h1 == h2);
  auto h3 = runtime::host_compile(lowering::lower(cta_sqrt()));
  CHECK(h3 != h1);
}

// The optimized LLVM IR of a host compile (TX_HOST_DUMP_LLVM writes it to
// stderr, which is captured in a file for the duration).
std::string optimized_llvm_ir(const lowering::LoweredKernel& k) {
  test::TempDir dir("tx-host-ir");
  std::string file = dir.path + "/ir.ll";
  setenv("TX_HOST_DUMP_LLVM", "1", 1);
  setenv("TX_HOST_CACHE", "0", 1);
  std::fflush(stderr);
  int saved = dup(2);
  int fd = open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  REQUIRE(saved >= 0);
  REQUIRE(fd >= 0);
  dup2(fd, 2);
  close(fd);
  auto restore = [&] {
    std::fflush(stderr);
    dup2(saved, 2);
    close(saved);
    unsetenv("TX_HOST_DUMP_LLVM");
    unsetenv("TX_HOST_CACHE");
  };
  try {
    runtime::host_compile(k);
  } catch (...) {
    restore();
    throw;
  }
  restore();
  return test::read_file(file);
}

HOST_CASE("host: a thread's short serial loop is unrolled so the thread loop vectorizes") {
  // LLVM's own unroller is off on the host (compile time); emit_llvm marks
  // this 8-trip loop for full unrolling instead. Were it left rolled, it
  // would be the innermost loop, strided by 256, and nothing would vectorize.
  constexpr int kThreads = 256, kPerThread = 8, kCtas = 4;
  constexpr std::int64_t kN = kThreads * kPerThread * kCtas;
  PrimFunc f = T::prim_func("columns_sqrt", [&](Handle A_ptr, Handle B_ptr) {
    auto A = T::match_buffer(A_ptr, {kN}, f32);
    auto B = T::match_buffer(B_ptr, {kN}, f32);
    auto cta = T::cta_id({kCtas});
    auto tid = T::thread_id({kThreads});
    for (Var j : T::serial(kPerThread)) {
      Var i = T::let(cta * (kThreads * kPerThread) + j * kThreads + tid);
      B(i) = sqrt(A(i));
    }
  });
  std::string ir = optimized_llvm_ir(lowering::lower(f));
  INFO(ir);
  CHECK(ir.find("@llvm.sqrt.v") != std::string::npos);  // sqrt on a vector of threads

  Kernel k = build(f);
  auto a = test::random_values(kN, f32, 0.01, 100.0);
  Tensor A = input(a, {kN}), B = output({kN});
  k(A, B);
  std::vector<double> want(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) want[i] = std::sqrt(a[i]);
  check_close(B.to_doubles(), want, 1e-6);
}

HOST_CASE("host: barriers and shuffles the host cannot schedule are errors naming their line") {
  lowering::LoweredKernel k = lowering::lower(warp_sqrt());
  Expr t = make_call(Intrinsic::thread_idx, {});
  const Buffer A = flat_view(k.lowered->params[0].buffer);
  const Buffer B = flat_view(k.lowered->params[1].buffer);

  SUBCASE("a cta barrier under a thread-dependent condition") {
    SourceLoc here = std::source_location::current();
    Stmt body = make_seq(
        {make_if(make_binary(BinOp::LT, t, make_int(16)), make_barrier(ExecScope::cta, here)),
         k.lowered->body});
    auto e = host_error(k, body);
    REQUIRE(e);
    CHECK(e->op() == "T.cuda.cta_sync");
    CHECK(e->loc().line == here.line);
    CHECK(std::string(e->what()).find("threadIdx.x < 16") != std::string::npos);
  }
  SUBCASE("a cta barrier under a warp-uniform condition") {
    SourceLoc here = std::source_location::current();
    Expr warp = make_binary(BinOp::Div, t, make_int(32));
    Stmt body =
        make_if(make_binary(BinOp::EQ, warp, make_int(0)), make_barrier(ExecScope::cta, here));
    lowering::LoweredKernel wide = k;
    wide.launch.block = 64;
    auto e = host_error(wide, body);
    REQUIRE(e);
    CHECK(e->op() == "T.cuda.cta_sync");
    CHECK(e->loc().line == here.line);
  }
  SUBCASE("a shuffle under a lane-dependent condition") {
    SourceLoc here = std::source_location::current();
    Expr shfl = make_call(Intrinsic::shfl_xor, {make_load(A, {t}), make_int(1)}, here);
    Stmt body =
        make_if(make_binary(BinOp::LT, make_binary(BinOp::Mod, t, make_int(32)), make_int(16)),
                make_store(B, shfl, {t}));
    auto e = host_error(k, body);
    REQUIRE(e);
    CHECK(e->op() == "T.cuda.shfl_xor");
    CHECK(e->loc().line == here.line);
  }
  SUBCASE("a barrier in a loop whose trip count varies per thread") {
    SourceLoc here = std::source_location::current();
    Var i("i");
    Stmt body = make_for(i, make_int(0), t, ForKind::serial, make_barrier(ExecScope::cta, here));
    auto e = host_error(k, body);
    REQUIRE(e);
    CHECK(e->op() == "T.cuda.cta_sync");
    CHECK(e->loc().line == here.line);
  }
  SUBCASE("the same kernel written with the DSL is refused at compile time") {
    PrimFunc f = T::prim_func("bad_sync", [&](Handle A_ptr) {
      auto Ag = T::match_buffer(A_ptr, {32}, f32);
      auto tid = T::thread_id({32});
      T::if_(tid < 16, [&] { T::cuda::cta_sync(); });
      Ag(tid) = 1.0f;
    });
    CHECK_THROWS_AS(build(f), Error);
  }
  SUBCASE("a warp shuffle under a warp-uniform condition is accepted") {
    Expr warp = make_binary(BinOp::Div, t, make_int(32));
    Expr shfl = make_call(Intrinsic::shfl_xor, {make_load(A, {t}), make_int(1)});
    Stmt body = make_if(make_binary(BinOp::EQ, warp, make_int(0)), make_store(B, shfl, {t}));
    CHECK_FALSE(host_error(k, body));
  }
}

HOST_CASE("host: float tiles of different dtypes in one elementwise op (math in the widest)") {
  // exp of an f32 register tile into a bf16 one (no separate cast), and an
  // f16 + f32 add into a bf16 shared tile: one rounding, on the store.
  auto f = T::prim_func("mixed_float", [&](Handle X_ptr, Handle H_ptr, Handle Y_ptr, Handle Z_ptr) {
    auto X = T::match_buffer(X_ptr, {32, 8}, f32);
    auto H = T::match_buffer(H_ptr, {32, 8}, f16);
    auto Y = T::match_buffer(Y_ptr, {32, 8}, bf16);
    auto Z = T::match_buffer(Z_ptr, {32, 8}, bf16);
    T::cta_id({1});
    T::lane_id({32});
    T::thread_id({32});
    auto lanes = TileLayout(S({32, 8}, {1 * laneid, 1}));
    auto Xr = T::alloc_buffer({32, 8}, f32, scope::local, lanes);
    auto Yr = T::alloc_buffer({32, 8}, bf16, scope::local, lanes);
    Tx::warp::copy(Xr, X);
    Tx::warp::exp(Yr, Xr);
    Tx::warp::copy(Y, Yr);
    auto Xs = T::alloc_buffer({32, 8}, f32, scope::shared);
    auto Hs = T::alloc_buffer({32, 8}, f16, scope::shared);
    auto Zs = T::alloc_buffer({32, 8}, bf16, scope::shared);
    Tx::warp::copy(Xs, X);
    Tx::warp::copy(Hs, H);
    T::cuda::warp_sync();
    Tx::warp::add(Zs, Hs, Xs);
    T::cuda::warp_sync();
    Tx::warp::copy(Z, Zs);
  });
  Kernel k = build(f);
  // The CUDA of the same kernel compiles (NVRTC, no GPU needed).
  CHECK(k.ptx("sm_90a").find(".entry mixed_float") != std::string::npos);
  std::vector<double> x = test::random_values(256, f32, -3, 3);
  std::vector<double> h = test::random_values(256, f16, -3, 3);
  Tensor Y = output({32, 8}, bf16), Z = output({32, 8}, bf16);
  k(input(x, {32, 8}), input(h, {32, 8}, f16), Y, Z);
  std::vector<double> want_y(256), want_z(256);
  for (std::size_t i = 0; i < 256; ++i) {
    want_y[i] = quantize(static_cast<double>(std::exp(static_cast<float>(x[i]))), bf16);
    want_z[i] =
        quantize(static_cast<double>(static_cast<float>(h[i]) + static_cast<float>(x[i])), bf16);
  }
  check_close(Y.to_doubles(), want_y, 1e-2);
  CHECK(Z.to_doubles() == want_z);  // f32 sum, rounded once to bf16
  // Integer tiles still match exactly: an i32 tile into an f32 add is refused.
  auto g = T::prim_func("mixed_int", [&](Handle A_ptr) {
    auto A = T::match_buffer(A_ptr, {32}, i32);
    T::thread_id({32});
    auto As = T::alloc_buffer({32}, i32, scope::shared);
    auto Fs = T::alloc_buffer({32}, f32, scope::shared);
    Tx::warp::copy(As, A);
    Tx::warp::add(Fs, As, Fs);
  });
  CHECK_THROWS_WITH(build(g),
                    doctest::Contains("dtype int32 differs from the destination's float32"));
}
