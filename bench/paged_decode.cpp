// bench/paged_decode: tx::ops::paged_attention (decode over a paged KV cache)
// on the serving shapes of the paged-decode issue -- 32 query heads over 8
// K/V heads, head_dim 128, pages of 16, bf16 and an fp8 cache -- as KV bytes
// per second against the copy bandwidth, and 32 decode steps replayed from
// a CUDA graph against the same 32 calls launched eagerly.
// bench/paged_decode.py times PyTorch's paths on the same shapes (SDPA over a
// contiguous GQA cache; the pages gathered, then SDPA) and writes the table.
//
//   bench_paged_decode --out paged_tx.json
//   TX_PAGED_SPLITS=4 bench_paged_decode       (force the split count)
//   TX_PAGED_BENCH_PAGE=64, TX_PAGED_BENCH_ONLY=b32ctx4096 (see below)
//
// Timing: CUDA events around 10 back-to-back calls, median of 30 groups.
// Each case first checks 16 rows of O against float64.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "bench_util.hpp"
#include "tx/ops/paged_attention.hpp"

namespace {

struct Row {
  std::int64_t batch, ctx;
  tx::DType cache_t = tx::bf16;
};

constexpr std::int64_t kHeads = 32, kKvHeads = 8, kDim = 128;
// Pages of 16 (the shape); TX_PAGED_BENCH_PAGE=32 or 64 measures how
// the page size (the size of each copy) moves the rate.
const std::int64_t kPage =
    std::getenv("TX_PAGED_BENCH_PAGE") ? std::atoll(std::getenv("TX_PAGED_BENCH_PAGE")) : 16;

struct Inputs {
  tx::Tensor q, kc, vc, table, lens;
  std::int64_t pages = 0, max_pages = 0;
};

Inputs make(const Row& r) {
  Inputs x;
  x.max_pages = (r.ctx + kPage - 1) / kPage;
  x.pages = r.batch * x.max_pages;
  x.q = bench::random_tensor({r.batch, 1, kHeads, kDim}, tx::bf16);
  x.kc = bench::random_tensor({x.pages, kPage, kKvHeads, kDim}, r.cache_t);
  x.vc = bench::random_tensor({x.pages, kPage, kKvHeads, kDim}, r.cache_t);
  // Each sequence's pages scattered over the cache.
  std::vector<double> ids(static_cast<std::size_t>(x.pages));
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<double>(i);
  std::mt19937_64 rng(42);
  std::shuffle(ids.begin(), ids.end(), rng);
  x.table = tx::Tensor::from_doubles(ids, {r.batch, x.max_pages}, tx::i32, tx::Device::cuda());
  x.lens = tx::Tensor::from_doubles(
      std::vector<double>(static_cast<std::size_t>(r.batch), static_cast<double>(r.ctx)), {r.batch},
      tx::i32, tx::Device::cuda());
  return x;
}

// The checked rows: heads 0, 9, 22 and 31 of the first and last sequence.
struct Checked {
  std::int64_t b, h;
  std::vector<double> want;  // kDim values in float64
};

// Their float64 reference, computed once per row (the caches come to the
// host once: at batch 128 x 2048 keys they are 2 x 268 M elements).
std::vector<Checked> reference(const Row& r, const Inputs& x) {
  auto q = x.q.to_doubles(), k = x.kc.to_doubles(), v = x.vc.to_doubles();
  auto tab = x.table.to_doubles();
  const double scale = 1.0 / std::sqrt(static_cast<double>(kDim));
  std::vector<Checked> rows;
  for (std::int64_t b : {std::int64_t{0}, r.batch - 1})
    for (std::int64_t h : {std::int64_t{0}, std::int64_t{9}, std::int64_t{22}, kHeads - 1}) {
      const std::int64_t hk = h / (kHeads / kKvHeads);
      auto at = [&](const std::vector<double>& c, std::int64_t j, std::int64_t d) {
        const auto id =
            static_cast<std::int64_t>(tab[static_cast<std::size_t>(b * x.max_pages + j / kPage)]);
        return c[static_cast<std::size_t>(((id * kPage + j % kPage) * kKvHeads + hk) * kDim + d)];
      };
      std::vector<double> s(static_cast<std::size_t>(r.ctx));
      double mx = -INFINITY, sum = 0;
      for (std::int64_t j = 0; j < r.ctx; ++j) {
        double dot = 0;
        for (std::int64_t d = 0; d < kDim; ++d)
          dot += q[static_cast<std::size_t>((b * kHeads + h) * kDim + d)] * at(k, j, d);
        s[static_cast<std::size_t>(j)] = dot * scale;
        mx = std::max(mx, dot * scale);
      }
      for (auto& e : s) sum += (e = std::exp(e - mx));
      Checked c{b, h, std::vector<double>(static_cast<std::size_t>(kDim))};
      for (std::int64_t d = 0; d < kDim; ++d) {
        double want = 0;
        for (std::int64_t j = 0; j < r.ctx; ++j)
          want += s[static_cast<std::size_t>(j)] * at(v, j, d);
        c.want[static_cast<std::size_t>(d)] = want / sum;
      }
      rows.push_back(std::move(c));
    }
  return rows;
}

// Worst |O - O_ref| / (2^-8 + 2^-8 |O_ref|) over the checked rows (|v| <= 1:
// the bf16 bound of attention_cases.hpp).
double check(const std::vector<Checked>& ref, const tx::Tensor& o) {
  auto out = o.to_doubles();
  double worst = 0;
  for (const Checked& c : ref)
    for (std::int64_t d = 0; d < kDim; ++d) {
      const double got = out[static_cast<std::size_t>((c.b * kHeads + c.h) * kDim + d)];
      const double want = c.want[static_cast<std::size_t>(d)];
      if (std::isnan(got)) return INFINITY;
      worst = std::max(worst, std::fabs(got - want) / (0x1p-8 + 0x1p-8 * std::fabs(want)));
    }
  return worst;
}

}  // namespace

