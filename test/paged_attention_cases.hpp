// tx::ops::paged_attention and reshape_and_cache on the device
// TX_PAGED_DEVICE (host_paged_attention.cpp: the host JIT, the kernels as
// fibers; gpu_paged_attention.cpp: an sm_90 GPU), against float64 with the
// bound of attention_cases.hpp: contexts of 1, page - 1, page + 1 tokens and
// longer ones mixed in one batch, pages in random order, GQA ratios 1 / 4 /
// 8, several query tokens, fp8 caches with scales, the split and unsplit
// paths; the rows of a page past its context poisoned with NaN (the kernel
// must not let them through P = 0); the documented results of bad lengths
// and page ids; the errors.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "attention_cases.hpp"
#include "test_support.hpp"
#include "tx/ops/paged_attention.hpp"
#include "tx/tx.hpp"

#ifndef TX_PAGED_DEVICE
#error "define TX_PAGED_DEVICE before including paged_attention_cases.hpp"
#endif

namespace pagedcase {

using namespace tx;
using tx::test::random_values;

inline Device device() { return TX_PAGED_DEVICE; }

struct Case {
  std::int64_t TQ = 1, H = 4, HK = 1, D = 64, P = 16;
  std::vector<std::int64_t> ctx{};  // per sequence, as passed (may be bad)
  DType t = bf16, cache_t = bf16;
  std::int64_t max_pages = 0;  // 0: enough for the longest context
  std::int64_t splits = 0;
  int ctas_per_sm = 0;
  double k_scale = 1, v_scale = 1;
  // Table entries to break: (sequence, page column, id).
  std::vector<std::array<std::int64_t, 3>> bad_pages{};
};

struct Built {
  Tensor q, kc, vc, table, lens;
  std::vector<double> qv, kv, vv;  // q (B, TQ, H, D); caches (pages, P, HK, D), stored values
  std::vector<std::int32_t> tab;
  std::int64_t pages = 0, max_pages = 0;
};

// Random q, a cache whose used rows are random (fresh each call) and whose
// unused rows are NaN, the sequences' pages scattered in random order.
inline Built build(const Case& c, std::uint64_t seed = 1) {
  Built x;
  const std::int64_t B = static_cast<std::int64_t>(c.ctx.size());
  std::int64_t longest = 1;
  for (auto n : c.ctx) longest = std::max(longest, n);
  x.max_pages = c.max_pages ? c.max_pages : (longest + c.P - 1) / c.P;
  x.pages = B * x.max_pages + 3;
  std::vector<std::int32_t> ids(static_cast<std::size_t>(x.pages));
  std::iota(ids.begin(), ids.end(), 0);
  std::mt19937_64 rng(seed);
  std::shuffle(ids.begin(), ids.end(), rng);
  x.tab.assign(static_cast<std::size_t>(B * x.max_pages), 0);
  for (std::size_t i = 0; i < x.tab.size(); ++i) x.tab[i] = ids[i];
  for (auto [b, col, id] : c.bad_pages)
    x.tab[static_cast<std::size_t>(b * x.max_pages + col)] = static_cast<std::int32_t>(id);
  const std::size_t n = static_cast<std::size_t>(x.pages * c.P * c.HK * c.D);
  x.kv = random_values(n, c.cache_t, -2, 2);
  x.vv = random_values(n, c.cache_t, -1, 1);
  // Rows no sequence uses (past each context, the spare pages): NaN.
  std::vector<char> used(static_cast<std::size_t>(x.pages * c.P), 0);
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t j = 0; j < std::min(c.ctx[static_cast<std::size_t>(b)], x.max_pages * c.P);
         ++j) {
      const std::int32_t id = x.tab[static_cast<std::size_t>(b * x.max_pages + j / c.P)];
      if (id >= 0 && id < x.pages) used[static_cast<std::size_t>(id * c.P + j % c.P)] = 1;
    }
  for (std::size_t r = 0; r < used.size(); ++r)
    if (!used[r])
      for (std::size_t e = 0; e < static_cast<std::size_t>(c.HK * c.D); ++e) {
        x.kv[r * static_cast<std::size_t>(c.HK * c.D) + e] = NAN;
        x.vv[r * static_cast<std::size_t>(c.HK * c.D) + e] = NAN;
      }
  x.qv = random_values(static_cast<std::size_t>(B * c.TQ * c.H * c.D), c.t, -2, 2);
  x.q = Tensor::from_doubles(x.qv, {B, c.TQ, c.H, c.D}, c.t, device());
  x.kc = Tensor::from_doubles(x.kv, {x.pages, c.P, c.HK, c.D}, c.cache_t, device());
  x.vc = Tensor::from_doubles(x.vv, {x.pages, c.P, c.HK, c.D}, c.cache_t, device());
  std::vector<double> tabd(x.tab.begin(), x.tab.end());
  x.table = Tensor::from_doubles(tabd, {B, x.max_pages}, i32, device());
  std::vector<double> lens(c.ctx.begin(), c.ctx.end());
  x.lens = Tensor::from_doubles(lens, {B}, i32, device());
  return x;
}

