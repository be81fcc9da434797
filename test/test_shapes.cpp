// Shape-generic kernels (issue 15): T::dim extents bound at launch, scalar
// parameters, grids known at launch, predicated tiles, and the op library
// compiling one kernel per class of shapes. Kernels run on the host JIT
// (CI); gpu_shapes runs the same on the GPU.
#include <doctest/doctest.h>

#include <cmath>
#include <map>
#include <random>
#include <sstream>

#include "test_support.hpp"
#include "tx/lowering/lower.hpp"
#include "tx/ops/ops.hpp"
#include "tx/runtime/cubin_cache.hpp"
#include "tx/runtime/prebuilt.hpp"
#include "tx/tx.hpp"

#define TX_SAMPLE_NO_MAIN
#include "shape_generic.cpp"

using namespace tx;

namespace {

bool host_ready() {
  static const bool ok = runtime::host_jit_available();
  return ok;
}
#define HOST_CASE(name) TEST_CASE(name* doctest::skip(!host_ready()))

// y = 2 x + 1 in tiles of 8 per thread, any n: the copies are predicated
// tiles (whole ones with vectors, the straddling one element by element).
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

std::vector<std::int64_t> sizes() {
  std::vector<std::int64_t> s = {1, 7, 8, 4097, 999983};
  const char* large = std::getenv("TX_TEST_LARGE");
  if (!(large && std::string(large) == "0")) s.push_back((std::int64_t{1} << 24) + 3);
  return s;
}

}  // namespace

HOST_CASE("one compiled kernel runs every size against the double reference") {
  for (DType t : {f32, f16}) {
    CAPTURE(t.name());
    Kernel k = compile(tiles(t), {.device = Device::host()});
    CHECK(k.info().shape_generic());
    for (std::int64_t n : sizes()) {
      CAPTURE(n);
      std::vector<double> x = test::random_values(static_cast<std::size_t>(n), t, -4, 4);
      Tensor X = Tensor::from_doubles(x, {n}, t, Device::host());
      Tensor Y = Tensor::empty({n}, t, Device::host());
      Y.fill_bits(test::poison_bits(t));
      k(X, Y);
      std::vector<double> y = Y.to_doubles(), want(x.size());
      for (std::size_t i = 0; i < x.size(); ++i) want[i] = quantize(2 * x[i] + 1, t);
      CHECK(test::max_rel_error(y, want, 0, test::default_rtol(t)) <= 1.0);
    }
  }
}

HOST_CASE("the op library: one kernel per class of shapes, right on every size") {
  ops::CacheStats s0 = ops::cache_stats();
  for (std::int64_t n : sizes()) {
    CAPTURE(n);
    std::vector<double> x = test::random_values(static_cast<std::size_t>(n), f16, -3, 3);
    Tensor X = Tensor::from_doubles(x, {n}, f16, Device::host());
    Tensor Y = ops::gelu(X);
    std::vector<double> y = Y.to_doubles(), want(x.size());
    for (std::size_t i = 0; i < x.size(); ++i)
      want[i] = quantize(x[i] * 0.5 * std::erfc(-x[i] / std::sqrt(2.0)), f16);
    CHECK(test::max_rel_error(y, want, 1e-3, 2e-3) <= 1.0);
  }
  CHECK(ops::cache_stats().compiles == s0.compiles + 1);  // every size: one gelu kernel
}

HOST_CASE("symbolic 2-D shapes with a broadcast") {
  // The DSL: the sample's kernel, compiled once.
  Kernel k = compile(scale_bias_rows(), {.device = Device::host()});
  for (auto [rows, cols] : {std::pair<std::int64_t, std::int64_t>{1, 1}, {4, 300}, {9, 1031}}) {
    CAPTURE(rows);
    CAPTURE(cols);
    std::vector<double> x = test::random_values(static_cast<std::size_t>(rows * cols), f32);
    std::vector<double> b = test::random_values(static_cast<std::size_t>(cols), f32);
    Tensor X = Tensor::from_doubles(x, {rows, cols}, f32, Device::host());
    Tensor B = Tensor::from_doubles(b, {cols}, f32, Device::host());
    Tensor Y = Tensor::empty({rows, cols}, f32, Device::host());
    Y.fill_bits(test::poison_bits(f32));
    k(X, B, Y, -1.25);
    std::vector<double> y = Y.to_doubles(), want(x.size());
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t c = 0; c < cols; ++c) want[r * cols + c] = -1.25 * x[r * cols + c] + b[c];
    CHECK(test::max_rel_error(y, want, 1e-6, 1e-6) <= 1.0);
  }
  // The op library: (M, N) + (N,) for many M, N of one class -> one kernel.
  ops::CacheStats s0 = ops::cache_stats();
  for (auto [m, nn] : {std::pair<std::int64_t, std::int64_t>{3, 64}, {17, 128}, {2, 4096}}) {
    std::vector<double> a = test::random_values(static_cast<std::size_t>(m * nn), bf16);
    std::vector<double> b = test::random_values(static_cast<std::size_t>(nn), bf16);
    Tensor A = Tensor::from_doubles(a, {m, nn}, bf16, Device::host());
    Tensor B = Tensor::from_doubles(b, {nn}, bf16, Device::host());
    std::vector<double> s = ops::add(A, B).to_doubles();
    for (std::int64_t i = 0; i < m * nn; ++i)
      CHECK(s[static_cast<std::size_t>(i)] ==
            quantize(a[static_cast<std::size_t>(i)] + b[static_cast<std::size_t>(i % nn)], bf16));
  }
  CHECK(ops::cache_stats().compiles == s0.compiles + 1);
}

