// Issue 45's defects as a new user met them: each case failed on the tree
// before its fix.
#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <type_traits>

#include "test_support.hpp"
#include "tx/ops/ops.hpp"
#include "tx/tx.hpp"

using namespace tx;

namespace {

// A constant index past 2^31 elements: the flat offset of A(65536, 5) on a
// (65537, 32768) u8 buffer is 65536 * 32768 + 5 = 2^31 + 5, which must be
// folded in 64 bits (it was folded in 32 and wrapped to -2^31 + 5).
TEST_CASE("a constant index past 2^31 elements is folded exactly") {
  PrimFunc pf = T::prim_func("far_store", [&](Handle a) {
    auto A = T::match_buffer(a, {65537, 32768}, u8, std::nullopt, "A");
    T::cta_id({1});
    T::thread_id({1});
    A(65536, 5) = 7;
  });
  Kernel k = compile(pf, {.device = Device::host()});
  const std::string want = "2147483653";
  INFO(k.lowered_ir());
  CHECK(k.lowered_ir().find(want) != std::string::npos);
  CHECK(k.lowered_ir().find("-2147483643") == std::string::npos);
  INFO(k.cuda_source());
  CHECK(k.cuda_source().find(want) != std::string::npos);
  CHECK(k.cuda_source().find("-2147483643") == std::string::npos);
}

}  // namespace

namespace {

// Any integer type is an extent: `long long` (1LL << 40), `unsigned`,
// `size_t` were ambiguous between Extent's int and int64_t constructors.
TEST_CASE("extents of every integer type") {
  const std::size_t n = 96;
  const unsigned threads = 32;
  PrimFunc pf = T::prim_func("sized", [&](Handle a) {
    auto A = T::match_buffer(a, {n}, f32, std::nullopt, "A");
    auto bx = T::cta_id({3LL}, "bx");
    auto t = T::thread_id({static_cast<int>(threads)}, "t");
    A(bx * 32 + t) = 1.0f;
  });
  Kernel k = compile(pf, {.device = Device::host()});
  CHECK(k.tirx().find("(96,)") != std::string::npos);

  // Too large: the grid's own error, at the user's line.
  int line = 0;
  try {
    T::prim_func("huge_grid", [&](Handle a) {
      T::match_buffer(a, {16}, f32, std::nullopt, "A");
      line = __LINE__ + 1;
      T::cta_id({1LL << 40}, "bx");
    });
    FAIL("expected a tx error");
  } catch (const Error& e) {
    INFO(e.what());
    CHECK(e.op() == "T.cta_id");
    CHECK(e.loc().line == static_cast<unsigned>(line));
  }
  // An unsigned value that no signed 64-bit integer holds.
  try {
    T::prim_func("unsigned_extent", [&](Handle a) {
      line = __LINE__ + 1;
      T::match_buffer(a, {~std::uint64_t{0}}, f32, std::nullopt, "A");
    });
    FAIL("expected a tx error");
  } catch (const Error& e) {
    INFO(e.what());
    CHECK(e.op() == "T.match_buffer");
    CHECK(e.operand() == "A");
    CHECK(std::string(e.what()).find("18446744073709551615") != std::string::npos);
    CHECK(e.loc().line == static_cast<unsigned>(line));
  }
}

}  // namespace

namespace {

// A layout written one iter per dimension whose extents are not the
// buffer's: it covers as many elements, but it is another shape.
TEST_CASE("a layout whose extents differ from its buffer's shape is an error") {
  int line = 0;
  try {
    T::prim_func("transposed_layout", [&](Handle a) {
      line = __LINE__ + 1;
      T::match_buffer(a, {32, 8}, f32, TileLayout(S({8, 32})), "A");
    });
    FAIL("expected a tx error");
  } catch (const Error& e) {
    INFO(e.what());
    CHECK(e.operand() == "A");
    CHECK(e.loc().line == static_cast<unsigned>(line));
    CHECK(std::string(e.what()).find("has extents (8, 32) but the buffer's shape is (32, 8)") !=
          std::string::npos);
  }
  try {
    T::prim_func("square_on_tall", [&](Handle a) {
      T::match_buffer(a, {32, 8}, f32, std::nullopt, "A");
      T::cta_id({1});
      T::thread_id({32});
      line = __LINE__ + 1;
      T::alloc_buffer({32, 8}, f32, scope::shared, TileLayout(S({16, 16})), "S");
    });
    FAIL("expected a tx error");
  } catch (const Error& e) {
    INFO(e.what());
    CHECK(e.operand() == "S");
    CHECK(e.loc().line == static_cast<unsigned>(line));
    CHECK(std::string(e.what()).find("(16, 16)") != std::string::npos);
  }
  // Splits of the dimensions and a flat row-major iter stay accepted.
  CHECK_NOTHROW(T::prim_func("split", [&](Handle a) {
    T::match_buffer(a, {32, 8}, f32, TileLayout(S({32, 2, 4})), "A");
  }));
  CHECK_NOTHROW(T::prim_func("flat", [&](Handle a) {
    T::match_buffer(a, {32, 8}, f32, TileLayout(S({256})), "A");
  }));
}

// Tensor's errors name the user's line, like every other tx error.
TEST_CASE("Tensor errors carry the caller's source line") {
  std::vector<float> mine(16, 1.0f);
  int line = 0;
  try {
    line = __LINE__ + 1;
    Tensor::from_blob(mine.data(), {4, -4}, f32, Device::host());
    FAIL("expected a tx error");
  } catch (const Error& e) {
    INFO(e.what());
    CHECK(e.op() == "tx.Tensor.from_blob");
    CHECK(e.loc().line == static_cast<unsigned>(line));
    CHECK(std::string(e.loc().file).find("test_newcomer.cpp") != std::string::npos);
  }
  Tensor t = Tensor::from_blob(mine.data(), {16}, f32, Device::host());
  try {
    line = __LINE__ + 1;
    (void)t.reshape({5, 3});
    FAIL("expected a tx error");
  } catch (const Error& e) {
    INFO(e.what());
    CHECK(e.op() == "tx.Tensor.reshape");
    CHECK(e.loc().line == static_cast<unsigned>(line));
  }
  try {
    line = __LINE__ + 1;
    (void)Tensor::empty({-1}, f32, Device::host());
    FAIL("expected a tx error");
  } catch (const Error& e) {
    INFO(e.what());
    CHECK(e.op() == "tx.Tensor.empty");
    CHECK(e.loc().line == static_cast<unsigned>(line));
  }
}

}  // namespace

