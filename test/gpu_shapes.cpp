// Shape-generic kernels on the GPU (issue 15): one compiled kernel on sizes
// from 1 to (1 << 24) + 3 against the double reference, the op library's
// kernels per class, and their outputs bit for bit those of the exact-shape
// kernels. Skipped (exit 77) without a GPU.
#include <doctest/doctest.h>

#include <cmath>

#include "test_support.hpp"
#include "tx/ops/ops.hpp"
#include "tx/tx.hpp"

using namespace tx;

namespace {

PrimFunc tiles(DType t) {
  return T::prim_func("tiles", [&](Handle X_ptr, Handle Y_ptr) {
    auto n = T::dim("n");
    auto X = T::match_buffer(X_ptr, {n}, t);
    auto Y = T::match_buffer(Y_ptr, {n}, t);
    auto bx = T::cta_id({ceildiv(n, 1024)});
    auto tid = T::thread_id({128});
    auto base = T::let((bx * 128 + tid) * 8);
    auto R = T::alloc_buffer({8}, t, scope::local);
    Tx::thread::copy(R, X[region(span(base, 8))]);
    for (Var j : T::unroll(8)) R(j) = cast(cast(R(j), f32) * 2.0f + 1.0f, t);
    Tx::thread::copy(Y[region(span(base, 8))], R);
  });
}

const std::vector<std::int64_t> kSizes = {1, 7, 8, 4097, 999983, (std::int64_t{1} << 24) + 3};

}  // namespace

TEST_CASE("one compiled kernel runs every size on the GPU") {
  for (DType t : {f32, f16}) {
    CAPTURE(t.name());
    Kernel k = compile(tiles(t), {.device = Device::cuda()});
    for (std::int64_t n : kSizes) {
      CAPTURE(n);
      std::vector<double> x = test::random_values(static_cast<std::size_t>(n), t, -4, 4);
      Tensor X = Tensor::from_doubles(x, {n}, t, Device::cuda());
      Tensor Y = Tensor::empty({n}, t, Device::cuda());
      Y.fill_bits(test::poison_bits(t));
      k(X, Y);
      std::vector<double> y = Y.to_doubles(), want(x.size());
      for (std::size_t i = 0; i < x.size(); ++i) want[i] = quantize(2 * x[i] + 1, t);
      CHECK(test::max_rel_error(y, want, 0, test::default_rtol(t)) <= 1.0);
    }
    CHECK(k.prepare_gpu() == "memory");  // built once, on the first launch
  }
}

TEST_CASE("the op library's shape-generic kernels equal the exact-shape ones, bit for bit") {
  // Every size of the sweep's classes: gelu (T, H), add (T, H) + (H,),
  // silu_and_mul (T, 2H); odd H too (the class without whole rows).
  ops::CacheStats s0 = ops::cache_stats();
  for (DType t : {f16, bf16}) {
    for (std::int64_t tokens : {1, 3, 129, 2048}) {
      for (std::int64_t h : {4096, 1000}) {
        CAPTURE(t.name());
        CAPTURE(tokens);
        CAPTURE(h);
        std::vector<double> x = test::random_values(static_cast<std::size_t>(tokens * 2 * h), t);
        std::vector<double> b = test::random_values(static_cast<std::size_t>(h), t);
        Tensor X = Tensor::from_doubles(std::vector<double>(x.begin(), x.begin() + tokens * h),
                                        {tokens, h}, t, Device::cuda());
        Tensor X2 = Tensor::from_doubles(x, {tokens, 2 * h}, t, Device::cuda());
        Tensor B = Tensor::from_doubles(b, {h}, t, Device::cuda());
        auto both = [&](const std::string& op, const std::vector<Tensor>& in) {
          Tensor g = ops::run(op, in);
          Tensor e = ops::run(op, in, {}, {.exact_shape = true});
          CHECK(g.to_bytes() == e.to_bytes());
        };
        both("gelu", {X});
        both("add", {X, B});
        both("silu_and_mul", {X2});
      }
    }
  }
  ops::CacheStats s1 = ops::cache_stats();
  MESSAGE("compiles: " << s1.compiles - s0.compiles << " (exact shapes included)");
}
