// Bad input gets a tx error naming the op, the operand, the user's source
// line and the reason -- never a crash, never silently wrong code.
#include <doctest/doctest.h>

#include "test_support.hpp"
#include "tx/lowering/lower.hpp"
#include "tx/tx.hpp"

using namespace tx;

namespace {

struct Expect {
  std::string op, operand, reason;
  const int& line;  // set by the builder while it runs
};

// Builds and lowers `build`, which must fail as described.
template <class F>
void expect_error(F&& build, const Expect& want) {
  try {
    PrimFunc f = build();
    lowering::lower(f);
    FAIL("expected a tx error: " << want.reason);
  } catch (const Error& e) {
    INFO(e.what());
    CHECK(e.op() == want.op);
    if (!want.operand.empty()) CHECK(e.operand() == want.operand);
    CHECK(std::string(e.what()).find(want.reason) != std::string::npos);
    CHECK(e.loc().line == static_cast<unsigned>(want.line));
    CHECK(std::string(e.loc().file).find("test_errors.cpp") != std::string::npos);
  }
}

auto lane_rows = [] { return TileLayout(S({32, 8}, {1 * laneid, 1})); };

}  // namespace

TEST_CASE("wrong operand scope") {
  int line = 0;
  expect_error(
      [&] {
        return T::prim_func("scope", [&](Handle A_ptr) {
          auto A = T::match_buffer(A_ptr, {32, 8}, f32);
          T::thread_id({32});
          auto R = T::alloc_buffer({32, 8}, f32, scope::local, lane_rows());
          line = __LINE__ + 1;
          Tx::warp::exp(R, A);
        });
      },
      {"Tx.warp.exp", "A", "scope global != local", line});
}

TEST_CASE("a layout that does not match the shape") {
  int line = 0;
  expect_error(
      [&] {
        return T::prim_func("layout", [&]() {
          T::thread_id({32});
          line = __LINE__ + 1;
          auto R = T::alloc_buffer({32, 4}, f32, scope::local, lane_rows());
        });
      },
      {"T.alloc_buffer", "R", "covers 256 elements but the shape (32, 4) has 128", line});
}

TEST_CASE("a region out of bounds") {
  int line = 0;
  expect_error(
      [&] {
        return T::prim_func("oob", [&](Handle A_ptr) {
          auto A = T::match_buffer(A_ptr, {32, 8}, f32);
          T::thread_id({32});
          auto As = T::alloc_buffer({32, 8}, f32, scope::shared);
          line = __LINE__ + 1;
          Tx::warp::copy(As[region({0, 32}, {4, 12})], A[region({0, 32}, {0, 8})]);
        });
      },
      {"Tx.warp.copy", "As", "region [4:12] in dimension 1 is out of bounds of extent 8", line});
}

TEST_CASE("a dynamic region that may run out of bounds") {
  int line = 0;
  expect_error(
      [&] {
        return T::prim_func("dyn_oob", [&](Handle A_ptr) {
          auto A = T::match_buffer(A_ptr, {1000}, f32);
          auto bx = T::cta_id({4});
          T::thread_id({32});
          auto As = T::alloc_buffer({256}, f32, scope::shared);
          line = __LINE__ + 1;
          Tx::warp::copy(As, A[region(span(bx * 256, 256))]);
        });
      },
      {"Tx.warp.copy", "A", "may cover [0, 1024), outside the extent 1000", line});
}

TEST_CASE("a dtype mismatch") {
  int line = 0;
  expect_error(
      [&] {
        return T::prim_func("dtype", [&](Handle A_ptr) {
          auto A = T::match_buffer(A_ptr, {32, 8}, f16);
          T::thread_id({32});
          auto As = T::alloc_buffer({32, 8}, f32, scope::shared);
          line = __LINE__ + 1;
          Tx::warp::copy(As, A);
        });
      },
      {"Tx.warp.copy", "A", "dtype float16 differs from As's float32", line});
}

TEST_CASE("a warp op under a guard that splits the warp") {
  int line = 0;
  expect_error(
      [&] {
        return T::prim_func("split", [&](Handle A_ptr) {
          auto A = T::match_buffer(A_ptr, {32, 8}, f32);
          auto tid = T::thread_id({64});
          auto As = T::alloc_buffer({32, 8}, f32, scope::shared);
          T::if_(tid < 16, [&] {
            line = __LINE__ + 1;
            Tx::warp::copy(As, A);
          });
        });
      },
      {"Tx.warp.copy", "As", "not all threads of the warp are active", line});
}

