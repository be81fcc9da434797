// Swizzled layouts: the laws of Sw<bits, base, shift> (exhaustively for
// small parameters), the swizzle carried through canonical form, storage,
// cosize and printing, region_layout's post-condition on swizzled buffers,
// the expression form against apply, bank-conflict freedom of the atoms
// layouts::swizzled_tiles picks, and the reasons where a swizzle is refused.
#include <doctest/doctest.h>

#include <functional>
#include <set>

#include "test_support.hpp"
#include "tx/fragments.hpp"
#include "tx/layout.hpp"
#include "tx/lowering/layout_algebra.hpp"

using namespace tx;
using namespace tx::lowering;

namespace {

// Every valid swizzle with parameters up to 4.
std::vector<Swizzle> small_swizzles() {
  std::vector<Swizzle> out;
  for (int bits = 0; bits <= 4; ++bits)
    for (int base = 0; base <= 4; ++base)
      for (int shift = bits; shift <= 4; ++shift) out.push_back(make_swizzle(bits, base, shift));
  return out;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("swizzle laws: involution, block bijection, fixed bits, translation") {
  for (const Swizzle& sw : small_swizzles()) {
    CAPTURE(sw.str());
    const std::int64_t P = sw.period();
    const std::int64_t low = (std::int64_t{1} << sw.base) - 1;
    const std::int64_t moved = ((std::int64_t{1} << sw.bits) - 1) << sw.base;
    std::set<std::int64_t> image;
    for (std::int64_t x = 0; x < 3 * P; ++x) {
      const std::int64_t y = sw.apply(x);
      REQUIRE(sw.apply(y) == x);                  // sw o sw = id
      REQUIRE((y & low) == (x & low));            // chunks of 2^base stay whole
      REQUIRE((y & ~moved) == (x & ~moved));      // only bits [base, base + bits) change
      REQUIRE(y / sw.span() == x / sw.span());    // never leaves its 2^(base + bits) block
      REQUIRE(sw.apply(x + 5 * P) == y + 5 * P);  // a stage offset commutes
      const std::int64_t src = (x >> (sw.base + sw.shift)) & ((std::int64_t{1} << sw.bits) - 1);
      if (src == 0) REQUIRE(y == x);  // rows whose selector bits are 0 are untouched
      if (x < P) image.insert(y);
    }
    // A bijection of [0, P) onto itself.
    CHECK(static_cast<std::int64_t>(image.size()) == P);
    CHECK(*image.rbegin() == P - 1);
  }
}

TEST_CASE("swizzle_expr computes what apply computes") {
  for (const Swizzle& sw : small_swizzles()) {
    CAPTURE(sw.str());
    Var x("x", i32);
    Expr e = swizzle_expr(sw, x);
    for (std::int64_t v = 0; v < 4 * sw.period(); v += 1 + v / 64) {
      auto got = evaluate_int(e, [&](const VarNode* n) -> std::optional<std::int64_t> {
        if (n == x.get()) return v;
        return std::nullopt;
      });
      REQUIRE(got);
      REQUIRE(*got == sw.apply(v));
    }
    // Constants fold.
    CHECK(as_const_int(simplify(swizzle_expr(sw, c32(77)))) == sw.apply(77));
  }
}

TEST_CASE("a swizzled TileLayout: apply, canonical form, storage, cosize, printing") {
  TileLayout plain(S({64, 64}));
  TileLayout l = plain.swizzled(make_swizzle(3, 3, 3));
  CHECK(l.str() == "Sw<3,3,3>(S[(64, 64) : (64, 1)])");
  CHECK(l.swizzle() == Swizzle{3, 3, 3});
  CHECK(l.unswizzled() == plain);
  CHECK(plain.swizzled(make_swizzle(0, 3, 3)) == plain);  // 0 bits: the identity, dropped
  for (std::int64_t x = 0; x < l.size(); ++x)
    REQUIRE(l.apply_linear(x)[0][0] == l.swizzle()->apply(plain.apply_linear(x)[0][0]));
  // canonical() fuses the iters and keeps the swizzle; apply is unchanged.
  TileLayout split = TileLayout(S({64, 1, 8, 8}, {64, 3, 8, 1})).swizzled(make_swizzle(3, 3, 3));
  TileLayout c = split.canonical();
  CHECK(c.str() == "Sw<3,3,3>(S[(4096,) : (1,)])");
  for (std::int64_t x = 0; x < split.size(); ++x)
    REQUIRE(c.apply_linear(x) == split.apply_linear(x));
  CHECK(split.storage().swizzle() == split.swizzle());
  // cosize rounds up to the block sw never leaves.
  TileLayout odd = TileLayout(S({5, 16})).swizzled(make_swizzle(2, 2, 3));  // span 16
  CHECK(odd.cosize() == 80);
  TileLayout ragged = TileLayout(S({5, 12}, {16, 1})).swizzled(make_swizzle(2, 2, 3));
  CHECK(ragged.cosize() == 80);
  for (std::int64_t x = 0; x < ragged.size(); ++x) REQUIRE(ragged.apply_linear(x)[0][0] < 80);
  // With thread axes, only memory is swizzled.
  TileLayout thr = TileLayout(S({32, 8}, {1 * laneid, 1})).swizzled(make_swizzle(1, 1, 2));
  for (std::int64_t x = 0; x < thr.size(); ++x) REQUIRE(thr.apply_linear(x)[0][1] == x / 8);
}

TEST_CASE("make_swizzle and buffers refuse what a swizzle cannot be") {
  CHECK(error_of([] { make_swizzle(3, 3, 2); }).find("shift 2 is below bits 3") !=
        std::string::npos);
  CHECK(error_of([] { make_swizzle(-1, 3, 3); }).find("not be negative") != std::string::npos);
  CHECK(error_of([] { make_swizzle(10, 10, 11); }).find("2^30") != std::string::npos);
  TileLayout l = TileLayout(S({8, 64})).swizzled(make_swizzle(3, 3, 3));
  CHECK(error_of([&] {
          make_buffer("R", bf16, {8, 64}, MemScope::local, l, {});
        }).find("is for shared memory") != std::string::npos);
  CHECK(error_of([&] {
          make_buffer("G", bf16, {8, 64}, MemScope::global, l, {});
        }).find("is for shared memory") != std::string::npos);
  Buffer s = make_buffer("As", bf16, {8, 64}, MemScope::shared, l, {});
  // A variant that forms addresses by hand does not get a swizzled region.
  std::string why;
  Env env;
  CHECK_FALSE(region_layout(BufferRegion{s, {{make_int(0), 8}, {make_int(0), 64}}}, env, &why));
  CHECK(why.find("swizzled layout Sw<3,3,3> of As") != std::string::npos);
}

TEST_CASE("region_layout on a swizzled buffer: address(l, inner(c)) is the buffer's place") {
  auto& g = test::rng();
  Env env;
  for (int k = 0; k < 200; ++k) {
    const std::int64_t stages = 1 + static_cast<std::int64_t>(g() % 3);
    const std::int64_t rows = 8 * (1 + static_cast<std::int64_t>(g() % 4));
    const std::int64_t cols = std::int64_t{16} << (g() % 4);  // 16 .. 128 bf16: 32 .. 256 B
    std::vector<std::int64_t> shape = {stages, rows, cols};
    Buffer b =
        make_buffer("T", bf16, shape, MemScope::shared, layouts::swizzled_tiles(shape, bf16), {});
    CAPTURE(b->layout.str());
    // A region on chunk boundaries: a stage, 8-row blocks, 8-column blocks.
    const std::int64_t s0 = static_cast<std::int64_t>(g() % static_cast<std::uint64_t>(stages));
    const std::int64_t r0 =
        8 * static_cast<std::int64_t>(g() % static_cast<std::uint64_t>(rows / 8));
    const std::int64_t nr =
        8 * (1 + static_cast<std::int64_t>(g() % static_cast<std::uint64_t>((rows - r0) / 8)));
    const std::int64_t c0 =
        8 * static_cast<std::int64_t>(g() % static_cast<std::uint64_t>(cols / 8));
    const std::int64_t nc = 8;
    BufferRegion r{b, {{make_int(s0), 1}, {make_int(r0), nr}, {make_int(c0), nc}}};
    std::string why;
    auto rl = region_layout(r, env, &why, {.allow_swizzle = true});
    REQUIRE_MESSAGE(rl, why);
    REQUIRE(rl->swizzle == b->layout.swizzle());
    TileLayout inner(rl->flat());
    for (std::int64_t i = 0; i < nr; ++i)
      for (std::int64_t j = 0; j < nc; ++j) {
        const std::int64_t want = b->layout.apply({s0, r0 + i, c0 + j}, shape)[0][0];
        const std::int64_t rel = inner.apply_linear(i * nc + j)[0][0];
        auto got = as_const_int(simplify(address(*rl, c32(rel))));
        REQUIRE(got);
        REQUIRE(*got == want);
      }
  }
}

TEST_CASE("swizzled_tiles: ldmatrix rows and cp.async chunks hit 8 distinct bank groups") {
  struct Case {
    std::int64_t rows, cols;
    DType t;
    std::string want;
  };
  const std::vector<Case> cases = {
      {64, 16, bf16, "Sw<1,3,3>(S[(64, 16) : (16, 1)])"},
      {128, 32, bf16, "Sw<2,3,3>(S[(128, 32) : (32, 1)])"},
      {32, 64, f16, "Sw<3,3,3>(S[(32, 64) : (64, 1)])"},
      {32, 128, bf16, "Sw<3,3,3>(S[(32, 2, 64) : (64, 2048, 1)])"},
      {32, 256, bf16, "Sw<3,3,3>(S[(32, 4, 64) : (64, 2048, 1)])"},
      {64, 64, f8e4m3, "Sw<2,4,3>(S[(64, 64) : (64, 1)])"},
      {16, 32, f32, "Sw<3,2,3>(S[(16, 32) : (32, 1)])"},
  };
  for (const Case& c : cases) {
    TileLayout l = layouts::swizzled_tiles({c.rows, c.cols}, c.t);
    CAPTURE(l.str());
    CHECK(l.str() == c.want);
    const std::int64_t chunk = 16 / c.t.bytes();
    // The byte address of (row, chunk column).
    auto bytes = [&](std::int64_t r, std::int64_t ch) {
      return l.apply({r, ch * chunk}, {c.rows, c.cols})[0][0] * c.t.bytes();
    };
    // ldmatrix: 8 consecutive rows of one chunk column.
    for (std::int64_t r0 = 0; r0 + 8 <= c.rows; r0 += 8)
      for (std::int64_t ch = 0; ch < c.cols / chunk; ++ch) {
        std::set<std::int64_t> groups;
        for (std::int64_t r = r0; r < r0 + 8; ++r) groups.insert(bytes(r, ch) % 128 / 16);
        REQUIRE(groups.size() == 8);
      }
    // cp.async: 8 consecutive chunks in row-major order (a quarter warp).
    const std::int64_t per_row = c.cols / chunk;
    for (std::int64_t q = 0; q + 8 <= c.rows * per_row; q += 8) {
      std::set<std::int64_t> groups;
      for (std::int64_t i = q; i < q + 8; ++i)
        groups.insert(bytes(i / per_row, i % per_row) % 128 / 16);
      REQUIRE(groups.size() == 8);
    }
  }
  CHECK(error_of([] {
          layouts::swizzled_tiles({8, 8}, bf16);
        }).find("rows of 16 bytes") != std::string::npos);
  CHECK(error_of([] {
          layouts::swizzled_tiles({4, 256}, bf16);
        }).find("and of 8 rows") != std::string::npos);
}
