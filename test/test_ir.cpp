// IR building and printing: the builders record what the user wrote (names,
// source lines), expression templates type literals and evaluate on plain
// numbers too, printing reads like the seeds, structural equality and
// hashing ignore names, and the mutator rebuilds only what changes.
#include <doctest/doctest.h>

#include <cmath>
#include <sstream>

#include "test_support.hpp"
#include "tx/tx.hpp"

#define TX_SAMPLE_NO_MAIN
#include "warp_copy_reg.cpp"
#include "warp_sqrt_reg.cpp"

using namespace tx;

namespace {
bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}
}  // namespace

TEST_CASE("the seed 000 kernel prints like the seed's script") {
  std::string s = to_string(warp_sqrt());
  CHECK(contains(s, "@T.prim_func\ndef warp_sqrt(A_ptr: T.handle, B_ptr: T.handle):"));
  CHECK(contains(s, "A = T.match_buffer(A_ptr, (32, 8), \"float32\")"));
  CHECK(contains(s, "tid = T.thread_id([32])"));
  CHECK(contains(s, "A_smem = T.alloc_buffer((32, 8), \"float32\", scope=\"shared\")"));
  CHECK(contains(s,
                 "R = T.alloc_buffer((32, 8), \"float32\", scope=\"local\", "
                 "layout=TileLayout(S[(32, 8) : (1@laneid, 1)]))"));
  CHECK(contains(s, "Tx.warp.copy(A_smem[0:32, 0:8], A[0:32, 0:8])"));
  CHECK(contains(s, "Tx.warp.sqrt(R[0:32, 0:8], R[0:32, 0:8])"));
  CHECK(contains(s, "T.cuda.cta_sync()"));
}

TEST_CASE("loops, element stores and casts print as written") {
  std::string s = to_string(warp_copy_reg());
  CHECK(contains(s, "for kk in T.serial(8):"));
  CHECK(contains(s, "A_smem[tid, kk] = A[tid, kk] + T.cast(tid * 100 + kk + 1, \"float32\")"));
}

TEST_CASE("every tile call records the user's source line") {
  int line = 0;
  PrimFunc f = T::prim_func("loc", [&](Handle A_ptr) {
    auto A = T::match_buffer(A_ptr, {32}, f32);
    T::thread_id({32});
    auto As = T::alloc_buffer({32}, f32, scope::shared);
    line = __LINE__ + 1;
    Tx::warp::copy(As, A);
  });
  bool found = false;
  for_each_stmt(f->body, [&](const Stmt& s) {
    if (auto* c = s.as<TileCallNode>()) {
      CHECK(c->loc.line == static_cast<unsigned>(line));
      CHECK(contains(c->loc.str(), "test_ir.cpp"));
      found = true;
    }
  });
  CHECK(found);
}

TEST_CASE("a formula written once is the kernel body and the reference") {
  auto silu = [](auto x) { return x / (1 + exp(-x)); };
  for (double x : test::random_values(20, f64, -5, 5))
    CHECK(silu(x) == doctest::Approx(x / (1 + std::exp(-x))));
  PrimFunc f = T::prim_func("silu", [&](Handle A_ptr, Handle B_ptr) {
    auto A = T::match_buffer(A_ptr, {64}, f32);
    auto B = T::match_buffer(B_ptr, {64}, f32);
    auto tid = T::thread_id({64});
    B(tid) = silu(A(tid));
  });
  CHECK(contains(to_string(f), "B[tid] = A[tid] / (1.0 + T.exp(-A[tid]))"));
}

TEST_CASE("normcdf is the standard normal CDF on numbers and a math call in the IR") {
  auto gelu = [](auto x) { return x * normcdf(x); };
  for (double x : test::random_values(20, f64, -8, 8))
    CHECK(gelu(x) == doctest::Approx(0.5 * x * (1 + std::erf(x / std::sqrt(2.0)))).epsilon(1e-12));
  CHECK(normcdf(-10.0) == doctest::Approx(7.6198530241605e-24).epsilon(1e-12));  // no cancellation
  PrimFunc f = T::prim_func("gelu", [&](Handle A_ptr, Handle B_ptr) {
    auto A = T::match_buffer(A_ptr, {64}, f32);
    auto B = T::match_buffer(B_ptr, {64}, f32);
    auto tid = T::thread_id({64});
    B(tid) = gelu(A(tid));
  });
  CHECK(contains(to_string(f), "T.normcdf(A[tid])"));
  CHECK(Expr(normcdf(Expr(make_int(3)))).dtype() ==
        f32);  // an integer argument converts, as for exp
}