TEST_CASE("a guard on the warp id keeps whole warps: accepted") {
  PrimFunc f = T::prim_func("warp_guard", [&](Handle A_ptr) {
    auto A = T::match_buffer(A_ptr, {32, 8}, f32);
    T::thread_id({64});
    auto warp = T::warp_id({2});
    auto As = T::alloc_buffer({32, 8}, f32, scope::shared);
    T::if_(warp == 1, [&] { Tx::warp::copy(As, A); });
  });
  CHECK_NOTHROW(lowering::lower(f));
}

// Register ops of a warpgroup whose threads meet only within a warp take a
// guard on the warp (the paged decode kernel's skipped rows); anything else
// under such a guard, or any op under a per-thread guard, is refused.
TEST_CASE("warpgroup register ops under a guard on the warp are accepted, shared ones refused") {
  auto build = [](int guard, bool shared_copy, int* line) {
    return T::prim_func("wg_guard", [&](Handle A_ptr) {
      auto A = T::match_buffer(A_ptr, {64, 64}, f32);
      T::warpgroup_id({1});
      auto tid = T::thread_id_in_wg({128});
      auto warp = T::warp_id_in_wg({4});
      auto S = T::alloc_buffer({64, 64}, f32, scope::local, frag::wgmma_c(64, 64));
      auto m = T::alloc_buffer({64, 1}, f32, scope::local, frag::wgmma_row(64));
      auto As = T::alloc_buffer({64, 64}, f32, scope::shared);
      Tx::warpgroup::copy(S, A);
      T::if_(guard == 0 ? Expr(warp * 16 < 20) : Expr(tid < 40), [&] {
        *line = __LINE__ + 1;
        Tx::warpgroup::max(m, S);
        Tx::warpgroup::exp2(S, S, {.bias = m.all()});
        if (shared_copy) {
          *line = __LINE__ + 1;
          Tx::warpgroup::copy(As, S);
        }
      });
    });
  };
  int line = 0;
  CHECK_NOTHROW(lowering::lower(build(0, false, &line), {.arch = "sm_90a"}));
  auto refused = [&](PrimFunc f, const Expect& want) {
    try {
      lowering::lower(f, {.arch = "sm_90a"});
      FAIL("expected a tx error: " << want.reason);
    } catch (const Error& e) {
      INFO(e.what());
      CHECK(e.op() == want.op);
      CHECK(e.operand() == want.operand);
      CHECK(std::string(e.what()).find(want.reason) != std::string::npos);
      CHECK(e.loc().line == static_cast<unsigned>(want.line));
    }
  };
  refused(build(1, false, &line), {"Tx.warpgroup.max", "m", "varies per thread", line});
  refused(build(0, true, &line),
          {"Tx.warpgroup.copy", "As", "varies per warp, which splits a warpgroup", line});
}

TEST_CASE("a barrier under a thread-dependent condition") {
  int line = 0;
  expect_error(
      [&] {
        return T::prim_func("bar", [&]() {
          auto tid = T::thread_id({64});
          T::if_(tid < 16, [&] {
            line = __LINE__ + 1;
            T::cuda::cta_sync();
          });
        });
      },
      {"T.cuda.cta_sync", "", "not every thread would reach it", line});
}

// A scheduler's running state in a local buffer (infer_local_uniformity):
// written alike by every thread, a loop and barriers may depend on it; a
// per-thread value stored into it makes it per-thread.
PrimFunc counted_rounds(bool per_thread_store, bool as_tile_operand, int* line) {
  return T::prim_func("counted", [&](Handle o_ptr, Handle n_ptr) {
    auto O = T::match_buffer(o_ptr, {128}, f32);
    auto Nb = T::match_buffer(n_ptr, {4}, i32);
    T::no_alias();
    T::device_entry();
    auto tid = T::thread_id({128});
    auto count = T::alloc_buffer({2}, i32, scope::local);
    count(0) = 0;
    for (Var e : T::serial(4, "e")) count(0) = count(0) + max(Nb(e), 0);
    if (per_thread_store) T::if_(tid == 3, [&] { count(0) = count(0) + 1; });
    if (as_tile_operand) Tx::thread::fill(count[region(span(0, 1))], 5);
    for (Var r : T::serial(min(count(0), 64), "r")) {
      O(tid) = cast(r, f32);
      *line = __LINE__ + 1;
      T::cuda::cta_sync();
    }
  });
}