HOST_CASE("a launch whose tensors disagree on an extent is an error naming both") {
  Kernel k = compile(scale_bias_rows(), {.device = Device::host()});
  Tensor X = Tensor::empty({3, 7}, f32, Device::host());
  Tensor B = Tensor::empty({7}, f32, Device::host());
  Tensor Y = Tensor::empty({3, 8}, f32, Device::host());
  int line = __LINE__ + 2;
  try {
    k(X, B, Y, 1.0);
    FAIL("expected an error");
  } catch (const Error& e) {
    INFO(e.what());
    CHECK(e.op() == "launch scale_bias_rows");
    CHECK(e.operand() == "Y (argument 2)");
    CHECK(e.reason() ==
          "extent cols is 8 here (shape (3, 8)) but 7 in X (argument 0): the tensors disagree");
    CHECK(e.loc().line == static_cast<unsigned>(line));
  }
  // A scalar where a tensor goes, and the other way round.
  Tensor Y7 = Tensor::empty({3, 7}, f32, Device::host());
  CHECK_THROWS_WITH(k(X, B, Y7, X),
                    doctest::Contains("is a scalar parameter (float32), given a tensor"));
  CHECK_THROWS_WITH(k(X, 2.0, Y7, 1.0), doctest::Contains("is a buffer parameter, given a number"));
}

TEST_CASE("a fact the kernel needs but cannot prove is named") {
  // A tile primitive on a buffer with two extents known at launch: its
  // strides are products of T::dim variables, which the layout algebra does
  // not take.
  auto f = T::prim_func("rows2d", [&](Handle A_ptr, Handle B_ptr) {
    auto m = T::dim("m");
    auto n = T::dim("n");
    auto A = T::match_buffer(A_ptr, {m, n}, f32);
    auto B = T::match_buffer(B_ptr, {m, n}, f32);
    auto bx = T::cta_id({m});
    T::thread_id({32});
    Tx::warp::copy(B[region(span(bx, 1), {0, 32})], A[region(span(bx, 1), {0, 32})]);
  });
  CHECK_THROWS_WITH(compile(f), doctest::Contains("tile primitives take buffers with extents known "
                                                  "at launch in one dimension only"));
  // Facts are checked at launch: the kernel was specialized for n % 8 == 0.
  if (!host_ready()) return;
  auto g = T::prim_func("vec8", [&](Handle A_ptr) {
    auto n = T::dim("n", {.min = 8, .multiple_of = 8});
    auto A = T::match_buffer(A_ptr, {n}, f32);
    auto bx = T::cta_id({ceildiv(n, 8)});
    T::thread_id({1});
    auto R = T::alloc_buffer({8}, f32, scope::local);
    Tx::thread::copy(R, A[region(span(bx * 8, 8))]);
    Tx::thread::copy(A[region(span(bx * 8, 8))], R);
  });
  Kernel k = compile(g, {.device = Device::host()});
  Tensor ok = Tensor::from_doubles(std::vector<double>(24, 1.0), {24}, f32, Device::host());
  CHECK_NOTHROW(k(ok));
  Tensor odd = Tensor::from_doubles(std::vector<double>(20, 1.0), {20}, f32, Device::host());
  CHECK_THROWS_WITH(k(odd),
                    doctest::Contains("extent n = 20 (from A, argument 0) is not a multiple "
                                      "of 8, which the kernel was specialized for"));
  Tensor small = Tensor::from_doubles(std::vector<double>(4, 1.0), {4}, f32, Device::host());
  CHECK_THROWS_WITH(k(small), doctest::Contains("is below its min 8"));
}

