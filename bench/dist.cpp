// bench/dist: collectives across the GPUs of one host, one rank per GPU as
// threads of this process (tx::dist::Group::run_local), in one run:
//   - tx's all-reduce (written in tx: ops::AllReduce) against NCCL's
//     (Group::nccl_all_reduce, on the same group), bf16 sum, per call,
//     back to back: small messages (latency) and large ones (bus bandwidth,
//     2 (n - 1) / n bytes / time, NCCL's definition);
//   - the copy bandwidth of one GPU (device to device), for scale.
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

#include "tx/runtime/cuda_driver.hpp"
#include "tx/tx.hpp"

using namespace tx;

namespace {

struct Row {
  std::string what;
  std::int64_t bytes = 0;
  double tx_us = 0, nccl_us = 0;
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
      // Keep the slowest rank's time.
      std::lock_guard<std::mutex> lock(mu);
      Row& r = rows[k];
      r.what = "all_reduce bf16 sum";
      r.bytes = sizes[k];
      r.tx_us = std::max(r.tx_us, t_tx);
      r.nccl_us = std::max(r.nccl_us, t_nccl);
    }
  });
  std::printf("%d GPUs (%s), %s\n", ranks, runtime::device_info(0).name.c_str(),
              "per call, back to back, slowest rank");
  std::printf("%-22s %10s %10s %10s %9s %12s %12s\n", "what", "bytes", "tx us", "NCCL us",
              "tx/NCCL", "tx busbw", "NCCL busbw");
  for (const Row& r : rows) {
    const double f = 2.0 * (ranks - 1) / ranks * static_cast<double>(r.bytes) / 1e3;  // GB/s * us
    std::printf("%-22s %10lld %10.2f %10.2f %9.3f %9.1f GB/s %9.1f GB/s\n", r.what.c_str(),
                static_cast<long long>(r.bytes), r.tx_us, r.nccl_us, r.nccl_us / r.tx_us,
                f / r.tx_us, f / r.nccl_us);
  }
  for (const Row& r : rows)
    std::printf(
        "{\"what\": \"%s\", \"ranks\": %d, \"bytes\": %lld, \"tx_us\": %.3f, \"nccl_us\": %.3f}\n",
        r.what.c_str(), ranks, static_cast<long long>(r.bytes), r.tx_us, r.nccl_us);
  return 0;
}
