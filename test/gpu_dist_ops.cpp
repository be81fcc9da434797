// Kernels across GPUs (issue 43): the one-shot all-reduce written in tx and
// a hand-written ring copy through T::peer, one rank per GPU as threads of
// this process (Group::run_local), against float64. Needs 2 GPUs; with one,
// the ranks share it (two streams, both kernels resident at once), which
// checks the kernels but not NVLink -- the suite says which it ran.
// Skipped (exit 77) without a GPU.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "test_support.hpp"
#include "tx/ops/dist.hpp"
#include "tx/runtime/cuda_driver.hpp"
#include "tx/tx.hpp"

using namespace tx;

namespace {

std::vector<Device> rank_devices(int ranks) {
  const int gpus = runtime::device_count();
  std::vector<Device> d;
  for (int r = 0; r < ranks; ++r) d.push_back(Device::cuda(r % gpus));
  static bool said = false;
  if (!said) {
    std::printf("gpu_dist_ops: %d ranks on %d GPU(s)%s\n", ranks, gpus,
                gpus < ranks ? " (ranks share GPUs: no NVLink traffic checked)" : "");
    said = true;
  }
  return d;
}

std::vector<double> random_values(std::size_t n, std::uint64_t seed, DType t) {
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<double> d(-2.0, 2.0);
  std::vector<double> v(n);
  for (double& x : v) x = quantize(d(g), t);
  return v;
}

double unit_roundoff(DType t) {
  return t == bf16 ? std::ldexp(1.0, -8) : t == f16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -24);
}

}  // namespace

TEST_CASE("gpu dist one-shot all-reduce against float64") {
  const int gpus = runtime::device_count();
  for (int ranks : {2, 4}) {
    if (ranks > 2 && gpus < ranks) continue;  // 4 ranks on 4 GPUs only
    for (DType dtype : {f32, bf16, f16}) {
      for (std::int64_t n : {std::int64_t{1}, std::int64_t{4097}, std::int64_t{1} << 20,
                             (std::int64_t{12} << 20) + 8}) {
        for (auto [op, algorithm] :
             {std::pair{dist::ReduceOp::sum, ops::AllReduceAlgorithm::one_shot},
              std::pair{dist::ReduceOp::max, ops::AllReduceAlgorithm::one_shot},
              std::pair{dist::ReduceOp::sum, ops::AllReduceAlgorithm::two_shot}}) {
          CAPTURE(ranks);
          CAPTURE(static_cast<int>(algorithm));
          CAPTURE(dtype.name());
          CAPTURE(n);
          const std::uint64_t seed = tx::test::rng()();
          std::vector<std::vector<double>> in(static_cast<std::size_t>(ranks));
          for (int r = 0; r < ranks; ++r)
            in[static_cast<std::size_t>(r)] = random_values(
                static_cast<std::size_t>(n), seed + static_cast<std::uint64_t>(r), dtype);
          std::mutex mu;
          std::vector<std::vector<double>> out(static_cast<std::size_t>(ranks));
          dist::Group::run_local(rank_devices(ranks), [&](dist::Group& g) {
            StreamGuard on(Stream::create(g.device()));
            ops::AllReduce ar(g, n, dtype);
            Tensor x = Tensor::from_doubles(in[static_cast<std::size_t>(g.rank())], {n}, dtype,
                                            g.device());
            Tensor y = Tensor::empty({n}, dtype, g.device());
            y.fill_bits(0x7fc0);
            for (int rep = 0; rep < 3; ++rep)
              ar(x, y, {.op = op, .algorithm = algorithm});  // epochs reuse the staging
            auto got = y.to_doubles();
            std::lock_guard<std::mutex> lock(mu);
            out[static_cast<std::size_t>(g.rank())] = std::move(got);
          });
          for (int r = 0; r < ranks; ++r) {
            const auto& got = out[static_cast<std::size_t>(r)];
            REQUIRE(got.size() == static_cast<std::size_t>(n));
            CHECK(got == out[0]);
            for (std::int64_t i = 0; i < n; ++i) {
              double want = in[0][static_cast<std::size_t>(i)];
              for (int q = 1; q < ranks; ++q) {
                const double v = in[static_cast<std::size_t>(q)][static_cast<std::size_t>(i)];
                want = op == dist::ReduceOp::sum ? want + v : std::max(want, v);
              }
              const double bound = ranks * 8.0 * std::ldexp(1.0, -24) +
                                   std::abs(want) * unit_roundoff(dtype) * 1.0001;
              if (!(std::abs(got[static_cast<std::size_t>(i)] - want) <= bound)) {
                INFO("element " << i << " want " << want << " got "
                                << got[static_cast<std::size_t>(i)]);
                REQUIRE(false);
              }
            }
          }
        }
      }
    }
  }
}