TEST_CASE("a local buffer every thread writes alike is uniform: a loop around a barrier") {
  int line = 0;
  CHECK_NOTHROW(lowering::lower(counted_rounds(false, false, &line)));
  expect_error([&] { return counted_rounds(true, false, &line); },
               {"T.cuda.cta_sync", "", "not every thread would reach it", line});
  expect_error([&] { return counted_rounds(false, true, &line); },
               {"T.cuda.cta_sync", "", "not every thread would reach it", line});
}

TEST_CASE("a register layout that does not cover the warp") {
  int line = 0;
  expect_error(
      [&] {
        return T::prim_func("half", [&](Handle A_ptr) {
          auto A = T::match_buffer(A_ptr, {16, 8}, f32);
          T::thread_id({32});
          auto R =
              T::alloc_buffer({16, 8}, f32, scope::local, TileLayout(S({16, 8}, {1 * laneid, 1})));
          line = __LINE__ + 1;
          Tx::warp::copy(R, A);
        });
      },
      {"Tx.warp.copy", "R", "spreads over 16 threads", line});
}

TEST_CASE("a register layout on a thread axis the scope lacks") {
  int line = 0;
  expect_error(
      [&] {
        return T::prim_func("axis", [&](Handle A_ptr) {
          auto A = T::match_buffer(A_ptr, {32, 8}, f32);
          T::thread_id({32});
          auto R =
              T::alloc_buffer({32, 8}, f32, scope::local, TileLayout(S({32, 8}, {1 * warpid, 1})));
          line = __LINE__ + 1;
          Tx::warp::copy(R, A);
        });
      },
      {"Tx.warp.copy", "R", "axis warpid, which is not a thread axis of a warp scope", line});
}

TEST_CASE("shared memory cannot carry thread axes") {
  int line = 0;
  expect_error(
      [&] {
        return T::prim_func("smem_axes", [&]() {
          T::thread_id({32});
          line = __LINE__ + 1;
          auto As = T::alloc_buffer({32, 8}, f32, scope::shared, lane_rows());
        });
      },
      {"T.alloc_buffer", "As", "cannot use thread axes", line});
}

TEST_CASE("element access to a distributed register tile") {
  int line = 0;
  expect_error(
      [&] {
        return T::prim_func("elem", [&](Handle A_ptr) {
          auto A = T::match_buffer(A_ptr, {32, 8}, f32);
          auto tid = T::thread_id({32});
          auto R = T::alloc_buffer({32, 8}, f32, scope::local, lane_rows());
          line = __LINE__ + 1;
          R(tid, 0) = A(tid, 0);
        });
      },
      {"T.store", "R", "distributed over threads", line});
}

TEST_CASE("a replicated register tile is read, not written, element by element") {
  // Every lane holds a copy: a write by one index would make the copies differ.
  int line = 0;
  expect_error(
      [&] {
        return T::prim_func("replica_write", [&](Handle A_ptr) {
          auto A = T::match_buffer(A_ptr, {32}, f32);
          T::lane_id({32});
          auto tid = T::thread_id({32});
          auto M = T::alloc_buffer({1}, f32, scope::local, TileLayout(S({1}), R({32}, {laneid})));
          line = __LINE__ + 1;
          M(0) = A(tid);
        });
      },
      {"T.store", "M", "distributed over threads", line});
  // Reading each thread's own copy compiles (samples/softmax.cpp runs it).
  auto f = T::prim_func("replica_read", [&](Handle A_ptr) {
    auto A = T::match_buffer(A_ptr, {32}, f32);
    T::lane_id({32});
    auto tid = T::thread_id({32});
    auto lanes = T::alloc_buffer({32}, f32, scope::local, TileLayout(S({32}, {1 * laneid})));
    auto M = T::alloc_buffer({1}, f32, scope::local, TileLayout(S({1}), R({32}, {laneid})));
    Tx::warp::copy(lanes, A);
    Tx::warp::max(M, lanes, {.axes = {0}});
    A(tid) = A(tid) - M(0);
  });
  CHECK_NOTHROW(lowering::lower(f));
}