// float64: query token t of sequence b at position ctx - TQ + t sees keys
// [0, min(position + 1, ctx)); ctx cut to the table, an id outside the cache
// reads as zeros. Out (B, TQ, H, D).
inline std::vector<double> reference(const Case& c, const Built& x) {
  const std::int64_t B = static_cast<std::int64_t>(c.ctx.size()), G = c.H / c.HK;
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.D));
  std::vector<double> out(static_cast<std::size_t>(B * c.TQ * c.H * c.D), 0.0);
  auto at = [&](const std::vector<double>& cache, std::int64_t b, std::int64_t j, std::int64_t hk,
                std::int64_t d, double s) {
    const std::int32_t id = x.tab[static_cast<std::size_t>(b * x.max_pages + j / c.P)];
    if (id < 0 || id >= x.pages) return 0.0;
    return s * cache[static_cast<std::size_t>(((id * c.P + j % c.P) * c.HK + hk) * c.D + d)];
  };
  for (std::int64_t b = 0; b < B; ++b) {
    const std::int64_t ctx =
        std::clamp<std::int64_t>(c.ctx[static_cast<std::size_t>(b)], 0, x.max_pages * c.P);
    for (std::int64_t t = 0; t < c.TQ; ++t)
      for (std::int64_t h = 0; h < c.H; ++h) {
        const std::int64_t hk = h / G;
        const std::int64_t keys = std::clamp<std::int64_t>(ctx - c.TQ + t + 1, 0, ctx);
        std::vector<double> p(static_cast<std::size_t>(keys));
        double mx = -INFINITY, sum = 0;
        for (std::int64_t j = 0; j < keys; ++j) {
          double dot = 0;
          for (std::int64_t d = 0; d < c.D; ++d)
            dot += x.qv[static_cast<std::size_t>(((b * c.TQ + t) * c.H + h) * c.D + d)] *
                   at(x.kv, b, j, hk, d, c.k_scale);
          p[static_cast<std::size_t>(j)] = dot * scale;
          mx = std::max(mx, dot * scale);
        }
        for (auto& e : p) sum += (e = std::exp(e - mx));
        for (std::int64_t d = 0; d < c.D; ++d) {
          double acc = 0;
          for (std::int64_t j = 0; j < keys; ++j)
            acc += p[static_cast<std::size_t>(j)] * at(x.vv, b, j, hk, d, c.v_scale);
          out[static_cast<std::size_t>(((b * c.TQ + t) * c.H + h) * c.D + d)] =
              keys > 0 ? acc / sum : 0.0;
        }
      }
  }
  return out;
}

struct Result {
  double error = 0;  // worst error over the bound (<= 1 passes)
  std::vector<double> out;
  std::string plan;
};

