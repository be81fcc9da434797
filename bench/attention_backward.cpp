// bench/attention_backward: tx::ops::attention_backward (dq, dk, dv) on the
// attention backward issue's shapes (16k tokens, model width 2048: batch =
// 16384 / S, heads = 2048 / D; and GQA 32 query heads over 8 K/V heads at D
// 128); bench/attention_backward.py times the backward of cuDNN SDPA and of
// torch's flash backend on the same shapes and writes the report
// (bench/run_attention.sh runs both).
//
//   bench_attention_backward --out tx.json
//   TX_ATTN_ONLY=d128_s4096_causal bench_attention_backward
//
// TFLOP/s = 2.5 x the forward's 4 B H Sq Sk D / time (half when causal).
// Timing: CUDA events around each call, 5 warm-ups, median of 30; the
// default (DqSum::automatic: which form it takes is printed), then each form
// alone -- DqSum::deterministic (a dq kernel of its own) and DqSum::atomics
// (dQ tiles added by TMA reductions). Each case checks 12 rows of dq (first
// and last batch and head) of both forms against float64.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "bench_util.hpp"
#include "tx/ops/attention.hpp"
#include "tx/tx.hpp"

namespace {

struct Row {
  std::string name;
  std::int64_t B, H, Hk, S, D;
  bool causal;
};

std::vector<Row> rows() {
  std::vector<Row> out;
  for (std::int64_t d : {64, 128})
    for (std::int64_t s : {1024, 4096, 16384})
      for (bool causal : {false, true})
        out.push_back(
            {"d" + std::to_string(d) + "_s" + std::to_string(s) + (causal ? "_causal" : ""),
             16384 / s, 2048 / d, 2048 / d, s, d, causal});
  for (bool causal : {false, true})
    out.push_back({std::string("d128_s4096") + (causal ? "_causal" : "") + "_gqa32x8", 4, 32, 8,
                   4096, 128, causal});
  return out;
}

// The worst dq error over 12 rows: |dq - ref| / (2^-6 (max |ref| + |ref|))
// (the bound of test/attention_backward_cases.hpp, max over the rows). Storage (B, S, H, D).
double check_dq(const Row& r, const tx::Tensor& Q, const tx::Tensor& K, const tx::Tensor& V,
                const tx::Tensor& G, const tx::Tensor& dQ) {
  const std::int64_t D = r.D, S = r.S;
  auto q = Q.transpose(1, 2).contiguous().to_doubles(),
       k = K.transpose(1, 2).contiguous().to_doubles();
  auto v = V.transpose(1, 2).contiguous().to_doubles(),
       g = G.transpose(1, 2).contiguous().to_doubles();
  auto dq = dQ.transpose(1, 2).contiguous().to_doubles();
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  // The bound is relative to the largest |dq| of the checked rows (a
  // causal first row's dq is 0: its only key gives dS = 0).
  std::vector<std::pair<double, double>> pairs;  // (got, want)
  auto at = [&](std::int64_t b, std::int64_t heads, std::int64_t h, std::int64_t i,
                std::int64_t d) {
    return static_cast<std::size_t>(((b * S + i) * heads + h) * D + d);
  };
  for (std::int64_t b : {std::int64_t{0}, r.B - 1})
    for (std::int64_t h : {std::int64_t{0}, r.H - 1})
      for (std::int64_t i : {std::int64_t{0}, S / 2, S - 1}) {
        const std::int64_t hk = h / (r.H / r.Hk), keys = r.causal ? i + 1 : S;
        std::vector<double> p(static_cast<std::size_t>(keys)), dp(p.size());
        double mx = -INFINITY, sum = 0;
        for (std::int64_t j = 0; j < keys; ++j) {
          double s = 0, t = 0;
          for (std::int64_t d = 0; d < D; ++d) {
            s += q[at(b, r.H, h, i, d)] * k[at(b, r.Hk, hk, j, d)];
            t += g[at(b, r.H, h, i, d)] * v[at(b, r.Hk, hk, j, d)];
          }
          p[static_cast<std::size_t>(j)] = s * scale;
          dp[static_cast<std::size_t>(j)] = t;
          mx = std::max(mx, s * scale);
        }
        for (auto& x : p) sum += (x = std::exp(x - mx));
        double Di = 0;
        for (std::int64_t j = 0; j < keys; ++j)
          Di += (p[static_cast<std::size_t>(j)] /= sum) * dp[static_cast<std::size_t>(j)];
        for (std::int64_t d = 0; d < D; ++d) {
          double want = 0;
          for (std::int64_t j = 0; j < keys; ++j)
            want += scale * p[static_cast<std::size_t>(j)] *
                    (dp[static_cast<std::size_t>(j)] - Di) * k[at(b, r.Hk, hk, j, d)];
          pairs.push_back({dq[at(b, r.H, h, i, d)], want});
        }
      }
  double top = 0, worst = 0;
  for (auto [got, want] : pairs) top = std::max(top, std::fabs(want));
  for (auto [got, want] : pairs) {
    if (!std::isfinite(got)) return INFINITY;
    worst = std::max(worst, std::fabs(got - want) / (0x1p-6 * (top + std::fabs(want)) + 1e-30));
  }
  return worst;
}

}  // namespace

