// bench/attention: the attention forward of samples/attention_hopper.cpp on
// the shapes (16k tokens, model width 2048: batch = 16384 / S,
// heads = 2048 / D; and a GQA shape, 32 query heads over 8 K/V heads at D
// 128); bench/attention.py times cuDNN SDPA, torch's flash backend and a
// Triton flash-attention kernel on the same shapes and writes the report
// (bench/run_attention.sh runs both). Each row also times tx::ops::attention
// (the library op torch.ops.tx.attention calls: run-time shapes, its own
// tiling) on the same tensors: the "tx op" column.
//
//   bench_attention --out tx.json
//   TX_ATTN_ONLY=d128_s4096_causal,d64_s16384 bench_attention    (these rows only)
//
// TFLOP/s = 4 B H Sq Sk D / time (half of it when causal). Timing: CUDA
// events around each call, 5 warm-ups, median of 30. Each case checks 24
// rows of O (of the first and last batch and head) against float64.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#define TX_SAMPLE_NO_MAIN
#include "../samples/attention_hopper.cpp"
#include "bench_util.hpp"
#include "tx/ops/attention.hpp"
#include "tx/runtime/cuda_driver.hpp"

namespace {

struct Row {
  std::string name;
  AttentionShape shape;
  AttentionTiling tiling;
};

std::vector<Row> rows() {
  std::vector<Row> out;
  auto name = [](std::int64_t d, std::int64_t s, bool causal, const char* extra = "") {
    return "d" + std::to_string(d) + "_s" + std::to_string(s) + (causal ? "_causal" : "") + extra;
  };
  for (std::int64_t d : {64, 128, 256})
    for (std::int64_t s : {512, 1024, 2048, 4096, 8192, 16384})
      for (bool causal : {false, true}) {
        AttentionShape p{.batch = 16384 / s,
                         .heads = 2048 / d,
                         .kv_heads = 2048 / d,
                         .seq_q = s,
                         .seq_k = s,
                         .head_dim = d,
                         .causal = causal};
        // Key blocks as tx::ops::attention picks them (docs/attention.md).
        AttentionTiling t{.bn = d == 64 ? 128 : d == 128 ? (causal ? 128 : 176) : 80, .stages = 2};
        // D 64: three consumers (192-row blocks) where they measured faster
        // on an H200 (docs/attention.md): from 2k keys, 8k when causal.
        if (d == 64 && s >= (causal ? 8192 : 2048)) {
          t.consumers = 3;
          if (causal) t.bn = 112;  // ptxas spills the masked consumer at 128
        }
        out.push_back({name(d, s, causal), p, t});
      }
  for (bool causal : {false, true})
    out.push_back({name(128, 4096, causal, "_gqa32x8"),
                   {.batch = 4,
                    .heads = 32,
                    .kv_heads = 8,
                    .seq_q = 4096,
                    .seq_k = 4096,
                    .head_dim = 128,
                    .causal = causal},
                   {.bn = causal ? 128 : 176}});
  return out;
}

// The worst |O - O_ref| / (2^-7 + 2^-8 |O_ref|) over 24 rows (bf16 bound,
// attention_cases.hpp, with inputs in [-1, 1)).
double check_rows(const AttentionShape& p, const tx::Tensor& Q, const tx::Tensor& K,
                  const tx::Tensor& V, const tx::Tensor& O) {
  const std::int64_t D = p.head_dim;
  auto q = Q.to_doubles(), k = K.to_doubles(), v = V.to_doubles(), o = O.to_doubles();
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  double worst = 0;
  for (std::int64_t b : {std::int64_t{0}, p.batch - 1})
    for (std::int64_t h : {std::int64_t{0}, p.heads - 1})
      for (std::int64_t i :
           {std::int64_t{0}, std::int64_t{1}, p.seq_q / 3, p.seq_q / 2, p.seq_q - 2, p.seq_q - 1}) {
        const std::int64_t hk = h / (p.heads / p.kv_heads);
        const std::int64_t keys = p.causal ? std::min(p.seq_k, i + 1) : p.seq_k;
        std::vector<double> s(static_cast<std::size_t>(keys));
        double mx = -INFINITY, sum = 0;
        for (std::int64_t j = 0; j < keys; ++j) {
          double dot = 0;
          for (std::int64_t d = 0; d < D; ++d)
            dot += q[static_cast<std::size_t>(((b * p.seq_q + i) * p.heads + h) * D + d)] *
                   k[static_cast<std::size_t>(((b * p.seq_k + j) * p.kv_heads + hk) * D + d)];
          s[static_cast<std::size_t>(j)] = dot * scale;
          mx = std::max(mx, dot * scale);
        }
        for (auto& x : s) sum += (x = std::exp(x - mx));
        for (std::int64_t d = 0; d < D; ++d) {
          double want = 0;
          for (std::int64_t j = 0; j < keys; ++j)
            want += s[static_cast<std::size_t>(j)] *
                    v[static_cast<std::size_t>(((b * p.seq_k + j) * p.kv_heads + hk) * D + d)];
          want /= sum;
          const double got = o[static_cast<std::size_t>(((b * p.seq_q + i) * p.heads + h) * D + d)];
          if (std::isnan(got)) return INFINITY;
          worst = std::max(worst, std::fabs(got - want) / (0x1p-7 + 0x1p-8 * std::fabs(want)));
        }
      }
  return worst;
}

}  // namespace

