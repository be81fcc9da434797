// bench/dist: collectives across the GPUs of one host, one rank per GPU as
// threads of this process (tx::dist::Group::run_local), in one run:
//   - tx's all-reduce (written in tx: ops::AllReduce) against NCCL's
//     (Group::nccl_all_reduce, on the same group), bf16 sum, per call,
//     back to back: small messages (latency) and large ones (bus bandwidth,
//     2 (n - 1) / n bytes / time, NCCL's definition); tx's all-gather and
//     reduce-scatter (ops::AllGather / ReduceScatter) against NCCL's, bus
//     bandwidth (n - 1) / n of the gathered bytes / time; the small
//     all-reduces also from CUDA graph replays (50 calls captured per rank,
//     both tx's and NCCL's): the GPUs' time without the host's launches,
//     which with every rank a thread of one process queue on the driver;
//   - all_gather(A) @ B (ops::AllGatherMatmul), fused against the sequential
//     NCCL all-gather + tx matmul and the GEMM alone, at the shapes
//     (M rows split over the ranks, K 8192, N 28672 split over the ranks)
//     and a small one; bf16, random data.
// torch symmetric memory is timed by bench/dist_torch.py (torchrun).
//
//   bench_dist [--ranks N] [--iters K]      (default: every GPU, 50 iterations)
// Prints a table and one JSON line per row (for docs/).
#include "tx/ops/dist.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "tx/ops/matmul.hpp"
#include "tx/runtime/cuda_driver.hpp"
#include "tx/tx.hpp"

using namespace tx;

namespace {

// Uniform values in [-1, 1) on `d` (a GEMM's power, hence its clock, depends
// on the data: zeros or constants run faster than real activations).
Tensor random_on(std::vector<std::int64_t> shape, DType t, Device d, std::uint64_t seed) {
  std::int64_t n = 1;
  for (auto e : shape) n *= e;
  std::vector<double> v(static_cast<std::size_t>(n));
  std::uint64_t x = 88172645463325252ull ^ seed;
  for (auto& y : v) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    y = static_cast<double>(x % 2000) / 1000.0 - 1.0;
  }
  return Tensor::from_doubles(v, std::move(shape), t, d);
}

struct GemmRow {
  std::int64_t M = 0, K = 0, N = 0;  // N: this rank's columns
  std::string plan;
  double gemm_us = 0, seq_us = 0, fused_us = 0;
};

struct Row {
  std::string what;
  std::int64_t bytes = 0;  // all-reduce: the tensor; all-gather / reduce-scatter: the gathered one
  double tx_us = 0, nccl_us = 0;
  double tx_graph_us = 0, nccl_graph_us = 0;  // from graph replays (small all-reduces), else 0
  double bus = 2.0;  // bus bytes per byte, times ranks / (ranks - 1): 2 all-reduce, 1 the others
};

// Microseconds per call of fn on this rank's stream: `iters` calls between
// two events after a warm-up, the ranks lined up by a barrier first. The
// slowest rank's time is the collective's.
template <class F>
double time_calls(const dist::Group& g, const Stream& s, int iters, F&& fn) {
  for (int i = 0; i < 5; ++i) fn();
  s.synchronize();
  g.barrier();
  Event start(g.device()), stop(g.device());
  start.record(s);
  for (int i = 0; i < iters; ++i) fn();
  stop.record(s);
  stop.synchronize();
  return static_cast<double>(stop.elapsed_since(start)) * 1000.0 / iters;
}

// The same: `iters` calls captured into a CUDA graph on every rank (set-up
// done by a call outside the capture), one replay timed after the ranks
// line up. -1 when the calls cannot be captured.
template <class F>
double time_graph(const dist::Group& g, const Stream& s, int iters, F&& fn) {
  fn();
  s.synchronize();
  g.barrier();
  Graph graph;
  try {
    graph = Graph::capture(
        [&] {
          for (int i = 0; i < iters; ++i) fn();
        },
        g.device());
  } catch (const Error& e) {
    std::fprintf(stderr, "rank %d: capture failed: %s\n", g.rank(), e.what());
    g.barrier();
    return -1;
  }
  graph.replay(s);  // warm-up
  s.synchronize();
  g.barrier();
  Event start(g.device()), stop(g.device());
  start.record(s);
  graph.replay(s);
  stop.record(s);
  stop.synchronize();
  return static_cast<double>(stop.elapsed_since(start)) * 1000.0 / iters;
}

}  // namespace

