// The tile-op table (tx/tile_op_table.hpp): every op defined once, and what
// reads it -- the builders, make_tile_call's checks, dispatch, the docs
// index. A toy op added through a table row alone gets all of them.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "test_support.hpp"
#include "tx/lowering/dispatch.hpp"
#include "tx/lowering/lower.hpp"
#include "tx/tx.hpp"

// A toy op, as a library of tile ops built on tx (or the attention work)
// would add one: dst = 2 * (x * scale + bias), elementwise, float tiles,
// at warp and cta scope only. One row; nothing else in tx knows it.
// clang-format off
#define TOY_TILE_OPS(X)                                                                          \
  X(toy_twice, elementwise, dst_src, TX_SCOPE(warp) | TX_SCOPE(cta), TX_ATTR(scale_bias),        \
    float_only, 0, "variants/elementwise_reg.md", "2 (x * scale + bias), a test's toy op",     \
    TX_MATH(make_binary(BinOp::Add, x[0], x[0])), TX_NO_COMBINE)
// clang-format on

namespace toy {
TX_DEFINE_TILE_BUILDERS(TOY_TILE_OPS)
}  // namespace toy

using namespace tx;

namespace {

void add_toy_ops() {
  static const bool added = [] {
    add_tile_ops({TOY_TILE_OPS(TX_TILE_OP_DEF)});
    return true;
  }();
  (void)added;
}

// Y = toy_twice(X) + ... over a 32 x 32 tile staged in shared memory.
PrimFunc toy_kernel(DType t = f32) {
  auto full = region({0, 32}, {0, 32});
  return T::prim_func("toy_kernel", [&](Handle X_ptr, Handle Y_ptr) {
    auto X = T::match_buffer(X_ptr, {32, 32}, t);
    auto Y = T::match_buffer(Y_ptr, {32, 32}, t);
    T::device_entry();
    T::cta_id({1});
    T::thread_id({256});
    auto S = T::alloc_buffer({32, 32}, t, scope::shared);
    Tx::cta::copy(S[full], X[full]);
    toy::cta::toy_twice(S[full], S[full], {.bias = 0.5f});
    Tx::cta::copy(Y[full], S[full]);
  });
}

std::string variant_of(const lowering::LoweredKernel& k, const std::string& op) {
  for (const auto& r : k.dispatched)
    if (r.call.find("." + op + "(") != std::string::npos) return r.variant;
  return "(none)";
}

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

TEST_CASE("the table: every op has its builders' row, variants on each target, a docs page") {
  auto ops = tile_ops();
  REQUIRE(ops.size() >= 21);
  CHECK(ops.front()->name == "copy");
  for (const TileOpDef* d : ops) {
    CAPTURE(d->name);
    CHECK(find_tile_op(d->name) == d);
    CHECK(!d->operands().empty());
    CHECK(d->operands()[0].written);
    CHECK(std::filesystem::exists(std::filesystem::path(__FILE__).parent_path().parent_path() /
                                  "docs" / d->doc));
    if (d->family == "elementwise") CHECK(static_cast<bool>(d->math));
    if (d->family == "reduction") CHECK(d->combine.has_value());
    for (auto target : {lowering::TargetKind::cuda, lowering::TargetKind::host})
      CHECK(!lowering::Registry::global().variants(d->name, target).empty());
  }
  CHECK(find_tile_op("no_such_op") == nullptr);
  CHECK(ops_accepting(TileAttr::partial) == "copy, copy_async and atomic_add");
  CHECK(ops_accepting(TileAttr::transpose_b) == "gemm");
}

TEST_CASE("docs/tile_ops.md is the table's index") {
  const auto page =
      std::filesystem::path(__FILE__).parent_path().parent_path() / "docs" / "tile_ops.md";
  std::string want;
  {
    // The index of tx's own rows (a toy op added by another case is not on the page).
    std::string all = tile_op_index_markdown();
    std::istringstream lines(all);
    for (std::string line; std::getline(lines, line);)
      if (line.find("`toy_") == std::string::npos) want += line + "\n";
  }
  INFO("regenerate docs/tile_ops.md from tx::tile_op_index_markdown()");
  CHECK(read_file(page) == want);
}

TEST_CASE("make_tile_call checks a call against its row") {
  auto bad = [](const std::function<void()>& body, const char* why) {
    CHECK_THROWS_WITH_AS(T::prim_func("bad",
                                      [&](Handle a) {
                                        (void)T::match_buffer(a, {32}, f32);
                                        T::thread_id({32});
                                        body();
                                      }),
                         doctest::Contains(why), Error);
  };
  auto buf = [] { return T::alloc_buffer({32}, f32, scope::shared); };
  bad([&] { Tx::sqrt(buf().all(), buf().all(), {.partial = true}); },
      "partial= (tiles reaching past a tensor's end) applies to copy, copy_async and atomic_add");
  // The generic builder (what every Tx:: builder calls) with an op's roles wrong.
  bad([&] { detail::emit_tile("nonexistent", ExecScope::warp, {buf().all()}, {}, {}); },
      "unknown tile primitive 'nonexistent'");
  bad(
      [&] {
        detail::emit_tile("add", ExecScope::warp, {buf().all(), buf().all()}, {}, {});
      },
      "add takes 3 operands (dst, a, b), got 2");
  bad(
      [&] {
        detail::emit_tile("fill", ExecScope::warp, {buf().all(), buf().all()}, {}, {});
      },
      "operand value must be a scalar");
  bad(
      [&] {
        detail::emit_tile("copy", ExecScope::warp, {buf().all(), make_float(1.0, f32)}, {}, {});
      },
      "operand src must be a tile");
}

TEST_CASE("a toy op added through the table alone: builder, checks, dispatch, docs") {
  add_toy_ops();
  const TileOpDef* def = find_tile_op("toy_twice");
  REQUIRE(def != nullptr);
  CHECK(def->family == "elementwise");
  // Its docs entry.
  CHECK(tile_op_index_markdown().find("| `toy_twice` | elementwise | dst, src | warp, cta |") !=
        std::string::npos);
  // Its builder records a tile call; dispatch lowers it through the
  // elementwise family's variants, on both targets.
  PrimFunc f = toy_kernel();
  CHECK(to_string(f).find("Tx.cta.toy_twice(") != std::string::npos);
  CHECK(variant_of(lowering::lower(f), "toy_twice") == "elementwise/smem");
  CHECK(variant_of(lowering::lower(f, {.host = true}), "toy_twice") == "elementwise/smem");
  auto ops = lowering::Registry::global().ops();
  CHECK(std::find(ops.begin(), ops.end(), "toy_twice") != ops.end());
  // Its checks: the scopes, the dtype rule and the attributes of its row.
  auto bad = [](DType t, const std::function<void(TileBuffer)>& body, const char* why) {
    auto kernel = [&] {
      return T::prim_func("bad", [&](Handle a) {
        (void)T::match_buffer(a, {32}, f32);
        T::thread_id({32});
        body(T::alloc_buffer({32}, t, scope::local));
      });
    };
    CHECK_THROWS_WITH_AS(lowering::lower(kernel()), doctest::Contains(why), Error);
  };
  bad(
      f32, [](TileBuffer R) { toy::thread::toy_twice(R, R); },
      "toy_twice does not run at thread scope");
  bad(
      i32, [](TileBuffer R) { toy::warp::toy_twice(R, R); }, "toy_twice needs a float dtype");
  bad(
      f32, [](TileBuffer R) { toy::warp::toy_twice(R, R, {.accum = true}); },
      "toy_twice takes no axes/accum");
  // A second row of the same name is refused.
  CHECK_THROWS_WITH_AS(add_tile_ops({TOY_TILE_OPS(TX_TILE_OP_DEF)}),
                       doctest::Contains("already defined"), Error);
  // It runs: 2 (x + 0.5) on the host.
  if (!runtime::host_jit_available()) return;
  Kernel k = compile(f, {.device = Device::host()});
  auto x = test::random_values(32 * 32, f32);
  Tensor X = Tensor::from_doubles(x, {32, 32}, f32, Device::host());
  Tensor Y = Tensor::empty({32, 32}, f32, Device::host());
  Y.fill_bits(test::poison_bits(f32));
  k(X, Y);
  std::vector<double> y = Y.to_doubles();
  for (std::size_t i = 0; i < y.size(); ++i)
    CHECK(y[i] == static_cast<float>(2 * static_cast<double>(static_cast<float>(x[i] + 0.5))));
}