namespace {
// Chunks of 16 elements per thread, copied as two tiles of 8 inside a guard
// `base + guard_end <= n`; the chunk straddling n is copied element by
// element in the else branch.
PrimFunc guarded_chunks(std::int64_t guard_end) {
  return T::prim_func("guarded_chunks", [&](Handle X_ptr, Handle Y_ptr) {
    auto n = T::dim("n");
    auto X = T::match_buffer(X_ptr, {n}, f32);
    auto Y = T::match_buffer(Y_ptr, {n}, f32);
    auto bx = T::cta_id({ceildiv(n, 16 * 64)});
    auto tid = T::thread_id({64});
    auto base = T::let((bx * 64 + tid) * 16, "base");
    T::if_(base + static_cast<int>(guard_end) <= n, [&] {
      auto R = T::alloc_buffer({8}, f32, scope::local);
      for (int half : {0, 8}) {
        auto at = T::let(base + half, "at");
        Tx::thread::copy(R, X[region(span(at, 8))]);
        for (Var j : T::unroll(8)) R(j) = R(j) * 3.0f;
        Tx::thread::copy(Y[region(span(at, 8))], R);
      }
    }).else_([&] {
      for (Var j : T::serial(16)) T::if_(base + j < n, [&] { Y(base + j) = X(base + j) * 3.0f; });
    });
  });
}
}  // namespace

TEST_CASE("a guard that implies a tile is whole removes its bounds test") {
  // `base + 16 <= n` implies at + 8 <= n for at = base and base + 8 (the
  // lets cancel): vector copies with no test of their own.
  lowering::LoweredKernel whole = lowering::lower(guarded_chunks(16));
  for (const auto& d : whole.dispatched) {
    INFO(d.call);
    CHECK(d.variant == "copy/reg");
  }
  // `base + 12 <= n` does not imply base + 16 <= n: the second tile keeps
  // its test (whole tiles by vector, the partial one element by element).
  lowering::LoweredKernel partial = lowering::lower(guarded_chunks(12));
  int predicated = 0;
  for (const auto& d : partial.dispatched)
    predicated += d.variant.find("copy/fallback (partial)") != std::string::npos;
  CHECK(predicated == 2);  // the load and the store of the tile at base + 8
  if (!host_ready()) return;
  for (std::int64_t guard_end : {16, 12}) {
    Kernel k = compile(guarded_chunks(guard_end), {.device = Device::host()});
    for (std::int64_t n : {1, 15, 16, 1000, 4099}) {
      CAPTURE(n);
      std::vector<double> x = test::random_values(static_cast<std::size_t>(n), f32);
      Tensor X = Tensor::from_doubles(x, {n}, f32, Device::host());
      Tensor Y = Tensor::empty({n}, f32, Device::host());
      Y.fill_bits(test::poison_bits(f32));
      k(X, Y);
      std::vector<double> y = Y.to_doubles(), want(x.size());
      for (std::size_t i = 0; i < x.size(); ++i) want[i] = quantize(3 * x[i], f32);
      CHECK(test::max_rel_error(y, want, 0, 1e-7) <= 1.0);
    }
  }
}

TEST_CASE("a sweep of 200 serving shapes compiles a handful of kernels") {
  // Tokens 1..8192 x hidden 4096 (built, not run: the kernels are what counts).
  std::mt19937_64 rng(42);
  std::uniform_int_distribution<std::int64_t> tokens(1, 8192);
  ops::CacheStats s0 = ops::cache_stats();
  for (int i = 0; i < 200; ++i) {
    std::int64_t t = tokens(rng);
    for (DType d : {f16, bf16}) {
      ops::Elementwise gelu("gelu", {{t, 4096}}, d, {}, {}, Device::host());
      ops::Elementwise add("add", {{t, 4096}, {4096}}, d, {}, {}, Device::host());
      ops::Elementwise glu("silu_and_mul", {{t, 2 * 4096}}, d, {}, {}, Device::host());
    }
  }
  ops::CacheStats s1 = ops::cache_stats();
  MESSAGE("200 shapes x 3 ops x 2 dtypes: " << s1.compiles - s0.compiles << " compiles");
  // One token coalesces add's (1, 4096) + (4096,) to a flat pair: a second class.
  CHECK(s1.compiles - s0.compiles <= 2 * (1 + 2 + 1));
}