int main(int argc, char** argv) {
  std::string out = argc > 2 && std::string(argv[1]) == "--out" ? argv[2] : "attention_tx.json";
  const char* only = std::getenv("TX_ATTN_ONLY");
  const std::int64_t sms = tx::runtime::current_device().sm_count;
  std::ofstream js(out);
  js << "[\n";
  bool first = true;
  int bad = 0;
  std::vector<Row> selected;
  for (Row r : rows()) {
    if (only && ("," + std::string(only) + ",").find("," + r.name + ",") == std::string::npos)
      continue;
    // TX_ATTN_CTAS=n: n persistent CTAs (default: one per SM; more than the
    // tiles: one CTA per tile, scheduled by the hardware).
    r.tiling.ctas = std::getenv("TX_ATTN_CTAS") ? std::atoi(std::getenv("TX_ATTN_CTAS")) : sms;
    // TX_ATTN_BN=176: key blocks of that many rows (every row).
    if (const char* bn = std::getenv("TX_ATTN_BN")) r.tiling.bn = std::atoi(bn);
    // TX_ATTN_STAGES=3: stages of the K and V rings (every row).
    if (const char* st = std::getenv("TX_ATTN_STAGES")) r.tiling.stages = std::atoi(st);
    // TX_ATTN_PAIRS=0: causal rows longest first across all heads, not in
    // mirrored pairs head by head (the default).
    if (const char* pr = std::getenv("TX_ATTN_PAIRS"); pr && std::string(pr) == "0")
      r.tiling.causal_pairs = false;
    // TX_ATTN_CONSUMERS=2 or 3: that many consumer warpgroups on the D 64
    // rows (3: 192-row blocks, key blocks of 112 when causal -- ptxas spills
    // the causal consumer at 128 with 160 registers -- unless TX_ATTN_BN says
    // otherwise; 2: key blocks of 128).
    if (const char* nc = std::getenv("TX_ATTN_CONSUMERS"); nc && r.shape.head_dim <= 64) {
      r.tiling.consumers = std::atoi(nc);
      if (!std::getenv("TX_ATTN_BN"))
        r.tiling.bn = r.tiling.consumers == 3 && r.shape.causal ? 112 : 128;
    }
    // TX_ATTN_OVERLAP=1: each tile's first Q K^T issued behind the last
    // tile's last P V (AttentionTiling::overlap_tiles).
    if (const char* ov = std::getenv("TX_ATTN_OVERLAP"); ov && std::string(ov) == "1")
      r.tiling.overlap_tiles = true;
    // TX_ATTN_PINGPONG=1: the consumers take turns issuing their MMAs.
    if (const char* pp = std::getenv("TX_ATTN_PINGPONG"); pp && std::string(pp) == "1")
      r.tiling.pingpong = true;
    selected.push_back(r);
  }
  // Every row's kernels compiled first, a core a row (NVRTC and ptxas take
  // seconds a kernel, most of the benchmark's wall time when done one by
  // one): the sample's kernel, and the op's -- built by a call on one
  // sequence of the row's shape, which compiles the kernels the row's own
  // call takes (they depend on the heads, head_dim, mask and lengths' class,
  // not on the batch).
  std::vector<tx::Kernel> sample_kernels(selected.size());
  bench::parallel_for(selected.size(), [&](std::size_t i) {
    const Row& r = selected[i];
    sample_kernels[i] =
        tx::compile(attention_hopper(r.shape, tx::bf16, r.tiling), {.approx_math = true});
    if (std::getenv("TX_ATTN_SKIP_OP")) return;
    const AttentionShape& p = r.shape;
    auto one = [&](std::int64_t s, std::int64_t h) {
      return bench::random_tensor({1, s, h, p.head_dim}, tx::bf16).transpose(1, 2);
    };
    tx::ops::attention(one(p.seq_q, p.heads), one(p.seq_k, p.kv_heads), one(p.seq_k, p.kv_heads),
                       {.causal = p.causal});
  });
  tx::synchronize();
  for (std::size_t i = 0; i < selected.size(); ++i) {
    const Row& r = selected[i];
    const AttentionShape& p = r.shape;
    const std::int64_t D = p.head_dim;
    tx::Kernel k = sample_kernels[i];
    tx::Tensor Q = bench::random_tensor({p.batch, p.seq_q, p.heads, D}, tx::bf16);
    tx::Tensor K = bench::random_tensor({p.batch, p.seq_k, p.kv_heads, D}, tx::bf16);
    tx::Tensor V = bench::random_tensor({p.batch, p.seq_k, p.kv_heads, D}, tx::bf16);
    tx::Tensor O = tx::Tensor::empty({p.batch, p.seq_q, p.heads, D}, tx::bf16);
    tx::Tensor L = tx::Tensor::empty({p.batch, p.heads, p.seq_q}, tx::f32);
    O.fill_bits(0x7fc0);
    k(Q, K, V, O, L);
    const double err = check_rows(p, Q, K, V, O);
    if (!(err <= 1.0)) ++bad;
    const double ms = bench::time_ms([&] { k(Q, K, V, O, L); });
    const double flops = 4.0 * static_cast<double>(p.batch * p.heads * p.seq_q * p.seq_k * D) *
                         (p.causal ? 0.5 : 1.0);
    const double tflops = flops / (ms * 1e-3) / 1e12;
    // tx::ops::attention, what torch.ops.tx.attention runs (shapes at launch,
    // both layouts, variable lengths): (B, H, S, D) views of the same storage,
    // its own tiling (key_block in ops/src/attention.cpp), out allocated per call.
    // TX_ATTN_SKIP_OP=1: the sample's kernel only (sweeps of its tiling,
    // where the op's column would repeat itself); op columns read 0.
    tx::ops::AttentionResult res;
    auto op = [&] {
      res = tx::ops::attention(Q.transpose(1, 2), K.transpose(1, 2), V.transpose(1, 2),
                               {.causal = p.causal});
    };
    double op_err = 0, op_ms = 0, op_tflops = 0;
    if (!std::getenv("TX_ATTN_SKIP_OP")) {
      op();
      op_err = check_rows(p, Q, K, V, res.out.transpose(1, 2).contiguous());
      if (!(op_err <= 1.0)) ++bad;
      op_ms = bench::time_ms(op);
      op_tflops = flops / (op_ms * 1e-3) / 1e12;
    }
    std::printf(
        "%-26s B %3lld H %2lld/%2lld S %5lld D %3lld  %8.4f ms  %6.1f TFLOP/s  err %.3g  "
        "op %6.1f TFLOP/s err %.3g\n",
        r.name.c_str(), static_cast<long long>(p.batch), static_cast<long long>(p.heads),
        static_cast<long long>(p.kv_heads), static_cast<long long>(p.seq_q),
        static_cast<long long>(D), ms, tflops, err, op_tflops, op_err);
    std::fflush(stdout);
    js << (first ? "" : ",\n") << "  {\"name\": \"" << r.name << "\", \"batch\": " << p.batch
       << ", \"heads\": " << p.heads << ", \"kv_heads\": " << p.kv_heads << ", \"seq\": " << p.seq_q
       << ", \"head_dim\": " << D << ", \"causal\": " << (p.causal ? "true" : "false")
       << ", \"bn\": " << r.tiling.bn << ", \"consumers\": " << r.tiling.consumers
       << ", \"tx_ms\": " << ms << ", \"tx_tflops\": " << tflops << ", \"tx_err\": " << err
       << ", \"op_ms\": " << op_ms << ", \"op_tflops\": " << op_tflops << ", \"op_err\": " << op_err
       << "}";
    js.flush();  // a run cut short by its time limit keeps the rows it finished
    first = false;
  }
  js << "\n]\n";
  if (bad) std::printf("%d case(s) over the error bound\n", bad);
  return bad ? 1 : 0;
}
