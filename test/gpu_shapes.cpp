// Shape-generic kernels on the GPU (issue 15): one compiled kernel on sizes
// from 1 to (1 << 24) + 3 against the double reference, the op library's
// kernels per class, and their outputs bit for bit those of the exact-shape
// kernels. Skipped (exit 77) without a GPU.
#include <doctest/doctest.h>

#include <array>
#include <cmath>

#include "test_support.hpp"
#include "tx/ops/ops.hpp"
#include "tx/runtime/cubin_cache.hpp"
#include "tx/runtime/cuda_driver.hpp"
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

TEST_CASE("divisions by extents known at launch: the channel broadcast, bit for bit") {
  // (N, C, H, W) + (C, 1, 1) coalesces to rank 3: the channel of element i
  // is (i / HW) % C, two divisions by launch values (fast_divide), checked
  // against the exact-shape kernel, whose divisors are constants.
  for (DType t : {f16, f32}) {
    for (auto [n, c, hw] : std::vector<std::array<std::int64_t, 3>>{
             {1, 3, 1}, {2, 5, 49}, {16, 256, 3136}, {3, 7, 4099}, {1, 65537, 3}}) {
      CAPTURE(t.name());
      CAPTURE(n);
      CAPTURE(c);
      CAPTURE(hw);
      std::vector<double> x = test::random_values(static_cast<std::size_t>(n * c * hw), t);
      std::vector<double> b = test::random_values(static_cast<std::size_t>(c), t);
      Tensor X = Tensor::from_doubles(x, {n, c, hw}, t, Device::cuda());
      Tensor B = Tensor::from_doubles(b, {c, 1}, t, Device::cuda());
      Tensor g = ops::add(X, B);
      Tensor e = ops::run("add", {X, B}, {}, {.exact_shape = true});
      CHECK(g.to_bytes() == e.to_bytes());
      std::vector<double> y = g.to_doubles();
      std::int64_t wrong = 0;
      for (std::size_t i = 0; i < x.size(); ++i)
        wrong +=
            y[i] !=
            quantize(x[i] + b[(i / static_cast<std::size_t>(hw)) % static_cast<std::size_t>(c)], t);
      CHECK(wrong == 0);
    }
  }
}

TEST_CASE("the serving sweep's kernels launch prebuilt: no IR is built for them") {
  // tx_aot_kernels stored them with their launch descriptions; a process
  // whose cache is empty launches them from those, as compiled when tx was
  // built. The kernel (IR, CUDA) is built only when asked for.
  const std::string arch = runtime::device_info(0).arch();
  if (runtime::aot_dir().empty() || arch != "sm_90a") {
    MESSAGE("no prebuilt kernels for " << arch << " in this build: nothing to check");
    return;
  }
  ops::clear_cache();
  for (DType t : {f16, bf16}) {
    for (std::int64_t tokens : {1, 77, 4096}) {
      CAPTURE(t.name());
      CAPTURE(tokens);
      std::vector<double> x = test::random_values(static_cast<std::size_t>(tokens * 8192), t);
      std::vector<double> b = test::random_values(4096, t);
      Tensor X = Tensor::from_doubles(std::vector<double>(x.begin(), x.begin() + tokens * 4096),
                                      {tokens, 4096}, t, Device::cuda());
      Tensor X2 = Tensor::from_doubles(x, {tokens, 8192}, t, Device::cuda());
      Tensor B = Tensor::from_doubles(b, {4096}, t, Device::cuda());
      for (const auto& [op, in] : std::vector<std::pair<std::string, std::vector<Tensor>>>{
               {"gelu", {X}}, {"add", {X, B}}, {"silu_and_mul", {X2}}}) {
        CAPTURE(op);
        std::vector<std::vector<std::int64_t>> shapes;
        for (const Tensor& i : in) shapes.push_back(i.shape());
        ops::Elementwise e(op, shapes, t, {}, {}, Device::cuda());
        CHECK(e.kernel().is_prebuilt());
        Tensor got = e(in);
        CHECK(e.kernel().prepare_gpu() == "memory");  // loaded by the launch
        Tensor want = ops::run(op, in, {}, {.exact_shape = true});
        CHECK(got.to_bytes() == want.to_bytes());
      }
    }
  }
  // Asked for, the IR is built (once) and is the kernel's.
  ops::Elementwise add("add", {{5, 4096}, {4096}}, bf16, {}, {}, Device::cuda());
  REQUIRE(add.kernel().is_prebuilt());
  CHECK(add.kernel().cuda_source().find(add.kernel().name()) != std::string::npos);
}