HOST_CASE("ops::run on a new leading extent reuses its class, with the same results") {
  // A serving loop's new token count does not plan again: the Elementwise of
  // the class's first call is copied with the new shapes. Each call is checked
  // bit for bit against an Elementwise planned from scratch for its shapes.
  struct Case {
    const char* op;
    std::vector<std::vector<std::int64_t>> shapes;  // -1: the leading extent
    DType t;
  };
  const std::vector<Case> cases = {
      {"add", {{-1, 64}, {64}}, f32},
      {"add", {{-1, 3, 8}, {-1, 1, 8}}, bf16},  // both full rank: one L
      {"where", {{-1, 1}, {-1, 8}, {8}}, f16},  // a bool mask first
      {"silu_and_mul", {{-1, 16}}, bf16},
      {"prelu", {{-1, 3, 4}, {3}}, f32},  // the weight belongs to dimension 1
  };
  for (const Case& c : cases) {
    CAPTURE(c.op);
    for (std::int64_t lead : {5, 3, 17, 1, 2, 64, 3}) {
      CAPTURE(lead);
      std::vector<Tensor> in;
      std::vector<std::vector<std::int64_t>> shapes;
      for (std::size_t i = 0; i < c.shapes.size(); ++i) {
        std::vector<std::int64_t> sh = c.shapes[i];
        for (auto& e : sh) e = e < 0 ? lead : e;
        std::int64_t n = 1;
        for (auto e : sh) n *= e;
        const bool mask = std::string(c.op) == "where" && i == 0;
        auto v = test::random_values(static_cast<std::size_t>(n), mask ? f32 : c.t, -2, 2);
        if (mask)
          for (double& x : v) x = x > 0 ? 1 : 0;
        in.push_back(Tensor::from_doubles(v, sh, mask ? boolean : c.t, Device::host()));
        shapes.push_back(sh);
      }
      const ops::CacheStats s0 = ops::cache_stats();
      Tensor got = ops::run(c.op, in);
      CHECK(ops::cache_stats().compiles - s0.compiles <= (lead == 5 || lead == 1 ? 1u : 0u));
      ops::Elementwise planned(c.op, shapes, c.t, {}, {}, Device::host());
      Tensor want = planned(in);
      CHECK(got.shape() == want.shape());
      CHECK(got.to_bytes() == want.to_bytes());
    }
  }
  // add's values against double (f32: one rounding of the exact sum).
  Tensor b = Tensor::from_doubles(test::random_values(64, f32, -2, 2), {64}, f32, Device::host());
  for (std::int64_t lead : {9, 4}) {
    auto xv = test::random_values(static_cast<std::size_t>(lead * 64), f32, -2, 2);
    Tensor x = Tensor::from_doubles(xv, {lead, 64}, f32, Device::host());
    std::vector<double> y = ops::run("add", {x, b}).to_doubles(), bv = b.to_doubles();
    for (std::size_t k = 0; k < y.size(); ++k)
      CHECK(y[k] == static_cast<double>(static_cast<float>(xv[k] + bv[k % 64])));
  }
  // Leading extents that do not broadcast are still an error naming both.
  Tensor p = Tensor::empty({3, 4}, f32, Device::host()),
         q = Tensor::empty({5, 4}, f32, Device::host());
  CHECK_THROWS_WITH_AS(ops::run("add", {p, q}),
                       doctest::Contains("(3, 4) and (5, 4) do not broadcast"), Error);
}

TEST_CASE("the kernel cache has a capacity, evicts the least recently used, and clears") {
  ops::clear_cache();
  ops::set_cache_capacity(2);
  ops::CacheStats s0 = ops::cache_stats();
  ops::Elementwise a("exp", {{16}}, f32, {}, {}, Device::host());
  ops::Elementwise b("log", {{16}}, f32, {}, {}, Device::host());
  ops::Elementwise a2("exp", {{32}}, f32, {}, {}, Device::host());  // a hit: exp is now the newest
  ops::Elementwise c("sqrt", {{16}}, f32, {}, {}, Device::host());  // evicts log
  ops::CacheStats s1 = ops::cache_stats();
  CHECK(s1.size == 2);
  CHECK(s1.capacity == 2);
  CHECK(s1.evictions == s0.evictions + 1);
  CHECK(s1.hits == s0.hits + 1);
  ops::Elementwise a3("exp", {{64}}, f32, {}, {}, Device::host());  // still cached
  CHECK(ops::cache_stats().hits == s1.hits + 1);
  ops::Elementwise b2("log", {{64}}, f32, {}, {}, Device::host());  // was evicted: compiled again
  CHECK(ops::cache_stats().compiles == s1.compiles + 1);
  CHECK(&a3.kernel().info() == &a.kernel().info());
  ops::clear_cache();
  CHECK(ops::cache_stats().size == 0);
  ops::set_cache_capacity(4096);
  // An evicted kernel stays valid in the objects that hold it.
  CHECK(b.kernel().cuda_source().find("log") != std::string::npos);
}

TEST_CASE("the serving sweep's kernels are compiled ahead of time, when tx is built") {
  // tx_aot_kernels (CMakeLists.txt) compiled the op library's generic kernels
  // into the build's aot-kernels folder: each kernel the sweep uses is
  // there, for sm_90a, so a fresh process on an H100/H200 runs it without
  // NVRTC. A kernel with a baked-in parameter is not.
  if (runtime::aot_dir().empty()) {
    MESSAGE("built with TX_AOT_KERNELS=OFF: nothing to check");
    return;
  }
  std::mt19937_64& g = test::rng();
  for (DType t : {f16, bf16}) {
    for (int k = 0; k < 5; ++k) {
      const std::int64_t tokens = std::uniform_int_distribution<std::int64_t>(1, 8192)(g);
      for (const auto& [op, shapes] :
           std::vector<std::pair<std::string, std::vector<std::vector<std::int64_t>>>>{
               {"gelu", {{tokens, 4096}}},
               {"add", {{tokens, 4096}, {4096}}},
               {"silu_and_mul", {{tokens, 8192}}}}) {
        CAPTURE(op);
        CAPTURE(tokens);
        ops::Elementwise e(op, shapes, t, {}, {}, Device::cuda());
        CHECK(runtime::aot_cubin(e.kernel().cuda_source(), "sm_90a").has_value());
        // And with its launch description, under the op library's key.
        REQUIRE(runtime::aot_cache() != nullptr);
        std::optional<std::vector<char>> entry =
            runtime::aot_cache()->load(runtime::prebuilt_key(e.prebuilt_spec(), "sm_90a"));
        REQUIRE(entry.has_value());
        const std::string text(entry->data());  // the description ends at the first NUL
        CHECK(text == runtime::describe_launch(e.kernel().info(), e.kernel().name()).value());
        CHECK(entry->size() > text.size() + 1000);  // then the cubin
      }
    }
  }
  ops::Elementwise leaky("leaky_relu", {{4096}}, f16, {0.37}, {}, Device::cuda());
  CHECK_FALSE(runtime::aot_cubin(leaky.kernel().cuda_source(), "sm_90a").has_value());
}