inline Result run(const Case& c, const Built& x) {
  ops::PagedAttentionOptions opt{
      .k_scale = c.k_scale, .v_scale = c.v_scale, .splits = c.splits, .ctas_per_sm = c.ctas_per_sm};
  Result r;
  r.plan = ops::paged_attention_plan(x.q, x.kc, x.vc, x.table, x.lens, opt);
  Tensor o = ops::paged_attention(x.q, x.kc, x.vc, x.table, x.lens, opt);
  const std::int64_t B = static_cast<std::int64_t>(c.ctx.size());
  CHECK(o.shape() == std::vector<std::int64_t>{B, c.TQ, c.H, c.D});
  CHECK(o.dtype() == c.t);
  r.out = o.to_doubles();
  tx::test::AttentionRef want{reference(c, x), {}};
  r.error = tx::test::attention_error(want, r.out, {}, c.t, c.v_scale).out;
  return r;
}

// The largest |a - b| / (1 + |a|) of two runs of the same call (each
// rounded to 16 bits: within rounding, they differ by a bf16 ulp or less).
inline double relative_gap(const Result& a, const Result& b) {
  double worst = 0;
  for (std::size_t i = 0; i < a.out.size(); ++i)
    worst = std::max(worst, std::fabs(a.out[i] - b.out[i]) / (1 + std::fabs(a.out[i])));
  return worst;
}

inline std::string describe(const Case& c) {
  std::string s = "TQ " + std::to_string(c.TQ) + ", H " + std::to_string(c.H) + "/" +
                  std::to_string(c.HK) + ", D " + std::to_string(c.D) + ", page " +
                  std::to_string(c.P) + ", " + c.t.name() + "/" + c.cache_t.name() + ", splits " +
                  std::to_string(c.splits) + ", ctx";
  for (auto n : c.ctx) s += " " + std::to_string(n);
  return s;
}

TEST_CASE(
    "paged_attention against float64: mixed contexts, scattered pages, GQA, NaN past the end") {
  const std::vector<Case> cases = {
      // contexts of 1, page - 1, page + 1 and several pages in one batch
      {.TQ = 1, .H = 4, .HK = 1, .D = 64, .P = 16, .ctx = {1, 15, 17, 70}},
      {.TQ = 1, .H = 2, .HK = 2, .D = 128, .P = 32, .ctx = {31, 33, 1, 130}},
      {.TQ = 1, .H = 16, .HK = 2, .D = 64, .P = 64, .ctx = {63, 65, 200}},
      // several query tokens (causal among them), GQA 4: 16 rows a tile
      {.TQ = 4, .H = 8, .HK = 2, .D = 64, .P = 16, .ctx = {4, 16, 17, 90}},
      // f16, split forced
      {.TQ = 2,
       .H = 4,
       .HK = 1,
       .D = 64,
       .P = 16,
       .ctx = {150, 3, 77},
       .t = f16,
       .cache_t = f16,
       .splits = 3},
  };
  for (const Case& c : cases) {
    CAPTURE(describe(c));
    Built x = build(c);
    Result r = run(c, x);
    CAPTURE(r.plan);
    CHECK(r.error <= 1.0);
  }
}

TEST_CASE("paged_attention: the split and unsplit paths agree within rounding") {
  Case c{.TQ = 1, .H = 8, .HK = 1, .D = 64, .P = 16, .ctx = {200, 45, 129}};
  Built x = build(c, 7);
  c.splits = 1;
  Result one = run(c, x);
  CHECK(one.plan.find("no split") != std::string::npos);
  c.splits = 4;
  Result four = run(c, x);
  CHECK(four.plan.find("split-KV: 4 ranges of 64 keys") != std::string::npos);
  CHECK(one.error <= 1.0);
  CHECK(four.error <= 1.0);
  CHECK(relative_gap(one, four) <= 0x1p-8);
}