TEST_CASE("inconsistent scope ids") {
  int line = 0;
  expect_error(
      [&] {
        return T::prim_func("ids", [&]() {
          T::thread_id({64});
          line = __LINE__ + 1;
          T::warp_id({4});
        });
      },
      {"T.warp_id", "", "implies 128 threads per CTA", line});
}

TEST_CASE("a non-commutative op with a scalar on the left") {
  int line = 0;
  expect_error(
      [&] {
        return T::prim_func("sub", [&](Handle A_ptr) {
          auto A = T::match_buffer(A_ptr, {256}, f32);
          T::thread_id({256});
          auto As = T::alloc_buffer({256}, f32, scope::shared);
          Tx::cta::copy(As, A);
          line = __LINE__ + 1;
          Tx::cta::sub(As, 1.0, As);
        });
      },
      {"Tx.cta.sub", "", "sub is not commutative", line});
}

TEST_CASE("builders outside a kernel") {
  CHECK_THROWS_WITH_AS(T::thread_id({32}), doctest::Contains("outside T::prim_func"), Error);
}

TEST_CASE("launch checks the arguments against the kernel's buffers") {
  PrimFunc f = T::prim_func("args", [&](Handle A_ptr, Handle B_ptr) {
    auto A = T::match_buffer(A_ptr, {64}, f32);
    auto B = T::match_buffer(B_ptr, {64}, f32);
    auto tid = T::thread_id({64});
    B(tid) = A(tid);
  });
  Kernel k = compile(f, {.device = Device::host()});
  Tensor a = Tensor::from_doubles(test::random_values(64, f32), {64}, f32, Device::host());
  Tensor h = Tensor::from_doubles(test::random_values(64, f16), {64}, f16, Device::host());
  Tensor s = Tensor::from_doubles(test::random_values(32, f32), {32}, f32, Device::host());
  CHECK_THROWS_WITH_AS(k(a), doctest::Contains("takes 2 arguments, got 1"), Error);
  CHECK_THROWS_WITH_AS(k(a, h), doctest::Contains("operand B (argument 1): dtype float16"), Error);
  CHECK_THROWS_WITH_AS(k(s, a), doctest::Contains("shape (32,) but the kernel declares (64,)"),
                       Error);
  // The same element count in another shape is still the wrong shape; reshape says it on purpose.
  Tensor square = a.reshape({8, 8});
  CHECK_THROWS_WITH_AS(k(square, a),
                       doctest::Contains("shape (8, 8) but the kernel declares (64,)"), Error);
  if (runtime::host_jit_available()) {
    Tensor out = Tensor::empty({64}, f32, Device::host());
    out.fill_bits(0x7fc00001);
    CHECK_NOTHROW(k(square.reshape({64}), out));
    CHECK(out.to_bytes() == a.to_bytes());
  } else {
    MESSAGE("no host JIT in this build: the reshaped launch itself is not run");
  }
  CHECK_THROWS_WITH_AS(a.reshape({65}), doctest::Contains("holds 65 elements, the tensor 64"),
                       Error);
}

TEST_CASE("a guard on the CTA id narrows the range a dynamic region may cover") {
  // 4 CTAs of 256: the last one takes the tail with scalar code, the others
  // copy whole 256-element spans; without the guard the span could run past 1000.
  PrimFunc f = T::prim_func("tail", [&](Handle A_ptr, Handle B_ptr) {
    auto A = T::match_buffer(A_ptr, {1000}, f32);
    auto B = T::match_buffer(B_ptr, {1000}, f32);
    auto bx = T::cta_id({4});
    auto tid = T::thread_id({32});
    auto As = T::alloc_buffer({256}, f32, scope::shared);
    T::if_(bx < 3, [&] {
      Tx::warp::copy(As, A[region(span(bx * 256, 256))]);
      T::cuda::cta_sync();
      Tx::warp::copy(B[region(span(bx * 256, 256))], As);
    }).else_([&] {
      for (Var i : T::serial(8)) {
        T::if_(768 + i * 32 + tid < 1000, [&] { B(768 + i * 32 + tid) = A(768 + i * 32 + tid); });
      }
    });
  });
  CHECK_NOTHROW(lowering::lower(f));
}