TEST_CASE("fast_divide's magic numbers give the exact quotient") {
  // floor(a m / 2^s) = floor(a / d) for every dividend in [0, 2^31) and
  // divisor in [1, 2^31): the edges of both, powers of two and their
  // neighbours, and random pairs.
  std::vector<std::int64_t> divisors = {1,    2,     3,     5,     7,          3136,
                                        4096, 65535, 65536, 65537, 2147483646, 2147483647};
  for (int k = 1; k < 31; ++k)
    for (std::int64_t delta : {-1, 0, 1}) divisors.push_back((std::int64_t{1} << k) + delta);
  std::mt19937_64& g = test::rng();
  std::uniform_int_distribution<std::int64_t> any(1, 2147483647);
  for (int i = 0; i < 2000; ++i) divisors.push_back(any(g));
  for (std::int64_t d : divisors) {
    const lowering::FastDivisor f = lowering::fast_divisor_magic(d);
    REQUIRE(f.shift >= 31);
    REQUIRE(f.shift <= 62);
    std::vector<std::int64_t> as = {0, 1, d - 1, d, d + 1, 2 * d - 1, 2147483646, 2147483647};
    for (int i = 0; i < 50; ++i) as.push_back(any(g) - 1);
    for (std::int64_t a : as) {
      if (a < 0 || a > 2147483647) continue;
      const std::uint64_t q = (static_cast<std::uint64_t>(a) * f.magic) >> f.shift;
      if (q != static_cast<std::uint64_t>(a / d)) {
        CAPTURE(a);
        CAPTURE(d);
        CHECK(q == static_cast<std::uint64_t>(a / d));
      }
    }
  }
  CHECK(lowering::fast_divisor_magic(0).shift == 0);  // outside the domain: no magic
}

namespace {
// Y[i] = (i / w) * 1000 + i % w for i < n: a division and a remainder by an
// extent known at launch; with `shifted`, the dividend i - 5 may be negative.
PrimFunc divide_by_extent(bool shifted) {
  return T::prim_func("divide_by_extent", [&](Handle Y_ptr, Handle W_ptr) {
    auto n = T::dim("n");
    auto w = T::dim("w");
    auto Y = T::match_buffer(Y_ptr, {n}, i32);
    T::match_buffer(W_ptr, {w}, i8);  // only its extent is used
    auto bx = T::cta_id({ceildiv(n, 128)});
    auto tid = T::thread_id({128});
    auto i = T::let(bx * 128 + tid, "i");
    T::if_(i < n, [&] {
      Expr a = shifted ? Expr(i - 5) : Expr(i);
      Y(i) = (a / w) * 1000 + a % w;
    });
  });
}
}  // namespace

TEST_CASE("a division by an extent known at launch is a multiply-high by a magic number") {
  // Lowered: the division and the remainder share one (magic, shift) pair,
  // passed after the extents and computed at launch; no division is left.
  lowering::LoweredKernel k = lowering::lower(divide_by_extent(false));
  REQUIRE(k.derived.size() == 2);
  CHECK(k.derived[0].derived == DimParam::Derived::div_magic);
  CHECK(k.derived[1].derived == DimParam::Derived::div_shift);
  const std::string ir = to_string(k.lowered);
  CHECK(ir.find("T.launch_value(\"div_magic\", w)") != std::string::npos);
  CHECK(ir.find(" / w") == std::string::npos);
  CHECK(ir.find(" % w") == std::string::npos);
  // A dividend that may be negative keeps its (floor) division.
  lowering::LoweredKernel kept = lowering::lower(divide_by_extent(true));
  CHECK(kept.derived.empty());
  if (!host_ready()) return;
  for (bool shifted : {false, true}) {
    Kernel kern = compile(divide_by_extent(shifted), {.device = Device::host()});
    for (auto [n, w] : std::vector<std::pair<std::int64_t, std::int64_t>>{
             {1, 1}, {300, 1}, {300, 7}, {5000, 3136}, {5000, 4096}, {70000, 65537}, {9, 100}}) {
      CAPTURE(shifted);
      CAPTURE(n);
      CAPTURE(w);
      Tensor Y = Tensor::empty({n}, i32, Device::host());
      Y.fill_bits(0x7f7f7f7f);
      Tensor W = Tensor::empty({w}, i8, Device::host());
      kern(Y, W);
      std::vector<double> y = Y.to_doubles();
      std::int64_t wrong = 0;
      for (std::int64_t i = 0; i < n; ++i) {
        const std::int64_t a = shifted ? i - 5 : i;
        const std::int64_t q = a / w, r = a % w;  // truncating, as C (T's / and %)
        wrong += y[static_cast<std::size_t>(i)] != static_cast<double>(q * 1000 + r);
      }
      CHECK(wrong == 0);
    }
  }
}