TEST_CASE("paged_attention: one CTA per SM (two consumers) and two (one each) agree") {
  // Query rows per tile: 4 (warps 1-3 of a consumer skip the softmax), 32
  // (warps 2-3 skip), 128 (two row blocks, all live), with an fp8 cache.
  const std::vector<Case> cases = {
      {.TQ = 1, .H = 8, .HK = 2, .D = 128, .P = 16, .ctx = {300, 17, 64}},
      {.TQ = 8, .H = 8, .HK = 2, .D = 64, .P = 32, .ctx = {140, 9}},
      {.TQ = 8, .H = 16, .HK = 1, .D = 64, .P = 16, .ctx = {80, 200}, .splits = 2},
      {.TQ = 1,
       .H = 4,
       .HK = 1,
       .D = 128,
       .P = 64,
       .ctx = {250, 1},
       .cache_t = f8e4m3,
       .k_scale = 0.5,
       .v_scale = 2},
  };
  for (Case c : cases) {
    CAPTURE(describe(c));
    Built x = build(c, 5);
    c.ctas_per_sm = 1;
    Result one = run(c, x);
    CHECK(one.plan.find("one CTA per SM (two consumer warpgroups)") != std::string::npos);
    c.ctas_per_sm = 2;
    Result two = run(c, x);
    CHECK(two.plan.find("two CTAs per SM") != std::string::npos);
    CHECK(one.error <= 1.0);
    CHECK(two.error <= 1.0);
    // Blocks summed in another order (alternate blocks merged at the end):
    // one bf16 ulp (2^-7 relative) apart at most.
    CHECK(relative_gap(one, two) <= 0x1p-7);
  }
}

TEST_CASE("paged_attention with an fp8 e4m3 cache and per-tensor scales") {
  for (std::int64_t splits : {1, 2}) {
    Case c{.TQ = 1,
           .H = 8,
           .HK = 1,
           .D = 64,
           .P = 16,
           .ctx = {33, 100},
           .cache_t = f8e4m3,
           .splits = splits,
           .k_scale = 0.75,
           .v_scale = 1.5};
    CAPTURE(splits);
    Built x = build(c, 11);
    Result r = run(c, x);
    CAPTURE(r.plan);
    CHECK(r.plan.find("fp8 cache widened") != std::string::npos);
    CHECK(r.error <= 1.0);
  }
}

TEST_CASE("paged_attention: documented results of lengths and page ids the host cannot check") {
  // Sequence 0: length 0 (no key: O = 0); 1: negative; 2: longer than its
  // table (cut); 3: fewer keys than query tokens (the early tokens see none);
  // 4: a page id past the cache and one below 0 (those pages read as zeros).
  Case c{.TQ = 2,
         .H = 4,
         .HK = 2,
         .D = 64,
         .P = 16,
         .ctx = {0, -5, 1000, 1, 60},
         .max_pages = 4,
         .bad_pages = {{4, 1, 1 << 20}, {4, 2, -3}}};
  Built x = build(c, 3);
  Result r = run(c, x);
  CHECK(r.error <= 1.0);
  // Rows that see nothing are exactly 0.
  const std::size_t row = static_cast<std::size_t>(c.H * c.D);
  for (std::size_t i = 0; i < 2 * row; ++i) CHECK(r.out[i] == 0.0);  // sequence 0, both tokens
}