int main(int argc, char** argv) {
  std::string out = argc > 2 && std::string(argv[1]) == "--out" ? argv[2] : "paged_tx.json";
  std::int64_t splits =
      std::getenv("TX_PAGED_SPLITS") ? std::atoll(std::getenv("TX_PAGED_SPLITS")) : 0;
  const std::vector<Row> rows = {{32, 512},
                                 {32, 2048},
                                 {32, 4096},
                                 {128, 2048},
                                 {8, 16384},
                                 {1, 16384},
                                 {32, 4096, tx::f8e4m3},
                                 {8, 16384, tx::f8e4m3}};
  std::ofstream js(out);
  js << "[\n";
  bool first = true;
  int bad = 0;
  // TX_PAGED_BENCH_ONLY=b32ctx4096 runs one row (for a profiler).
  const char* only = std::getenv("TX_PAGED_BENCH_ONLY");
  for (const Row& r : rows) {
    const std::string tag = "b" + std::to_string(r.batch) + "ctx" + std::to_string(r.ctx) +
                            (r.cache_t == tx::f8e4m3 ? "fp8" : "");
    if (only && tag != only) continue;
    Inputs x = make(r);
    tx::Tensor o = tx::Tensor::empty({r.batch, 1, kHeads, kDim}, tx::bf16);
    tx::ops::PagedAttentionOptions opt{.splits = splits, .out = &o};
    const std::string plan = tx::ops::paged_attention_plan(x.q, x.kc, x.vc, x.table, x.lens, opt);
    o.fill_bits(0x7fc0);
    tx::ops::paged_attention(x.q, x.kc, x.vc, x.table, x.lens, opt);
    const std::vector<Checked> ref = reference(r, x);
    const double err = check(ref, o);
    if (!(err <= 1.0)) ++bad;
    auto step = [&] { tx::ops::paged_attention(x.q, x.kc, x.vc, x.table, x.lens, opt); };
    const double ms = bench::time_ms_back_to_back(step);
    // The other residency (one CTA per SM with two consumers, or two with
    // one each), timed the same way, checked the same way.
    const int chosen = plan.find("two CTAs per SM") != std::string::npos ? 2 : 1;
    tx::ops::PagedAttentionOptions alt_opt = opt;
    alt_opt.ctas_per_sm = 3 - chosen;
    const std::string alt_plan =
        tx::ops::paged_attention_plan(x.q, x.kc, x.vc, x.table, x.lens, alt_opt);
    o.fill_bits(0x7fc0);
    tx::ops::paged_attention(x.q, x.kc, x.vc, x.table, x.lens, alt_opt);
    const double alt_err = check(ref, o);
    if (!(alt_err <= 1.0)) ++bad;
    const double alt_ms = bench::time_ms_back_to_back(
        [&] { tx::ops::paged_attention(x.q, x.kc, x.vc, x.table, x.lens, alt_opt); });
    const std::size_t kv_bytes = static_cast<std::size_t>(r.batch * r.ctx * kKvHeads * kDim * 2) *
                                 static_cast<std::size_t>(r.cache_t.bits / 8);
    // A copy of kv_bytes (its bandwidth counts the bytes read and written,
    // as every copy figure in docs/ does).
    const double copy = bench::copy_ms(2 * kv_bytes);
    // 32 decode steps: eager launches against one graph replay.
    tx::synchronize();
    tx::runtime::EventTimer t;
    t.start();
    for (int i = 0; i < 32; ++i) step();
    t.stop();
    const double eager32 = t.elapsed_ms();
    tx::Graph g = tx::Graph::capture([&] {
      for (int i = 0; i < 32; ++i) step();
    });
    g.replay();
    tx::synchronize();
    std::vector<double> reps;
    for (int i = 0; i < 10; ++i) {
      t.start();
      g.replay();
      t.stop();
      reps.push_back(t.elapsed_ms());
    }
    const double graph32 = bench::median(reps);
    const double gbs = static_cast<double>(kv_bytes) / ms / 1e6;
    const double copy_gbs = 2.0 * static_cast<double>(kv_bytes) / copy / 1e6;
    const std::string label = "decode b" + std::to_string(r.batch) + " ctx" + std::to_string(r.ctx);
    std::printf(
        "%-22s %-14s %8.4f ms  %7.1f GB/s  copy %7.1f GB/s  %.3f of copy  32 steps: eager "
        "%.3f ms, graph %.3f ms  err %.3g  [%s]\n    %d CTA(s) per SM instead: %.4f ms  %.3f of "
        "copy  err %.3g\n",
        label.c_str(), r.cache_t.name().c_str(), ms, gbs, copy_gbs, gbs / copy_gbs, eager32,
        graph32, err, plan.c_str(), 3 - chosen, alt_ms,
        static_cast<double>(kv_bytes) / alt_ms / 1e6 / copy_gbs, alt_err);
    std::fflush(stdout);
    js << (first ? "" : ",\n") << "  {\"label\": \"" << label << "\", \"batch\": " << r.batch
       << ", \"ctx\": " << r.ctx << ", \"cache\": \"" << r.cache_t.name()
       << "\", \"kv_bytes\": " << kv_bytes << ", \"tx_ms\": " << ms << ", \"copy_ms\": " << copy
       << ", \"eager32_ms\": " << eager32 << ", \"graph32_ms\": " << graph32 << ", \"err\": " << err
       << ", \"plan\": \"" << plan << "\", \"alt_ms\": " << alt_ms << ", \"alt_plan\": \""
       << alt_plan << "\"}";
    first = false;
  }
  js << "\n]\n";
  if (bad) std::printf("%d case(s) over the error bound\n", bad);
  return bad ? 1 : 0;
}