namespace {
// y[i] = (i / w) * 1000 + i % k for i < n: divisors from an extent (w) and
// from an integer scalar (k), the grid from n.
PrimFunc divide_by_extent_and_scalar() {
  return T::prim_func("divide_by_extent_and_scalar", [&](Handle Y_ptr, Handle W_ptr, Handle k_ptr) {
    auto n = T::dim("n");
    auto w = T::dim("w");
    auto Y = T::match_buffer(Y_ptr, {n}, i32);
    T::match_buffer(W_ptr, {w}, i8);  // only its extent is used
    auto k = T::match_scalar(k_ptr, i32, "k", DimFacts{.min = 1, .max = 1 << 20});
    auto bx = T::cta_id({ceildiv(n, 128)});
    auto tid = T::thread_id({128});
    auto i = T::let(bx * 128 + tid, "i");
    T::if_(i < n, [&] { Y(i) = (i / w) * 1000 + i % k; });
  });
}
}  // namespace

HOST_CASE("a launch reuses what the last one computed from the same extents, and only then") {
  // The launch remembers the magic numbers and the grid it computed for the
  // last (extents, scalars); this sequence repeats each, then changes one
  // value at a time: the extent behind a divisor, the scalar behind one, the
  // extent behind the grid, and returns to earlier values.
  lowering::LoweredKernel lk = lowering::lower(divide_by_extent_and_scalar());
  REQUIRE(lk.derived.size() == 4);  // (magic, shift) for w and for k
  Kernel kern = compile(divide_by_extent_and_scalar(), {.device = Device::host()});
  struct Launch {
    std::int64_t n, w, k;
  };
  for (Launch l : std::vector<Launch>{{5000, 3136, 7},
                                      {5000, 3136, 7},
                                      {5000, 4096, 7},
                                      {5000, 4096, 7},
                                      {5000, 4096, 3},
                                      {300, 4096, 3},
                                      {300, 4096, 3},
                                      {5000, 3136, 7},
                                      {70000, 65537, 65537},
                                      {70000, 65537, 1}}) {
    CAPTURE(l.n);
    CAPTURE(l.w);
    CAPTURE(l.k);
    Tensor Y = Tensor::empty({l.n}, i32, Device::host());
    Y.fill_bits(0x7f7f7f7f);
    Tensor W = Tensor::empty({l.w}, i8, Device::host());
    kern(Y, W, l.k);
    std::vector<double> y = Y.to_doubles();
    std::int64_t wrong = 0;
    for (std::int64_t i = 0; i < l.n; ++i)
      wrong += y[static_cast<std::size_t>(i)] != static_cast<double>(i / l.w * 1000 + i % l.k);
    CHECK(wrong == 0);
  }
}

namespace {
// What a launch reads of a kernel, printed: the description's fields.
std::string launch_fields(const lowering::LoweredKernel& k) {
  std::ostringstream os;
  os << k.launch.block << " " << k.shared_bytes << " " << k.launch.symbolic_grid;
  for (const auto& p : k.params) {
    os << " | " << p.name << " " << p.dtype.name() << " " << p.is_scalar << " " << p.align_bytes
       << " " << p.symbolic << " " << p.min << " " << p.max << " " << p.multiple_of;
    for (const Expr& d : p.dims) os << " " << to_string(d);
    for (std::int64_t e : p.shape) os << " " << e;
  }
  for (const auto& d : k.dims)
    os << " | " << d.var.name() << " " << d.min << " " << d.max << " " << d.multiple_of << " "
       << d.loc.str();
  for (const auto& d : k.derived) os << " | " << d.var.name() << " " << to_string(d.of);
  return os.str();
}
}  // namespace