TEST_CASE("paged_attention: bad input is a tx error naming the operand and the line") {
  Case c{.TQ = 1, .H = 4, .HK = 2, .D = 64, .P = 16, .ctx = {20, 5}};
  Built x = build(c);
  auto error_of = [&](auto&& call) -> std::string {
    try {
      call();
    } catch (const tx::Error& e) {
      return e.what();
    }
    return "no error";
  };
  const std::string here = __FILE__;
  std::string e = error_of([&] {
    Tensor kc3 = Tensor::empty({x.pages, 16, 3, 64}, bf16, device());
    ops::paged_attention(x.q, kc3, kc3, x.table, x.lens);
  });
  CHECK(e.find("tx.ops.paged_attention") != std::string::npos);
  CHECK(e.find("k_cache") != std::string::npos);
  CHECK(e.find("do not divide") != std::string::npos);
  CHECK(e.find("paged_attention_cases.hpp") != std::string::npos);
  e = error_of([&] {
    Tensor kc = Tensor::empty({x.pages, 24, 2, 64}, bf16, device());
    ops::paged_attention(x.q, kc, kc, x.table, x.lens);
  });
  CHECK(e.find("page_size 24") != std::string::npos);
  e = error_of([&] {
    Tensor q9 = Tensor::empty({2, 9, 4, 64}, bf16, device());
    ops::paged_attention(q9, x.kc, x.vc, x.table, x.lens);
  });
  CHECK(e.find("9 query tokens") != std::string::npos);
  e = error_of([&] {
    Tensor t64 = Tensor::empty({2, x.max_pages}, i64, device());
    ops::paged_attention(x.q, x.kc, x.vc, t64, x.lens);
  });
  CHECK(e.find("block_table") != std::string::npos);
  e = error_of([&] {
    Tensor l3 = Tensor::empty({3}, i32, device());
    ops::paged_attention(x.q, x.kc, x.vc, x.table, l3);
  });
  CHECK(e.find("context_lens") != std::string::npos);
  e = error_of([&] { ops::paged_attention(x.q, x.kc, x.vc, x.table, x.lens, {.ctas_per_sm = 3}); });
  CHECK(e.find("ctas_per_sm") != std::string::npos);
  CHECK(e.find("0 (choose), 1 or 2") != std::string::npos);
  e = error_of([&] { ops::paged_attention(x.q, x.kc, x.vc, x.table, x.lens, {.k_scale = 2}); });
  CHECK(e.find("scales apply to an fp8 cache") != std::string::npos);
  e = error_of([&] {
    Tensor vf = Tensor::empty({x.pages, 16, 2, 64}, f16, device());
    ops::paged_attention(x.q, x.kc, vf, x.table, x.lens);
  });
  CHECK(e.find("v_cache") != std::string::npos);
}

TEST_CASE(
    "reshape_and_cache: slots by page and row, padding and stray slots skipped, fp8 quantized") {
  for (DType ct : {bf16, f8e4m3}) {
    CAPTURE(ct.name());
    const std::int64_t tokens = 7, HK = 2, D = 64, P = 16, pages = 3;
    auto kn = random_values(static_cast<std::size_t>(tokens * HK * D), bf16, -3, 3);
    auto vn = random_values(static_cast<std::size_t>(tokens * HK * D), bf16, -3, 3);
    const std::vector<double> slots = {5, 47, -1, 16, 48, 0, 31};  // -1 padding, 48 past the end
    Tensor K = Tensor::from_doubles(kn, {tokens, HK, D}, bf16, device());
    Tensor V = Tensor::from_doubles(vn, {tokens, HK, D}, bf16, device());
    Tensor kc = Tensor::empty({pages, P, HK, D}, ct, device());
    Tensor vc = Tensor::empty({pages, P, HK, D}, ct, device());
    const std::uint64_t nan_bits = ct == f8e4m3 ? 0x7f : 0x7fc0;
    kc.fill_bits(nan_bits);
    vc.fill_bits(nan_bits);
    // fp8: 3 / 0.005 = 600 saturates to 448
    const double ks = ct == f8e4m3 ? 0.5 : 1, vs = ct == f8e4m3 ? 0.005 : 1;
    ops::reshape_and_cache(K, V, kc, vc, Tensor::from_doubles(slots, {tokens}, i64, device()),
                           {.k_scale = ks, .v_scale = vs});
    auto kd = kc.to_doubles(), vd = vc.to_doubles();
    std::vector<char> written(static_cast<std::size_t>(pages * P), 0);
    for (std::int64_t t = 0; t < tokens; ++t) {
      const auto s = static_cast<std::int64_t>(slots[static_cast<std::size_t>(t)]);
      if (s < 0 || s >= pages * P) continue;
      written[static_cast<std::size_t>(s)] = 1;
      for (std::int64_t e = 0; e < HK * D; ++e) {
        const std::size_t src = static_cast<std::size_t>(t * HK * D + e),
                          dst = static_cast<std::size_t>(s * HK * D + e);
        CHECK(kd[dst] == tx::quantize(kn[src] / ks, ct));
        CHECK(vd[dst] == tx::quantize(vn[src] / vs, ct));
      }
    }
    for (std::int64_t s = 0; s < pages * P; ++s)
      if (!written[static_cast<std::size_t>(s)])
        CHECK(std::isnan(kd[static_cast<std::size_t>(s * HK * D)]));
  }
}

}  // namespace pagedcase