namespace {

// An op on a tensor past the kernels' 2^31 - 1 elements names the caller's
// operand and line, not the kernel's internals (a T::dim `n`, a buffer `x0`,
// a line inside tx). Built from shapes: no 8-GiB tensor is allocated.
TEST_CASE("an op on more than 2^31 elements names the caller's operand") {
  const std::int64_t rows = 65536, cols = 32769;  // 2^31 + 2^16 elements
  int line = 0;
  try {
    line = __LINE__ + 1;
    ops::Elementwise neg("neg", {{rows, cols}}, f32, {}, {}, Device::host());
    FAIL("expected a tx error");
  } catch (const Error& e) {
    INFO(e.what());
    CHECK(e.op() == "tx.ops.neg");
    CHECK(e.operand() == "x");
    CHECK(e.loc().line == static_cast<unsigned>(line));
    CHECK(std::string(e.loc().file).find("test_newcomer.cpp") != std::string::npos);
    CHECK(std::string(e.what()).find("2147549184 elements") != std::string::npos);
  }
  // Two inputs within the limit whose broadcast result is not.
  try {
    ops::Elementwise add("add", {{rows, 1}, {1, cols}}, f32, {}, {}, Device::host());
    FAIL("expected a tx error");
  } catch (const Error& e) {
    INFO(e.what());
    CHECK(e.op() == "tx.ops.add");
    CHECK(e.operand() == "out");
  }
}

}  // namespace

// Two variables compared in a kernel build the comparison: `owner == rank`
// was Var's C++ identity (a bool), so T::if_(owner == rank, ...) became
// `if False` with no error -- met writing all_gather_matmul.
TEST_CASE("comparing two T::let variables builds a DSL comparison, not a C++ bool") {
  PrimFunc pf = T::prim_func("compare_vars", [&](Handle a, Handle r) {
    auto A = T::match_buffer(a, {8}, i32, std::nullopt, "A");
    Var rank = T::match_scalar(r, i32, "rank");
    T::cta_id({1});
    auto tid = T::thread_id({8});
    Var owner = T::let(tid / 4, "owner");
    static_assert(!std::is_same_v<decltype(owner == rank), bool>);
    static_assert(!std::is_same_v<decltype(owner != rank), bool>);
    T::if_(owner == rank, [&] { A(tid) = 1; }).else_([&] { A(tid) = 2; });
  });
  const std::string ir = to_string(pf);
  INFO(ir);
  CHECK(ir.find("if owner == rank") != std::string::npos);
  Kernel k = compile(pf, {.device = Device::host()});
  Tensor a = Tensor::empty({8}, i32, Device::host());
  a.fill_bits(0x5a5a5a5a);
  k(a, 1);
  auto got = a.to_doubles();
  for (int i = 0; i < 8; ++i) CHECK(got[static_cast<std::size_t>(i)] == (i / 4 == 1 ? 1 : 2));
}

// A reduction's axis out of range is an error where the call is written,
// even in a branch the lowering proves dead (it was dropped unchecked:
// found by fuzz/tile_fuzzer, fuzz/corpus/regression-dead-branch-axes).
TEST_CASE("a reduction axis out of range is an error, reachable or not") {
  std::string message;
  try {
    T::prim_func("dead_axes", [&](Handle a, Handle b) {
      auto A = T::match_buffer(a, {4, 8}, f32, std::nullopt, "A");
      auto B = T::match_buffer(b, {4}, f32, std::nullopt, "B");
      T::cta_id({1});
      auto tid = T::thread_id({32});
      auto R = T::alloc_buffer({4, 8}, f32, scope::shared, std::nullopt, "R");
      auto S = T::alloc_buffer({4}, f32, scope::shared, std::nullopt, "S");
      Tx::cta::copy(R, A);
      T::if_(tid < 0, [&] { Tx::cta::sum(S, R, {.axes = {5}}); });
      Tx::cta::copy(B, S);
    });
  } catch (const Error& e) {
    message = e.what();
  }
  INFO(message);
  CHECK(message.find("Tx.cta.sum") != std::string::npos);
  CHECK(message.find("R") != std::string::npos);
  CHECK(message.find("axis 5 is out of range for a rank-2 source") != std::string::npos);
}