int main(int argc, char** argv) {
  int ranks = runtime::device_count();
  int iters = 50;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--ranks") && i + 1 < argc) ranks = std::atoi(argv[++i]);
    if (!std::strcmp(argv[i], "--iters") && i + 1 < argc) iters = std::atoi(argv[++i]);
  }
  if (ranks < 2) {
    std::printf("bench_dist: needs 2 GPUs or more (this machine has %d)\n",
                runtime::device_count());
    return 77;
  }
  std::vector<Device> devices;
  for (int r = 0; r < ranks; ++r) devices.push_back(Device::cuda(r));
  const std::vector<std::int64_t> sizes = {8 << 10, 32 << 10, 128 << 10, 512 << 10,
                                           2 << 20, 16 << 20, 64 << 20,  256 << 20};
  std::mutex mu;
  std::vector<Row> rows(sizes.size());
  dist::Group::run_local(devices, [&](dist::Group& g) {
    Stream s = Stream::create(g.device());
    StreamGuard on(s);
    const std::int64_t max_elems = sizes.back() / 2;
    ops::AllReduce ar(g, max_elems, bf16);
    for (std::size_t k = 0; k < sizes.size(); ++k) {
      const std::int64_t n = sizes[k] / 2;
      Tensor x = Tensor::empty({n}, bf16, g.device());
      x.fill_bits(0x3f80);  // 1.0: sums stay exact whatever the rank count
      Tensor y = Tensor::empty({n}, bf16, g.device());
      const int it = sizes[k] >= (64 << 20) ? std::max(5, iters / 5) : iters;
      double t_tx = time_calls(g, s, it, [&] { ar(x, y); });
      double t_nccl = time_calls(g, s, it, [&] { g.nccl_all_reduce(x); });
      double g_tx = 0, g_nccl = 0;
      if (sizes[k] <= (2 << 20)) {
        g_tx = time_graph(g, s, it, [&] { ar(x, y); });
        g_nccl = time_graph(g, s, it, [&] { g.nccl_all_reduce(x); });
      }
      // Keep the slowest rank's time.
      std::lock_guard<std::mutex> lock(mu);
      Row& r = rows[k];
      r.what = "all_reduce bf16 sum";
      r.bytes = sizes[k];
      r.tx_us = std::max(r.tx_us, t_tx);
      r.nccl_us = std::max(r.nccl_us, t_nccl);
      r.tx_graph_us = g_tx < 0 || r.tx_graph_us < 0 ? -1 : std::max(r.tx_graph_us, g_tx);
      r.nccl_graph_us = g_nccl < 0 || r.nccl_graph_us < 0 ? -1 : std::max(r.nccl_graph_us, g_nccl);
    }
  });
  // tx's all-gather and reduce-scatter against NCCL's, the gathered size
  // from 16 KiB to 64 MiB on 2 ranks.
  const std::vector<std::int64_t> part_sizes = {8 << 10, 32 << 10, 128 << 10, 512 << 10,
                                                2 << 20, 8 << 20,  32 << 20};
  std::vector<Row> coll_rows(2 * part_sizes.size());
  dist::Group::run_local(devices, [&](dist::Group& g) {
    Stream s = Stream::create(g.device());
    StreamGuard on(s);
    const std::int64_t max_elems = part_sizes.back() / 2;
    ops::AllGather ag(g, max_elems, bf16);
    ops::ReduceScatter rs(g, max_elems, bf16);
    for (std::size_t k = 0; k < part_sizes.size(); ++k) {
      const std::int64_t n = part_sizes[k] / 2, total = n * ranks;
      Tensor x = Tensor::empty({n}, bf16, g.device());
      x.fill_bits(0x3f80);
      Tensor all = Tensor::empty({total}, bf16, g.device());
      all.fill_bits(0x3f80);
      Tensor part = Tensor::empty({n}, bf16, g.device());
      const int it = part_sizes[k] >= (8 << 20) ? std::max(5, iters / 5) : iters;
      const double ag_tx = time_calls(g, s, it, [&] { ag(x, all); });
      const double ag_nccl = time_calls(g, s, it, [&] { g.nccl_all_gather(x, all); });
      const double rs_tx = time_calls(g, s, it, [&] { rs(all, part); });
      const double rs_nccl = time_calls(g, s, it, [&] { g.nccl_reduce_scatter(all, part); });
      std::lock_guard<std::mutex> lock(mu);
      Row& a = coll_rows[2 * k];
      a.what = "all_gather bf16";
      Row& r = coll_rows[2 * k + 1];
      r.what = "reduce_scatter bf16 sum";
      for (Row* row : {&a, &r}) {
        row->bytes = total * 2;
        row->bus = 1.0;
      }
      a.tx_us = std::max(a.tx_us, ag_tx);
      a.nccl_us = std::max(a.nccl_us, ag_nccl);
      r.tx_us = std::max(r.tx_us, rs_tx);
      r.nccl_us = std::max(r.nccl_us, rs_nccl);
    }
  });
  rows.insert(rows.end(), coll_rows.begin(), coll_rows.end());
  // all_gather(A) @ B: (M total rows, K, N total columns split over the ranks).
  struct Shape {
    std::int64_t M, K, N;
  };
  const std::vector<Shape> shapes = {{512, 4096, 4096}, {2048, 8192, 28672}, {8192, 8192, 28672}};
  std::vector<GemmRow> gemm_rows(shapes.size());
  dist::Group::run_local(devices, [&](dist::Group& g) {
    Stream s = Stream::create(g.device());
    StreamGuard on(s);
    for (std::size_t k = 0; k < shapes.size(); ++k) {
      const Shape sh = shapes[k];
      const std::int64_t m = sh.M / ranks, n = sh.N / ranks;
      ops::AllGatherMatmul agm(g, m, sh.K, bf16);
      Tensor a = random_on({m, sh.K}, bf16, g.device(), 1 + static_cast<std::uint64_t>(g.rank()));
      Tensor b = random_on({sh.K, n}, bf16, g.device(), 99);
      Tensor full = random_on({sh.M, sh.K}, bf16, g.device(), 7);
      const int it = std::max(5, iters / 5);
      double t_gemm = time_calls(g, s, it, [&] { ops::matmul(full, b); });
      double t_seq =
          time_calls(g, s, it, [&] { agm(a, b, {.path = ops::FusionPath::sequential}); });
      double t_fused = time_calls(g, s, it, [&] { agm(a, b, {.path = ops::FusionPath::fused}); });
      std::lock_guard<std::mutex> lock(mu);
      GemmRow& r = gemm_rows[k];
      r.M = sh.M;
      r.K = sh.K;
      r.N = n;
      r.plan = agm.plan(m, n);
      r.gemm_us = std::max(r.gemm_us, t_gemm);
      r.seq_us = std::max(r.seq_us, t_seq);
      r.fused_us = std::max(r.fused_us, t_fused);
    }
  });
  // matmul_reduce_scatter: (M rows, K split over the ranks, N).
  const std::vector<Shape> rs_shapes = {
      {512, 4096, 4096}, {2048, 28672, 8192}, {8192, 28672, 8192}};
  std::vector<GemmRow> rs_rows(rs_shapes.size());
  dist::Group::run_local(devices, [&](dist::Group& g) {
    Stream s = Stream::create(g.device());
    StreamGuard on(s);
    for (std::size_t k = 0; k < rs_shapes.size(); ++k) {
      const Shape sh = rs_shapes[k];
      const std::int64_t m = sh.M / ranks, kr = sh.K / ranks;
      ops::MatmulReduceScatter mrs(g, m, sh.N, bf16);
      Tensor a = random_on({sh.M, kr}, bf16, g.device(), 1 + static_cast<std::uint64_t>(g.rank()));
      Tensor b = random_on({kr, sh.N}, bf16, g.device(), 50 + static_cast<std::uint64_t>(g.rank()));
      const int it = std::max(5, iters / 5);
      double t_gemm = time_calls(g, s, it, [&] { ops::matmul(a, b); });
      double t_seq =
          time_calls(g, s, it, [&] { mrs(a, b, {.path = ops::FusionPath::sequential}); });
      double t_fused = time_calls(g, s, it, [&] { mrs(a, b, {.path = ops::FusionPath::fused}); });
      std::lock_guard<std::mutex> lock(mu);
      GemmRow& r = rs_rows[k];
      r.M = sh.M;
      r.K = kr;
      r.N = sh.N;
      r.plan = mrs.plan(m, kr);
      r.gemm_us = std::max(r.gemm_us, t_gemm);
      r.seq_us = std::max(r.seq_us, t_seq);
      r.fused_us = std::max(r.fused_us, t_fused);
    }
  });
  std::printf("%d GPUs (%s), %s\n", ranks, runtime::device_info(0).name.c_str(),
              "per call, back to back, slowest rank");
  std::printf("%-22s %10s %10s %10s %9s %12s %12s %14s %14s\n", "what", "bytes", "tx us", "NCCL us",
              "tx/NCCL", "tx busbw", "NCCL busbw", "tx graph us", "NCCL graph us");
  for (const Row& r : rows) {
    const double f = r.bus * (ranks - 1) / ranks * static_cast<double>(r.bytes) / 1e3;  // GB/s * us
    std::printf("%-22s %10lld %10.2f %10.2f %9.3f %9.1f GB/s %9.1f GB/s %14.2f %14.2f\n",
                r.what.c_str(), static_cast<long long>(r.bytes), r.tx_us, r.nccl_us,
                r.nccl_us / r.tx_us, f / r.tx_us, f / r.nccl_us, r.tx_graph_us, r.nccl_graph_us);
  }
  std::printf("\nall_gather(A) @ B, bf16, per call, slowest rank (N: this rank's columns)\n");
  std::printf("%6s %6s %6s %12s %12s %12s %9s %9s  %s\n", "M", "K", "N", "GEMM us", "seq us",
              "fused us", "seq/fused", "TFLOP/s", "plan");
  for (const GemmRow& r : gemm_rows)
    std::printf("%6lld %6lld %6lld %12.1f %12.1f %12.1f %9.3f %9.1f  %s\n",
                static_cast<long long>(r.M), static_cast<long long>(r.K),
                static_cast<long long>(r.N), r.gemm_us, r.seq_us, r.fused_us, r.seq_us / r.fused_us,
                2.0 * r.M * r.N * r.K / r.fused_us / 1e6, r.plan.c_str());
  for (const GemmRow& r : gemm_rows)
    std::printf(
        "{\"what\": \"all_gather_matmul bf16\", \"ranks\": %d, \"M\": %lld, \"K\": "
        "%lld, \"N_rank\": %lld, \"gemm_us\": %.1f, \"seq_us\": %.1f, \"fused_us\": "
        "%.1f}\n",
        ranks, static_cast<long long>(r.M), static_cast<long long>(r.K),
        static_cast<long long>(r.N), r.gemm_us, r.seq_us, r.fused_us);
  std::printf("\nmatmul_reduce_scatter, bf16, per call, slowest rank (K: this rank's shard)\n");
  std::printf("%6s %6s %6s %12s %12s %12s %9s  %s\n", "M", "K", "N", "GEMM us", "seq us",
              "fused us", "seq/fused", "plan");
  for (const GemmRow& r : rs_rows)
    std::printf("%6lld %6lld %6lld %12.1f %12.1f %12.1f %9.3f  %s\n", static_cast<long long>(r.M),
                static_cast<long long>(r.K), static_cast<long long>(r.N), r.gemm_us, r.seq_us,
                r.fused_us, r.seq_us / r.fused_us, r.plan.c_str());
  for (const GemmRow& r : rs_rows)
    std::printf(
        "{\"what\": \"matmul_reduce_scatter bf16\", \"ranks\": %d, \"M\": %lld, "
        "\"K_rank\": %lld, \"N\": %lld, \"gemm_us\": %.1f, \"seq_us\": %.1f, "
        "\"fused_us\": %.1f}\n",
        ranks, static_cast<long long>(r.M), static_cast<long long>(r.K),
        static_cast<long long>(r.N), r.gemm_us, r.seq_us, r.fused_us);
  for (const Row& r : rows)
    std::printf(
        "{\"what\": \"%s\", \"ranks\": %d, \"bytes\": %lld, \"tx_us\": %.3f, \"nccl_us\": %.3f, "
        "\"tx_graph_us\": %.3f, \"nccl_graph_us\": %.3f}\n",
        r.what.c_str(), ranks, static_cast<long long>(r.bytes), r.tx_us, r.nccl_us, r.tx_graph_us,
        r.nccl_graph_us);
  return 0;
}
