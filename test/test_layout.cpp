// Layout algebra: construction, apply, canonicalization, storage, slicing,
// joint refinement and thread covers -- each checked against its stated
// post-condition on random layouts as well as on the seeds' examples.
#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <set>
#include <random>

#include "test_support.hpp"
#include "tx/layout.hpp"
#include "tx/lowering/layout_algebra.hpp"
#include "tx/printer.hpp"

using namespace tx;
using namespace tx::lowering;

namespace {

std::int64_t loc_of(const Location& l, Axis a) { return l[static_cast<int>(a)]; }

// A random layout of `shape`: shard extents that factor the element count,
// random strides, some on thread axes.
TileLayout random_layout(std::mt19937_64& g, std::int64_t n, bool threads) {
  std::vector<std::int64_t> ext;
  std::int64_t rest = n;
  for (std::int64_t f : {2, 2, 2, 3, 2, 4, 2}) {
    if (rest % f == 0 && g() % 2) {
      ext.push_back(f);
      rest /= f;
    }
  }
  if (rest > 1) ext.push_back(rest);
  std::shuffle(ext.begin(), ext.end(), g);
  std::vector<AxisStride> strides;
  for (std::size_t i = 0; i < ext.size(); ++i) {
    Axis a = threads && g() % 3 == 0 ? Axis::laneid : Axis::m;
    strides.push_back(AxisStride(static_cast<std::int64_t>(1 + g() % 7), a));
  }
  return TileLayout(S(ext, strides));
}

}  // namespace

TEST_CASE("S builds row-major layouts and prints in the seeds' form") {
  TileLayout l(S({32, 8}));
  CHECK(l.str() == "S[(32, 8) : (8, 1)]");
  TileLayout r(S({32, 8}, {1 * laneid, 1}));
  CHECK(r.str() == "S[(32, 8) : (1@laneid, 1)]");
  TileLayout rep(S({4}), R({32}, {1 * laneid}));
  CHECK(rep.str() == "S[(4,) : (1,)] + R[(32,) : (1@laneid,)]");
  CHECK(r.has_thread_axes());
  CHECK_FALSE(l.has_thread_axes());
}

TEST_CASE("apply: lane i owns row i, register j") {
  TileLayout r(S({32, 8}, {1 * laneid, 1}));
  auto& g = test::rng();
  for (int k = 0; k < 50; ++k) {
    std::int64_t i = static_cast<std::int64_t>(g() % 32), j = static_cast<std::int64_t>(g() % 8);
    auto locs = r.apply({i, j}, {32, 8});
    REQUIRE(locs.size() == 1);
    CHECK(loc_of(locs[0], Axis::laneid) == i);
    CHECK(loc_of(locs[0], Axis::m) == j);
  }
}

TEST_CASE("apply: replicas put one element in every lane") {
  TileLayout d(S({4}), R({32}, {1 * laneid}));
  auto locs = d.apply({3}, {4});
  REQUIRE(locs.size() == 32);
  std::set<std::int64_t> lanes;
  for (auto& l : locs) {
    CHECK(loc_of(l, Axis::m) == 3);
    lanes.insert(loc_of(l, Axis::laneid));
  }
  CHECK(lanes.size() == 32);
}

TEST_CASE("canonical drops unit iters, fuses contiguous ones, keeps apply") {
  TileLayout l(S({4, 1, 8}, {8, 5, 1}));
  TileLayout c = l.canonical();
  CHECK(c.shard().size() == 1);
  CHECK(c.shard()[0] == Iter{32, 1, Axis::m});
  auto& g = test::rng();
  for (int k = 0; k < 200; ++k) {
    std::int64_t n = 1 + static_cast<std::int64_t>(g() % 96);
    TileLayout x = random_layout(g, n, true);
    TileLayout y = x.canonical();
    for (std::int64_t i = 0; i < n; ++i) REQUIRE(x.apply_linear(i) == y.apply_linear(i));
  }
}

TEST_CASE("storage view: a lane's registers") {
  TileLayout r(S({32, 8}, {1 * laneid, 1}));
  CHECK(r.storage().cosize() == 8);
  TileLayout r16(S({32, 16}, {1 * laneid, 1}));
  CHECK(r16.storage().cosize() == 16);
  TileLayout two_rows(S({16, 2, 8}, {1 * laneid, 8, 1}));
  CHECK(two_rows.storage().cosize() == 16);
}

TEST_CASE("mismatch explains a layout that does not fit the shape") {
  TileLayout l(S({32, 8}));
  CHECK_FALSE(l.mismatch({32, 8}));
  auto why = l.mismatch({32, 4});
  REQUIRE(why);
  CHECK(why->find("covers 256 elements") != std::string::npos);
  CHECK(why->find("(32, 4) has 128") != std::string::npos);
}

TEST_CASE("group_by_dims: per-dimension iters multiply to the dimension") {
  auto& g = test::rng();
  for (int k = 0; k < 200; ++k) {
    std::vector<std::int64_t> shape;
    std::int64_t n = 1;
    for (int d = 0; d < 1 + static_cast<int>(g() % 3); ++d) {
      shape.push_back(1 + static_cast<std::int64_t>(g() % 8));
      n *= shape.back();
    }
    TileLayout l(S(shape));  // row-major always groups
    auto dims = group_by_dims(l.shard(), shape);
    REQUIRE(dims);
    for (std::size_t d = 0; d < shape.size(); ++d) {
      std::int64_t p = 1;
      for (auto& it : (*dims)[d]) p *= it.extent;
      CHECK(p == shape[d]);
    }
  }
  // An iter of extent 16 over a (4, 8) shape splits into 2 x 8.
  auto dims = group_by_dims({Iter{2, 8, Axis::m}, Iter{16, 1, Axis::m}}, {4, 8});
  REQUIRE(dims);
  CHECK((*dims)[1].size() == 1);
  CHECK((*dims)[0].size() == 2);
  // Extent 3 cannot straddle dimensions of 2 and 4.
  std::string why;
  CHECK(group_by_dims({Iter{2, 3, Axis::m}, Iter{3, 1, Axis::m}}, {2, 3}, &why));
  CHECK_FALSE(group_by_dims({Iter{3, 2, Axis::m}, Iter{2, 1, Axis::m}}, {2, 3}, &why));
  CHECK(why.find("straddles") != std::string::npos);
}