TEST_CASE("a launch description round-trips what a launch reads of the kernel") {
  std::vector<std::pair<std::string, Kernel>> kernels;
  for (const auto& [op, shapes] :
       std::vector<std::pair<std::string, std::vector<std::vector<std::int64_t>>>>{
           {"gelu", {{7, 4096}}},
           {"add", {{9, 4096}, {4096}}},
           {"add", {{4, 16, 9, 9}, {16, 1, 1}}},  // divisions: launch values
           {"silu_and_mul", {{3, 512}}},
           {"where", {{5, 6}, {5, 6}, {6}}}}) {
    ops::Elementwise e(op, shapes, bf16, {}, {}, Device::host());
    kernels.emplace_back(op, e.kernel());
  }
  kernels.emplace_back("scale_bias_rows", compile(scale_bias_rows(), {.device = Device::host()}));
  kernels.emplace_back("divide_by_extent",
                       compile(divide_by_extent(false), {.device = Device::host()}));
  for (const auto& [what, k] : kernels) {
    CAPTURE(what);
    std::optional<std::string> text = runtime::describe_launch(k.info(), k.name());
    REQUIRE(text.has_value());
    runtime::LaunchDescription d = runtime::parse_launch(*text);
    CHECK(d.kernel_name == k.name());
    CHECK(launch_fields(d.info) == launch_fields(k.info()));
    CHECK(runtime::describe_launch(d.info, d.kernel_name) == text);  // a fixed point
    // The grid as the launch computes it, for random extents.
    std::mt19937_64& g = test::rng();
    for (int trial = 0; trial < 20; ++trial) {
      std::map<std::string, std::int64_t> values;
      auto value = [&](const VarNode* v) -> std::optional<std::int64_t> {
        auto [it, fresh] = values.emplace(v->name, 0);
        if (fresh) it->second = std::uniform_int_distribution<std::int64_t>(1, 1 << 20)(g);
        return it->second;
      };
      for (std::size_t a = 0; a < 3; ++a) {
        if (!k.info().launch.symbolic_grid) break;
        CHECK(lowering::evaluate_int(d.info.launch.grid_exprs[a], value, true) ==
              lowering::evaluate_int(k.info().launch.grid_exprs[a], value, true));
      }
      for (std::size_t j = 0; j < k.info().derived.size(); ++j)
        CHECK(lowering::evaluate_int(d.info.derived[j].of, value) ==
              lowering::evaluate_int(k.info().derived[j].of, value));
    }
  }
  // Malformed descriptions are tx errors naming tx.prebuilt.
  for (const std::string bad :
       {"", "tx-launch 2\n", "tx-launch 1\nname k\nblock 32\n",
        "tx-launch 1\nname k\nblock 32\ngrid 1 1 1 1\ngridexpr 0 (add $n 1)\nend\n",
        "tx-launch 1\nname k\nblock 32\ngrid 1 1 1 1\ngridexpr 0 (frobnicate 1 1)\nend\n",
        "tx-launch 1\nname k\nblock 32\nwhat 3\nend\n"}) {
    CAPTURE(bad);
    CHECK_THROWS_WITH(runtime::parse_launch(bad),
                      doctest::Contains("malformed launch description"));
  }
}

HOST_CASE("a prebuilt kernel launches from its description and builds its IR on request") {
  // The channel broadcast (divisions by extents: launch values) as a
  // prebuilt kernel: its launch checks and computes from the description;
  // the host runs the kernel `build` makes.
  const std::vector<std::vector<std::int64_t>> shapes = {{3, 16, 9, 9}, {16, 1, 1}};
  ops::Elementwise e("add", shapes, f32, {}, {}, Device::host());
  int builds = 0;
  Kernel built = e.kernel();
  runtime::LaunchDescription d =
      runtime::parse_launch(runtime::describe_launch(built.info(), built.name()).value());
  Kernel k = Kernel::prebuilt(d.info, d.kernel_name, {}, Device::host(), [&] {
    ++builds;
    return built;
  });
  CHECK(k.is_prebuilt());
  CHECK(builds == 0);
  // The kernel's arguments, as ops::Elementwise passes them: flat tensors,
  // then the coalesced extents (16, 81).
  std::vector<double> x = test::random_values(3 * 16 * 81, f32);
  std::vector<double> b = test::random_values(16, f32);
  Tensor X = Tensor::from_doubles(x, {3 * 16 * 81}, f32, Device::host());
  Tensor B = Tensor::from_doubles(b, {16}, f32, Device::host());
  Tensor Y = Tensor::empty({3 * 16 * 81}, f32, Device::host());
  Y.fill_bits(test::poison_bits(f32));
  k(X, B, Y, 16, 81);
  CHECK(builds == 1);
  std::vector<double> y = Y.to_doubles();
  std::int64_t wrong = 0;
  for (std::size_t i = 0; i < x.size(); ++i)
    wrong += y[i] != quantize(x[i] + b[(i / 81) % 16], f32);
  CHECK(wrong == 0);
  CHECK(k.cuda_source() == built.cuda_source());
  CHECK(builds == 1);
  // Errors come from the description as from the kernel: tensors that
  // disagree, named.
  Tensor Y2 = Tensor::empty({3 * 16 * 81 + 1}, f32, Device::host());
  CHECK_THROWS_WITH(k(X, B, Y2, 16, 81), doctest::Contains("the tensors disagree"));
  CHECK_THROWS_WITH(k(X, B, Y, 0, 81),
                    doctest::Contains("breaks the facts the kernel was compiled"));
  // A build that gives another kernel is refused.
  Kernel wrong_k = Kernel::prebuilt(d.info, d.kernel_name, {}, Device::host(),
                                    [&] { return compile(scale_bias_rows()); });
  CHECK_THROWS_WITH(wrong_k.cuda_source(), doctest::Contains("the kernel built for it is"));
}