TEST_CASE("literals take the dtype of the value they meet") {
  PrimFunc f = T::prim_func("lit", [&](Handle A_ptr) {
    auto A = T::match_buffer(A_ptr, {8}, f16);
    auto tid = T::thread_id({8});
    A(tid) = A(tid) * 2 + 1;
  });
  std::string s = to_string(f, {.canonical = true});
  CHECK(contains(s, "T.float16(2.0)"));
  CHECK(contains(s, "T.float16(1.0)"));
}

TEST_CASE("mixing float dtypes asks for a cast") {
  auto build = [] {
    return T::prim_func("mix", [&](Handle A_ptr, Handle B_ptr) {
      auto A = T::match_buffer(A_ptr, {8}, f16);
      auto B = T::match_buffer(B_ptr, {8}, f32);
      auto tid = T::thread_id({8});
      B(tid) = A(tid) + B(tid);
    });
  };
  CHECK_THROWS_WITH_AS(build(), doctest::Contains("up to the wider type: cast(A[tid], float32)"),
                       Error);
}

TEST_CASE("ints promote to the float operand, and cast() rounds references like the GPU") {
  CHECK(cast(1.0 + 1e-4, f16) == 1.0);
  CHECK(cast(65520.0, f16) == INFINITY);
  CHECK(cast(500.0, f8e4m3) == 448.0);
  CHECK(cast(-1e6, f8e4m3) == -448.0);
  CHECK(std::isinf(cast(1e6, f8e5m2)));
  CHECK(cast(57344.0, f8e5m2) == 57344.0);
  CHECK(std::isnan(cast(NAN, f8e4m3)));
  CHECK(encode_bits(1.0, f16) == 0x3c00);
  CHECK(encode_bits(1.0, bf16) == 0x3f80);
  CHECK(encode_bits(-2.0, f8e4m3) == 0xc0);
  CHECK(encode_bits(std::ldexp(1.0, -9), f8e4m3) == 0x01);   // smallest subnormal
  CHECK(encode_bits(std::ldexp(1.0, -16), f8e5m2) == 0x01);  // smallest subnormal
  CHECK(decode_bits(0x7e, f8e4m3) == 448.0);
  CHECK(std::isnan(decode_bits(0x7f, f8e4m3)));
  CHECK(cast(300.0, u8) == 44.0);  // integers wrap
  CHECK(cast(-1.5, i32) == -1.0);  // and truncate
  // Every f16 bit pattern survives decode -> encode.
  for (std::uint64_t b = 0; b < 0x10000; ++b) {
    double v = decode_bits(b, f16);
    if (!std::isnan(v)) REQUIRE(encode_bits(v, f16) == b);
  }
  for (std::uint64_t b = 0; b < 0x100; ++b) {
    double v = decode_bits(b, f8e4m3), w = decode_bits(b, f8e5m2);
    if (!std::isnan(v)) REQUIRE(encode_bits(v, f8e4m3) == b);
    if (!std::isnan(w)) REQUIRE(encode_bits(w, f8e5m2) == b);
  }
}

TEST_CASE("structural equality ignores names, and the hash follows it") {
  PrimFunc a = warp_sqrt(), b = warp_sqrt();
  CHECK(structural_equal(a, b));
  CHECK(structural_hash(a) == structural_hash(b));
  auto variant = [](std::int64_t n) {
    return T::prim_func("k", [&](Handle A_ptr) {
      auto A = T::match_buffer(A_ptr, {64}, f32);
      auto tid = T::thread_id({64});
      A(tid) = A(tid) + cast(n, f32);
    });
  };
  CHECK(structural_equal(variant(3), variant(3)));
  CHECK_FALSE(structural_equal(variant(3), variant(4)));
  CHECK(structural_hash(variant(3)) != structural_hash(variant(4)));
}