TEST_CASE("region_layout: a region's locations are the buffer's, shifted") {
  auto& g = test::rng();
  Env env;
  for (int k = 0; k < 200; ++k) {
    std::vector<std::int64_t> shape = {static_cast<std::int64_t>(2 + g() % 6) * 2,
                                       static_cast<std::int64_t>(1 + g() % 4) * 4};
    std::vector<AxisStride> strides = {AxisStride(shape[1] + static_cast<std::int64_t>(g() % 3)), 1};
    Buffer b = make_buffer("A", f32, shape, MemScope::shared, TileLayout(S(shape, strides)), {});
    BufferRegion r{b, {}};
    std::vector<std::int64_t> start, ext;
    for (auto e : shape) {
      std::int64_t s = static_cast<std::int64_t>(g() % static_cast<std::uint64_t>(e));
      std::int64_t x = 1 + static_cast<std::int64_t>(g() % static_cast<std::uint64_t>(e - s));
      start.push_back(s);
      ext.push_back(x);
      r.ranges.push_back({make_int(s), x});
    }
    auto rl = region_layout(r, env);
    REQUIRE(rl);
    auto off = as_const_int(simplify(rl->mem_offset));
    REQUIRE(off);
    TileLayout sub(rl->flat());
    for (std::int64_t i = 0; i < ext[0]; ++i)
      for (std::int64_t j = 0; j < ext[1]; ++j) {
        auto want = b->layout.apply({start[0] + i, start[1] + j}, shape);
        auto got = sub.apply({i * ext[1] + j}, {ext[0] * ext[1]});
        REQUIRE(loc_of(got[0], Axis::m) + *off == loc_of(want[0], Axis::m));
      }
  }
}

TEST_CASE("joint_refine: every operand's layout is reproduced by the joint iters") {
  auto& g = test::rng();
  int refined = 0;
  for (int k = 0; k < 300; ++k) {
    std::int64_t n = 1 + static_cast<std::int64_t>(g() % 64);
    TileLayout a = random_layout(g, n, true), b = random_layout(g, n, false);
    std::string why;
    auto j = joint_refine({a.shard(), b.shard()}, n, &why);
    if (!j) {
      CHECK(why.find("do not nest") != std::string::npos);
      continue;
    }
    ++refined;
    for (std::int64_t x = 0; x < n; ++x) {
      Location la{}, lb{};
      std::int64_t inner = 1;
      for (std::size_t t = j->size(); t-- > 0;) {
        const JointIter& it = (*j)[t];
        std::int64_t c = (x / inner) % it.extent;
        la[static_cast<int>(it.parts[0].axis)] += c * it.parts[0].stride;
        lb[static_cast<int>(it.parts[1].axis)] += c * it.parts[1].stride;
        inner *= it.extent;
      }
      REQUIRE(la == a.apply_linear(x)[0]);
      REQUIRE(lb == b.apply_linear(x)[0]);
    }
  }
  CHECK(refined > 50);
}

TEST_CASE("coalesce fuses iters contiguous for every operand") {
  std::vector<JointIter> its = {{4, {Iter{4, 8, Axis::m}, Iter{4, 8, Axis::m}}},
                                {8, {Iter{8, 1, Axis::m}, Iter{8, 1, Axis::m}}}};
  auto c = coalesce(its);
  REQUIRE(c.size() == 1);
  CHECK(c[0].extent == 32);
  its[0].parts[1].stride = 16;  // second operand is padded: no longer fusable
  CHECK(coalesce(its).size() == 2);
}

TEST_CASE("thread covers: one-to-one or a reason") {
  CHECK_FALSE(check_thread_cover({{32, 1, false}}, 32, "L"));
  CHECK_FALSE(check_thread_cover({{8, 4, false}, {4, 1, true}}, 32, "L"));
  auto half = check_thread_cover({{16, 1, false}}, 32, "L");
  REQUIRE(half);
  CHECK(half->find("spreads over 16 threads") != std::string::npos);
  auto gap = check_thread_cover({{16, 2, false}}, 32, "L");
  REQUIRE(gap);
  CHECK(gap->find("one-to-one") != std::string::npos);
  CHECK(thread_axis_multiplier(Axis::warpid, ExecScope::cta) == 32);
  CHECK_FALSE(thread_axis_multiplier(Axis::warpid, ExecScope::warp));
  CHECK(thread_axis_multiplier(Axis::wid_in_wg, ExecScope::warpgroup) == 32);
}

TEST_CASE("broadcast shapes follow NumPy") {
  CHECK(broadcast_shapes({2, 512, 768}, {1, 1, 768}) == Extents{2, 512, 768});
  CHECK(broadcast_shapes({4, 1, 8}, {1, 8, 1}) == Extents{4, 8, 8});
  CHECK(broadcast_shapes({64, 1}, {1, 128}) == Extents{64, 128});
  CHECK_FALSE(broadcast_shapes({3}, {4}));
}