namespace {
// Y = 2 X + B over n elements, its buffers declared not to overlap.
PrimFunc axpb_no_alias() {
  return T::prim_func("axpb_no_alias", [&](Handle X_ptr, Handle B_ptr, Handle Y_ptr) {
    T::no_alias();
    auto n = T::dim("n");
    auto X = T::match_buffer(X_ptr, {n}, f32);
    auto B = T::match_buffer(B_ptr, {n}, f32);
    auto Y = T::match_buffer(Y_ptr, {n}, f32);
    auto bx = T::cta_id({ceildiv(n, 128)});
    auto tid = T::thread_id({128});
    auto i = T::let(bx * 128 + tid, "i");
    T::if_(i < n, [&] { Y(i) = X(i) * 2.0f + B(i); });
  });
}
}  // namespace

TEST_CASE("T::no_alias: restrict pointers, and a launch whose buffers overlap is an error") {
  Kernel k = compile(axpb_no_alias(), {.device = Device::host()});
  CHECK(k.tirx().find("T.func_attr({\"tir.noalias\": True})") != std::string::npos);
  CHECK(k.cuda_source().find("const float* __restrict__ X") != std::string::npos);
  CHECK(k.cuda_source().find("float* __restrict__ Y") != std::string::npos);
  // The launch description keeps it, and what the kernel writes.
  runtime::LaunchDescription d =
      runtime::parse_launch(runtime::describe_launch(k.info(), k.name()).value());
  CHECK(d.info.source->no_alias);
  CHECK(d.info.params[2].written);
  CHECK_FALSE(d.info.params[0].written);
  if (!host_ready()) return;
  std::vector<double> x = test::random_values(300, f32), b = test::random_values(300, f32);
  Tensor X = Tensor::from_doubles(x, {300}, f32, Device::host());
  Tensor B = Tensor::from_doubles(b, {300}, f32, Device::host());
  Tensor Y = Tensor::empty({300}, f32, Device::host());
  Y.fill_bits(test::poison_bits(f32));
  k(X, B, Y);
  std::vector<double> y = Y.to_doubles();
  for (std::size_t i = 0; i < y.size(); ++i) CHECK(y[i] == quantize(2 * x[i] + b[i], f32));
  // Two inputs may share bytes (nothing writes them); the output may not.
  CHECK_NOTHROW(k(X, X, Y));
  int line = __LINE__ + 2;
  try {
    k(X, B, X);
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(e.op() == "launch axpb_no_alias");
    CHECK(e.operand() == "Y (argument 2)");
    CHECK(e.reason() ==
          "overlaps X (argument 0) in memory, but the kernel assumes its buffers do not "
          "(T::no_alias)");
    CHECK(e.loc().line == static_cast<unsigned>(line));
  }
  // A partial overlap too: Y starts inside B.
  Tensor big = Tensor::empty({600}, f32, Device::host());
  CHECK_THROWS_WITH(k(X, big.as_strided({300}, {1}, 0), big.as_strided({300}, {1}, 150)),
                    doctest::Contains("overlaps B (argument 1)"));
}

HOST_CASE("the op library in place: the output overlapping an input takes the aliasing kernel") {
  // The library's generic kernels assume no overlap; x += b (out is x)
  // runs the kernel built without that assumption, and is right.
  for (DType t : {f32, bf16}) {
    CAPTURE(t.name());
    std::vector<double> x = test::random_values(7 * 96, t), b = test::random_values(96, t);
    Tensor X = Tensor::from_doubles(x, {7, 96}, t, Device::host());
    Tensor B = Tensor::from_doubles(b, {96}, t, Device::host());
    ops::Elementwise add("add", {{7, 96}, {96}}, t, {}, {}, Device::host());
    CHECK(add.kernel().cuda_source().find("__restrict__") != std::string::npos);
    ops::CacheStats s0 = ops::cache_stats();
    add({X, B}, X);
    CHECK(ops::cache_stats().compiles == s0.compiles + 1);  // the in-place kernel
    std::vector<double> y = X.to_doubles();
    for (std::size_t i = 0; i < y.size(); ++i) CHECK(y[i] == quantize(x[i] + b[i % 96], t));
    add({X, B}, X);  // again: no new kernel
    CHECK(ops::cache_stats().compiles == s0.compiles + 1);
  }
}