TEST_CASE("structural equality sees layouts, memory scopes, execution scopes and dtypes") {
  struct Knobs {
    bool lane_layout = true;
    MemScope staging = MemScope::shared;
    bool warpgroup = false;
    DType t = f32;
  };
  auto build = [](Knobs k) {
    return T::prim_func("k", [&](Handle A_ptr, Handle B_ptr) {
      auto A = T::match_buffer(A_ptr, {32, 8}, k.t);
      auto B = T::match_buffer(B_ptr, {32, 8}, k.t);
      T::thread_id({128});
      TileLayout rl = k.lane_layout ? TileLayout(S({32, 8}, {1 * laneid, 1}))
                                    : TileLayout(S({32, 8}, {8 * laneid, 1}));
      std::optional<TileLayout> sl;
      if (k.staging == MemScope::local) sl = rl;
      auto X = T::alloc_buffer({32, 8}, k.t, k.staging, sl);
      auto R = T::alloc_buffer({32, 8}, k.t, scope::local, rl);
      if (k.warpgroup)
        Tx::warpgroup::copy(X, A);
      else
        Tx::warp::copy(X, A);
      Tx::warp::copy(R, X);
      Tx::warp::copy(B, R);
    });
  };
  PrimFunc base = build({});
  CHECK(structural_equal(base, build({})));
  CHECK(structural_hash(base) == structural_hash(build({})));
  for (Knobs k : {Knobs{.lane_layout = false}, Knobs{.staging = MemScope::local},
                  Knobs{.warpgroup = true}, Knobs{.t = f16}}) {
    PrimFunc other = build(k);
    CHECK_FALSE(structural_equal(base, other));
    CHECK(structural_hash(base) != structural_hash(other));
  }
  // The statement level too: the same body built twice is equal.
  CHECK(structural_equal(base->body, build({})->body));
  CHECK_FALSE(structural_equal(base->body, build({.t = f16})->body));
}

TEST_CASE("substitute rebuilds only what changes") {
  Var x("x"), y("y");
  Expr e = make_binary(BinOp::Add, make_binary(BinOp::Mul, x, make_int(2)), y);
  Expr r = substitute(e, {{x, make_int(5)}});
  CHECK(to_string(r) == "5 * 2 + y");
  Expr same = substitute(e, {{Var("z"), make_int(1)}});
  CHECK(same.same_as(e));
}

TEST_CASE("the visitor sees every node kind of a lowered kernel") {
  Kernel k = compile(warp_sqrt(), {.device = Device::host()});
  int copies = 0, loops = 0;
  for_each_stmt(k.lowered()->body, [&](const Stmt& s) {
    copies += s.as<CopyBytesNode>() != nullptr;
    loops += s.as<ForNode>() != nullptr;
  });
  CHECK(copies == 4);  // 2 gmem<->smem copies, 2 register copies
  CHECK(loops == 5);
}

TEST_CASE("TX_DEBUG_IR prints the IR after every pass") {
  std::ostringstream log;
  lowering::LowerOptions opt;
  opt.debug = true;
  opt.log = &log;
  lowering::lower(warp_sqrt(), opt);
  for (const char* pass : {"lower_tile_ops", "lower_scope_ids", "flatten_buffers",
                           "legalize_low_precision", "simplify_stmt"})
    CHECK(contains(log.str(), std::string("IR after ") + pass));
}

TEST_CASE("C++ types map to dtypes at compile time (Boost.Hana)") {
  static_assert(dtype_of<float>() == f32);
  static_assert(dtype_of<std::uint8_t>() == u8);
  static_assert(!has_dtype<long double>);
  std::vector<std::int32_t> v{3, -7, 11, 42};
  Tensor t = Tensor::from_vector(v, {4}, Device::host());
  CHECK(t.dtype() == i32);
  CHECK(t.to_vector<std::int32_t>() == v);
  CHECK(t.to_doubles() == std::vector<double>{3, -7, 11, 42});
  CHECK_THROWS_WITH_AS(t.to_vector<float>(), doctest::Contains("holds int32, not float32"), Error);
}

TEST_CASE("a bool literal is a bool expression: Expr(false) is a condition, not the integer 0") {
  Expr f = false, t = true;
  CHECK(f.dtype() == tx::boolean);
  CHECK(t.dtype() == tx::boolean);
  Var n("n", i32);
  // Before, Expr(false) was i32 0 and this or failed with a dtype error.
  Expr cond = n > 3 || Expr(false);
  CHECK(cond.dtype() == tx::boolean);
  CHECK(Expr(7).dtype() == i32);
}