int main(int argc, char** argv) {
  std::string out =
      argc > 2 && std::string(argv[1]) == "--out" ? argv[2] : "attention_backward_tx.json";
  const char* only = std::getenv("TX_ATTN_ONLY");
  std::ofstream js(out);
  js << "[\n";
  bool first = true;
  int bad = 0;
  std::vector<Row> selected;
  for (const Row& r : rows())
    if (!only || ("," + std::string(only) + ",").find("," + r.name + ",") != std::string::npos)
      selected.push_back(r);
  // Every row's kernels compiled first, a core a row (five kernels a row, each
  // seconds of NVRTC and ptxas: most of the wall time when done one by one):
  // the forward and both dQ forms of the backward on one sequence of the
  // row's shape, which builds the kernels the row's calls take (they depend
  // on the heads, head_dim, mask and lengths' class, not on the batch).
  bench::parallel_for(selected.size(), [&](std::size_t i) {
    const Row& r = selected[i];
    auto one = [&](std::int64_t heads) {
      return bench::random_tensor({1, r.S, heads, r.D}, tx::bf16).transpose(1, 2);
    };
    tx::Tensor Q = one(r.H), K = one(r.Hk), V = one(r.Hk), G = one(r.H);
    tx::ops::AttentionOptions opt{.causal = r.causal};
    auto [O, L] = tx::ops::attention(Q, K, V, opt);
    for (auto sum : {tx::ops::DqSum::deterministic, tx::ops::DqSum::atomics}) {
      tx::ops::AttentionOptions o = opt;
      o.dq_sum = sum;
      tx::ops::attention_backward(G, Q, K, V, O, L, o);
    }
  });
  tx::synchronize();
  for (const Row& r : selected) {
    const auto row_start = std::chrono::steady_clock::now();
    // (B, S, H, D) storage seen as (B, H, S, D): the flash kernels' layout.
    auto make = [&](std::int64_t heads) {
      return bench::random_tensor({r.B, r.S, heads, r.D}, tx::bf16).transpose(1, 2);
    };
    tx::Tensor Q = make(r.H), K = make(r.Hk), V = make(r.Hk), G = make(r.H);
    tx::ops::AttentionOptions opt{.causal = r.causal};
    auto [O, L] = tx::ops::attention(Q, K, V, opt);
    const bool fused =
        tx::ops::attention_backward_plan(G, Q, K, V, O, L, opt).find("TMA reductions") !=
        std::string::npos;
    tx::ops::AttentionOptions det = opt, atomics = opt;
    det.dq_sum = tx::ops::DqSum::deterministic;
    atomics.dq_sum = tx::ops::DqSum::atomics;
    double err = 0;
    for (const auto* o : {&det, &atomics}) {
      auto grads = tx::ops::attention_backward(G, Q, K, V, O, L, *o);
      err = std::max(err, check_dq(r, Q, K, V, G, grads.dq));
    }
    if (!(err <= 1.0)) ++bad;
    auto time_with = [&](const tx::ops::AttentionOptions& o) {
      return bench::time_ms([&] { tx::ops::attention_backward(G, Q, K, V, O, L, o); });
    };
    const double ms = time_with(opt), det_ms = time_with(det), atomics_ms = time_with(atomics);
    const double flops =
        2.5 * 4.0 * static_cast<double>(r.B * r.H * r.S * r.S * r.D) * (r.causal ? 0.5 : 1.0);
    auto tf = [&](double t) { return flops / (t * 1e-3) / 1e12; };
    std::printf(
        "%-28s B %3lld H %2lld/%2lld S %5lld D %3lld  %8.4f ms  %6.1f TFLOP/s (%s)  "
        "deterministic %6.1f  atomics %6.1f  dq err %.3g  (row: %.0f s)\n",
        r.name.c_str(), static_cast<long long>(r.B), static_cast<long long>(r.H),
        static_cast<long long>(r.Hk), static_cast<long long>(r.S), static_cast<long long>(r.D), ms,
        tf(ms), fused ? "atomics" : "deterministic", tf(det_ms), tf(atomics_ms), err,
        std::chrono::duration<double>(std::chrono::steady_clock::now() - row_start).count());
    std::fflush(stdout);
    js << (first ? "" : ",\n") << "  {\"name\": \"" << r.name << "\", \"batch\": " << r.B
       << ", \"heads\": " << r.H << ", \"kv_heads\": " << r.Hk << ", \"seq\": " << r.S
       << ", \"head_dim\": " << r.D << ", \"causal\": " << (r.causal ? "true" : "false")
       << ", \"tx_ms\": " << ms << ", \"tx_tflops\": " << tf(ms) << ", \"tx_dq_sum\": \""
       << (fused ? "atomics" : "deterministic") << "\", \"tx_det_tflops\": " << tf(det_ms)
       << ", \"tx_atomics_tflops\": " << tf(atomics_ms) << ", \"tx_err\": " << err << "}";
    js.flush();  // a run cut short by its time limit keeps the rows it finished
    first = false;
  }
  js << "\n]\n";
  if (bad) std::printf("%d case(s) over the error bound\n", bad);
  return bad ? 1 : 0;
}
