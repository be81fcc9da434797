// Kernels across GPUs (issue 43): the one-shot all-reduce written in tx and
// a hand-written ring copy through T::peer, one rank per GPU as threads of
// this process (Group::run_local), against float64. Needs 2 GPUs; with one,
// the ranks share it (two streams, both kernels resident at once), which
// checks the kernels but not NVLink -- the suite says which it ran.
// Skipped (exit 77) without a GPU.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <random>
#include <string>
#include <thread>
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
              std::pair{dist::ReduceOp::sum, ops::AllReduceAlgorithm::two_shot},
              std::pair{dist::ReduceOp::sum, ops::AllReduceAlgorithm::nccl}}) {
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

TEST_CASE("gpu dist all_gather_matmul fused and sequential against float64") {
  // Shapes the fused wgmma kernel takes (m a multiple of 128, N of 256, K of
  // 64), one only the sequential path takes, and B in both layouts; three
  // calls each, fresh A rows every call (the epochs reuse the gathered
  // buffers), the output poisoned before each.
  struct Case {
    int ranks;
    DType dtype;
    std::int64_t m, K, N;
    ops::FusionPath path;
    bool b_transposed;
    const char* plan;  // how the plan starts
  };
  const int gpus = runtime::device_count();
  const std::vector<Case> cases = {
      {2, bf16, 256, 512, 512, ops::FusionPath::fused, false, "fused wgmma"},
      {2, f16, 128, 1024, 256, ops::FusionPath::fused, true, "fused wgmma"},
      {2, bf16, 256, 512, 512, ops::FusionPath::sequential, false, "sequential (asked)"},
      {2, bf16, 256, 512, 512, ops::FusionPath::automatic, false, "sequential (a GEMM of"},
      {2, bf16, 100, 64, 72, ops::FusionPath::automatic, false, "sequential (no wgmma"},
      {4, bf16, 128, 256, 256, ops::FusionPath::fused, false, "fused wgmma"},
  };
  for (const Case& c : cases) {
    if (c.ranks > 2 && gpus < c.ranks) continue;
    CAPTURE(c.ranks);
    CAPTURE(c.dtype.name());
    CAPTURE(c.m);
    CAPTURE(c.plan);
    const std::uint64_t seed = tx::test::rng()();
    const std::int64_t M = c.ranks * c.m;
    std::vector<double> b = random_values(static_cast<std::size_t>(c.K * c.N), seed, c.dtype);
    constexpr int kCalls = 3;
    std::vector<std::vector<std::vector<double>>> a(kCalls);
    for (int call = 0; call < kCalls; ++call)
      for (int r = 0; r < c.ranks; ++r)
        a[static_cast<std::size_t>(call)].push_back(
            random_values(static_cast<std::size_t>(c.m * c.K),
                          seed + 1 + static_cast<std::uint64_t>(call * 16 + r), c.dtype));
    std::mutex mu;
    std::vector<std::vector<std::vector<double>>> got(
        kCalls, std::vector<std::vector<double>>(static_cast<std::size_t>(c.ranks)));
    std::string plan;
    dist::Group::run_local(rank_devices(c.ranks), [&](dist::Group& g) {
      StreamGuard on(Stream::create(g.device()));
      ops::AllGatherMatmul agm(g, c.m, c.K, c.dtype);
      Tensor bt = Tensor::from_doubles(b, {c.K, c.N}, c.dtype, g.device());
      if (c.b_transposed) bt = bt.transpose(0, 1).contiguous().transpose(0, 1);
      std::vector<Tensor> outs;
      for (int call = 0; call < kCalls; ++call) {
        Tensor x = Tensor::from_doubles(
            a[static_cast<std::size_t>(call)][static_cast<std::size_t>(g.rank())], {c.m, c.K},
            c.dtype, g.device());
        outs.push_back(agm(x, bt, {.path = c.path}));
      }
      std::lock_guard<std::mutex> lock(mu);
      for (int call = 0; call < kCalls; ++call)
        got[static_cast<std::size_t>(call)][static_cast<std::size_t>(g.rank())] =
            outs[static_cast<std::size_t>(call)].to_doubles();
      if (g.rank() == 0) plan = agm.plan(c.m, c.N, {.path = c.path});
    });
    INFO(plan);
    CHECK(plan.find(c.plan) == 0);
    for (int call = 0; call < kCalls; ++call) {
      const auto& rows = a[static_cast<std::size_t>(call)];
      for (int r = 0; r < c.ranks; ++r) {
        const auto& out = got[static_cast<std::size_t>(call)][static_cast<std::size_t>(r)];
        REQUIRE(out.size() == static_cast<std::size_t>(M * c.N));
        int bad = 0;
        for (std::int64_t i = 0; i < M && bad < 5; ++i)
          for (std::int64_t j = 0; j < c.N; ++j) {
            double want = 0, scale = 0;
            for (std::int64_t k = 0; k < c.K; ++k) {
              const double p = rows[static_cast<std::size_t>(i / c.m)]
                                   [static_cast<std::size_t>(i % c.m * c.K + k)] *
                               b[static_cast<std::size_t>(k * c.N + j)];
              want += p;
              scale += std::abs(p);
            }
            const double bound = c.K * scale * std::ldexp(1.0, -24) +
                                 std::abs(want) * unit_roundoff(c.dtype) * 1.0001;
            const double v = out[static_cast<std::size_t>(i * c.N + j)];
            if (!(std::abs(v - want) <= bound)) {
              if (bad++ < 5)
                MESSAGE("call " << call << " rank " << r << " C[" << i << ", " << j << "] want "
                                << want << " got " << v);
            }
          }
        CHECK(bad == 0);
      }
    }
  }
}

TEST_CASE("gpu dist the fused paths are chosen for long GEMMs only") {
  dist::Group::run_local(rank_devices(2), [&](dist::Group& g) {
    ops::AllGatherMatmul agm(g, 1024, 8192, bf16);
    ops::MatmulReduceScatter mrs(g, 1024, 8192, bf16);
    if (g.rank() != 0) return;
    // The shapes (M 2048 over 2 ranks): 481 GFLOP per rank.
    CHECK(agm.plan(1024, 14336).find("fused wgmma") == 0);
    CHECK(mrs.plan(1024, 14336).find("fused") == 0);
    // 2 x 128 x 256 x 8192: 1 GFLOP, below the threshold.
    CHECK(agm.plan(64, 256).find("sequential (a GEMM of") == 0);
    CHECK(mrs.plan(64, 512).find("sequential (a GEMM of") == 0);
  });
}

TEST_CASE("gpu dist matmul_reduce_scatter fused and sequential against float64") {
  struct Case {
    int ranks;
    DType dtype;
    std::int64_t m, K, N;  // K: each rank's shard
    ops::FusionPath path;
  };
  const int gpus = runtime::device_count();
  const std::vector<Case> cases = {
      {2, bf16, 256, 512, 512, ops::FusionPath::fused},
      {2, f16, 128, 256, 1024, ops::FusionPath::fused},
      {2, bf16, 200, 64, 72, ops::FusionPath::automatic},  // partial tiles
      {2, bf16, 256, 512, 512, ops::FusionPath::sequential},
      {4, bf16, 128, 256, 256, ops::FusionPath::fused},
  };
  for (const Case& c : cases) {
    if (c.ranks > 2 && gpus < c.ranks) continue;
    CAPTURE(c.ranks);
    CAPTURE(c.dtype.name());
    CAPTURE(c.m);
    CAPTURE(static_cast<int>(c.path));
    const std::uint64_t seed = tx::test::rng()();
    const std::int64_t M = c.ranks * c.m;
    constexpr int kCalls = 3;
    // a[call][rank]: (M, K); b[rank]: (K, N).
    std::vector<std::vector<std::vector<double>>> a(kCalls);
    std::vector<std::vector<double>> b;
    for (int r = 0; r < c.ranks; ++r)
      b.push_back(random_values(static_cast<std::size_t>(c.K * c.N),
                                seed + 100 + static_cast<std::uint64_t>(r), c.dtype));
    for (int call = 0; call < kCalls; ++call)
      for (int r = 0; r < c.ranks; ++r)
        a[static_cast<std::size_t>(call)].push_back(
            random_values(static_cast<std::size_t>(M * c.K),
                          seed + 1 + static_cast<std::uint64_t>(call * 16 + r), c.dtype));
    std::mutex mu;
    std::vector<std::vector<std::vector<double>>> got(
        kCalls, std::vector<std::vector<double>>(static_cast<std::size_t>(c.ranks)));
    dist::Group::run_local(rank_devices(c.ranks), [&](dist::Group& g) {
      StreamGuard on(Stream::create(g.device()));
      const auto me = static_cast<std::size_t>(g.rank());
      ops::MatmulReduceScatter mrs(g, c.m, c.N, c.dtype);
      Tensor bt = Tensor::from_doubles(b[me], {c.K, c.N}, c.dtype, g.device());
      std::vector<Tensor> outs;
      for (int call = 0; call < kCalls; ++call) {
        Tensor x = Tensor::from_doubles(a[static_cast<std::size_t>(call)][me], {M, c.K}, c.dtype,
                                        g.device());
        outs.push_back(mrs(x, bt, {.path = c.path}));
      }
      std::lock_guard<std::mutex> lock(mu);
      for (int call = 0; call < kCalls; ++call)
        got[static_cast<std::size_t>(call)][me] = outs[static_cast<std::size_t>(call)].to_doubles();
    });
    for (int call = 0; call < kCalls; ++call)
      for (int r = 0; r < c.ranks; ++r) {
        const auto& out = got[static_cast<std::size_t>(call)][static_cast<std::size_t>(r)];
        REQUIRE(out.size() == static_cast<std::size_t>(c.m * c.N));
        int bad = 0;
        for (std::int64_t i = 0; i < c.m; ++i)
          for (std::int64_t j = 0; j < c.N; ++j) {
            double want = 0, bound = 0;
            for (int q = 0; q < c.ranks; ++q) {
              double p = 0, scale = 0;
              for (std::int64_t k = 0; k < c.K; ++k) {
                const double v =
                    a[static_cast<std::size_t>(call)][static_cast<std::size_t>(q)]
                     [static_cast<std::size_t>((r * c.m + i) * c.K + k)] *
                    b[static_cast<std::size_t>(q)][static_cast<std::size_t>(k * c.N + j)];
                p += v;
                scale += std::abs(v);
              }
              want += p;
              bound += c.K * scale * std::ldexp(1.0, -24) + std::abs(p) * unit_roundoff(c.dtype);
            }
            bound += std::abs(want) * unit_roundoff(c.dtype) * 1.0001;
            const double v = out[static_cast<std::size_t>(i * c.N + j)];
            if (!(std::abs(v - want) <= bound) && bad++ < 5)
              MESSAGE("call " << call << " rank " << r << " C[" << i << ", " << j << "] want "
                              << want << " got " << v);
          }
        CHECK(bad == 0);
      }
  }
}

TEST_CASE("gpu dist all_gather and reduce_scatter written in tx against float64") {
  const int gpus = runtime::device_count();
  for (int ranks : {2, 4}) {
    if (ranks > 2 && gpus < ranks) continue;
    for (DType dtype : {f32, bf16}) {
      for (std::int64_t n : {std::int64_t{8}, std::int64_t{4096} * 33, std::int64_t{3} << 20}) {
        CAPTURE(ranks);
        CAPTURE(dtype.name());
        CAPTURE(n);
        const std::uint64_t seed = tx::test::rng()();
        const auto R = static_cast<std::size_t>(ranks);
        std::vector<std::vector<double>> in(R);
        for (std::size_t r = 0; r < R; ++r)
          in[r] = random_values(R * static_cast<std::size_t>(n), seed + r, dtype);
        std::mutex mu;
        std::vector<std::vector<double>> gathered(R), scattered(R);
        dist::Group::run_local(rank_devices(ranks), [&](dist::Group& g) {
          StreamGuard on(Stream::create(g.device()));
          const auto me = static_cast<std::size_t>(g.rank());
          ops::AllGather ag(g, n, dtype);
          ops::ReduceScatter rs(g, n, dtype);
          Tensor x = Tensor::from_doubles(in[me], {ranks * n}, dtype, g.device());
          Tensor all, out = Tensor::empty({n}, dtype, g.device());
          for (int rep = 0; rep < 3; ++rep) {  // epochs reuse the staging
            all = ag(x.slice(0, 0, n));
            out.fill_bits(0x7fc0);
            rs(x, out);
          }
          auto a = all.to_doubles(), o = out.to_doubles();
          std::lock_guard<std::mutex> lock(mu);
          gathered[me] = std::move(a);
          scattered[me] = std::move(o);
        });
        for (std::size_t r = 0; r < R; ++r) {
          int bad = 0;
          for (std::size_t q = 0; q < R; ++q)
            for (std::size_t i = 0; i < static_cast<std::size_t>(n); ++i)
              bad += gathered[r][q * static_cast<std::size_t>(n) + i] != in[q][i];
          CHECK(bad == 0);
          for (std::size_t i = 0; i < static_cast<std::size_t>(n); ++i) {
            double want = 0;
            for (std::size_t q = 0; q < R; ++q) want += in[q][r * static_cast<std::size_t>(n) + i];
            const double bound =
                ranks * 8.0 * std::ldexp(1.0, -24) + std::abs(want) * unit_roundoff(dtype) * 1.0001;
            if (!(std::abs(scattered[r][i] - want) <= bound)) {
              INFO("rank " << r << " element " << i << " want " << want << " got "
                           << scattered[r][i]);
              REQUIRE(false);
            }
          }
        }
      }
    }
  }
}

// The collectives written in tx keep their call counts on the device
// (ops/src/dist_counters.hpp): captured in a CUDA graph on every rank, each
// replay is a new call -- new flag values, the other staging half. A graph
// of a small all-reduce (16 CTAs), a large one (128), an all-gather and a
// reduce-scatter, replayed three times with fresh inputs written in place
// before each replay, every result against float64; then direct calls on the
// same objects (the counters the replays left). The fused GEMM paths, whose
// counts live on the host, refuse to be captured.
TEST_CASE("gpu dist collectives captured in a CUDA graph: every replay is a new call") {
  const int ranks = 2;
  const std::int64_t small = 4096 + 8, large = std::int64_t{1} << 20, n = 8192;
  const auto R = static_cast<std::size_t>(ranks);
  const int replays = 3;
  // inputs[rep][rank]: the all-reduces' (large, of which small is a prefix),
  // and the reduce-scatter's (ranks * n; its first n also feed the all-gather).
  std::vector<std::vector<std::vector<double>>> ar_in(replays + 1), rs_in(replays + 1);
  for (int rep = 0; rep <= replays; ++rep)
    for (std::size_t r = 0; r < R; ++r) {
      ar_in[static_cast<std::size_t>(rep)].push_back(
          random_values(static_cast<std::size_t>(large), tx::test::rng()(), bf16));
      rs_in[static_cast<std::size_t>(rep)].push_back(
          random_values(R * static_cast<std::size_t>(n), tx::test::rng()(), bf16));
    }
  struct Got {
    std::vector<double> small, large, gathered, scattered;
  };
  std::mutex mu;
  std::vector<std::vector<Got>> got(replays + 1, std::vector<Got>(R));
  std::vector<std::string> refused(R);
  dist::Group::run_local(rank_devices(ranks), [&](dist::Group& g) {
    Stream s = Stream::create(g.device());
    StreamGuard on(s);
    const auto me = static_cast<std::size_t>(g.rank());
    ops::AllReduce ar(g, large, bf16);
    ops::AllGather ag(g, n, bf16);
    ops::ReduceScatter rs(g, n, bf16);
    Tensor x = Tensor::empty({large}, bf16, g.device()),
           y_small = Tensor::empty({small}, bf16, g.device()),
           y_large = Tensor::empty({large}, bf16, g.device());
    Tensor z = Tensor::empty({ranks * n}, bf16, g.device()),
           all = Tensor::empty({ranks * n}, bf16, g.device()),
           part = Tensor::empty({n}, bf16, g.device());
    Tensor x_small = x.slice(0, 0, small), z_head = z.slice(0, 0, n);
    auto calls = [&] {
      ar(x_small, y_small);
      ar(x, y_large);
      ag(z_head, all);
      rs(z, part);
    };
    auto load = [&](int rep) {  // this rank's inputs of round rep, in place
      const auto k = static_cast<std::size_t>(rep);
      Tensor a = Tensor::from_doubles(ar_in[k][me], {large}, bf16, g.device());
      Tensor b = Tensor::from_doubles(rs_in[k][me], {ranks * n}, bf16, g.device());
      runtime::copy_device_to_device(reinterpret_cast<runtime::DevicePtr>(x.data_ptr()),
                                     reinterpret_cast<runtime::DevicePtr>(a.data_ptr()),
                                     static_cast<std::size_t>(large) * 2, s.handle());
      runtime::copy_device_to_device(reinterpret_cast<runtime::DevicePtr>(z.data_ptr()),
                                     reinterpret_cast<runtime::DevicePtr>(b.data_ptr()),
                                     static_cast<std::size_t>(ranks * n) * 2, s.handle());
      for (Tensor* t : {&y_small, &y_large, &all, &part}) t->fill_bits(0x7fc0);
      s.synchronize();
      g.barrier();
    };
    auto keep = [&](int rep) {
      Got o{y_small.to_doubles(), y_large.to_doubles(), all.to_doubles(), part.to_doubles()};
      std::lock_guard<std::mutex> lock(mu);
      got[static_cast<std::size_t>(rep)][me] = std::move(o);
    };
    calls();  // compiles and loads every kernel outside the capture
    s.synchronize();
    g.barrier();
    Graph graph = Graph::capture(calls, g.device());
    for (int rep = 0; rep < replays; ++rep) {
      load(rep);
      graph.replay(s);
      s.synchronize();
      keep(rep);
    }
    load(replays);
    calls();  // direct again, after the replays
    s.synchronize();
    keep(replays);
    // The fused all-gather GEMM is refused inside a capture, by name.
    ops::AllGatherMatmul agm(g, 128, 256, bf16);
    Tensor a = Tensor::from_doubles(random_values(128 * 256, tx::test::rng()(), bf16), {128, 256},
                                    bf16, g.device());
    Tensor w = Tensor::from_doubles(random_values(256 * 128, tx::test::rng()(), bf16), {256, 128},
                                    bf16, g.device());
    g.barrier();
    std::string what;
    try {
      Graph::capture([&] { agm(a, w, {.path = ops::FusionPath::fused}); }, g.device());
    } catch (const Error& e) {
      what = e.what();
    }
    std::lock_guard<std::mutex> lock(mu);
    refused[me] = what;
  });
  for (int rep = 0; rep <= replays; ++rep) {
    CAPTURE(rep);
    const auto k = static_cast<std::size_t>(rep);
    for (std::size_t r = 0; r < R; ++r) {
      CAPTURE(r);
      const Got& o = got[k][r];
      REQUIRE(o.large.size() == static_cast<std::size_t>(large));
      int bad = 0;
      for (std::size_t i = 0; i < static_cast<std::size_t>(large); ++i) {
        double want = 0;
        for (std::size_t q = 0; q < R; ++q) want += ar_in[k][q][i];
        const double bound =
            ranks * 8.0 * std::ldexp(1.0, -24) + std::abs(want) * unit_roundoff(bf16) * 1.0001;
        bad += !(std::abs(o.large[i] - want) <= bound);
        if (i < static_cast<std::size_t>(small)) bad += o.small[i] != o.large[i];
      }
      for (std::size_t q = 0; q < R; ++q)
        for (std::size_t i = 0; i < static_cast<std::size_t>(n); ++i)
          bad += o.gathered[q * static_cast<std::size_t>(n) + i] != rs_in[k][q][i];
      for (std::size_t i = 0; i < static_cast<std::size_t>(n); ++i) {
        double want = 0;
        for (std::size_t q = 0; q < R; ++q)
          want += rs_in[k][q][r * static_cast<std::size_t>(n) + i];
        const double bound =
            ranks * 8.0 * std::ldexp(1.0, -24) + std::abs(want) * unit_roundoff(bf16) * 1.0001;
        bad += !(std::abs(o.scattered[i] - want) <= bound);
      }
      CHECK(bad == 0);
    }
  }
  for (const std::string& w : refused) {
    CHECK(w.find("tx.ops.all_gather_matmul") != std::string::npos);
    CHECK(w.find("CUDA graph") != std::string::npos);
  }
}

// A rank's first launch of a kernel right after a multi-GPU op, with nothing
// synchronized: the module load may wait for the rank's GPU to go idle while
// holding a lock the process shares, and that GPU waits for the peers' side
// of the op. Before Group::enqueue_barrier a rank could take that lock before
// a peer had enqueued its side: both stopped (the tensor-parallel sample on 2
// H200, 2026-11-28). A watchdog turns a deadlock into a failure.
TEST_CASE("gpu dist a first kernel load after each multi-GPU op does not stop the peers") {
  std::atomic<bool> finished{false};
  std::thread watchdog([&] {
    for (int i = 0; i < 1200 && !finished.load(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (!finished.load()) {
      std::fprintf(stderr, "gpu_dist_ops: deadlock (no progress in 120 s)\n");
      std::_Exit(1);
    }
  });
  // A kernel no process has loaded before: its name (hence its module) is
  // fresh in every run.
  const std::string fresh = "first_load_" + std::to_string(tx::test::rng()() % 1000000000u);
  int step = 0;
  auto fresh_kernel = [&] {
    return T::prim_func(fresh + "_" + std::to_string(step++), [&](Handle X_ptr, Handle Y_ptr) {
      auto n = T::dim("n");
      auto X = T::match_buffer(X_ptr, {n}, f32);
      auto Y = T::match_buffer(Y_ptr, {n}, f32);
      auto bx = T::cta_id({ceildiv(n, 128)});
      auto tid = T::thread_id({128});
      auto i = T::let(bx * 128 + tid, "i");
      T::if_(i < n, [&] { Y(i) = X(i) * 2.0f + 1.0f; });
    });
  };
  // One kernel per op and rank, compiled before the ranks start (the load,
  // not the compile, is what may block).
  constexpr int kOps = 4;
  std::vector<std::vector<Kernel>> kernels(kOps);
  for (int op = 0; op < kOps; ++op)
    for (int r = 0; r < 2; ++r) kernels[op].push_back(compile(fresh_kernel()));
  const std::int64_t m = 256, K = 512, N = 512, n = 4096;
  const std::uint64_t seed = tx::test::rng()();
  std::vector<std::vector<double>> xs, as;
  for (int r = 0; r < 2; ++r) {
    xs.push_back(random_values(n, seed + static_cast<std::uint64_t>(r), f32));
    as.push_back(random_values(m * K, seed + 10 + static_cast<std::uint64_t>(r), bf16));
  }
  const std::vector<double> b1 = random_values(K * N, seed + 20, bf16),
                            b2 = random_values(N * N, seed + 21, bf16);
  struct Out {
    std::vector<double> y, sum, all, c, e;
  };
  std::vector<Out> out(2);
  dist::Group::run_local(rank_devices(2), [&](dist::Group& g) {
    const int r = g.rank();
    const Device d = g.device();
    const auto& xr = xs[static_cast<std::size_t>(r)];
    Tensor x = Tensor::from_doubles(xr, {n}, f32, d);
    Tensor s = Tensor::from_doubles(xr, {n}, f32, d);
    Tensor y = Tensor::empty({n}, f32, d);
    Tensor a = Tensor::from_doubles(as[static_cast<std::size_t>(r)], {m, K}, bf16, d);
    Tensor w1 = Tensor::from_doubles(b1, {K, N}, bf16, d);
    Tensor w2 = Tensor::from_doubles(b2, {N, N}, bf16, d);
    ops::AllGatherMatmul agm(g, m, K, bf16);
    ops::MatmulReduceScatter mrs(g, m, N, bf16);
    ops::AllReduce ar(g, n, f32);
    ops::AllGather ag(g, n, f32);
    const auto& k = kernels;
    Tensor c = agm(a, w1, {.path = ops::FusionPath::fused});  // (2m, N)
    k[0][static_cast<std::size_t>(r)].launch({x, y}, {.device = d});
    Tensor e = mrs(c, w2, {.path = ops::FusionPath::fused});  // (m, N)
    k[1][static_cast<std::size_t>(r)].launch({x, y}, {.device = d});
    ar(s);
    k[2][static_cast<std::size_t>(r)].launch({x, y}, {.device = d});
    Tensor all = ag(x);
    k[3][static_cast<std::size_t>(r)].launch({x, y}, {.device = d});
    Out& o = out[static_cast<std::size_t>(r)];
    o.y = y.to_doubles();
    o.sum = s.to_doubles();
    o.all = all.to_doubles();
    o.c = c.to_doubles();
    o.e = e.to_doubles();
  });
  finished = true;
  watchdog.join();
  for (int r = 0; r < 2; ++r) {
    CAPTURE(r);
    const Out& o = out[static_cast<std::size_t>(r)];
    int bad = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      const auto u = static_cast<std::size_t>(i);
      bad += o.y[u] != static_cast<double>(static_cast<float>(2 * xs[r][u] + 1));
      bad += o.sum[u] != static_cast<double>(static_cast<float>(xs[0][u] + xs[1][u]));
      for (int q = 0; q < 2; ++q) bad += o.all[static_cast<std::size_t>(q * n + i)] != xs[q][u];
    }
    CHECK(bad == 0);
    // C = [A_0; A_1] B1 (a row of each rank's block), and E = rows r of
    // C B2 summed over ranks -- both ranks compute the same C, so E is 2 C B2
    // at the rank's rows (one row checked).
    for (int q = 0; q < 2; ++q) {
      const std::int64_t row = q * m + 3;
      for (std::int64_t j = 0; j < N; j += 61) {
        double want = 0, scale = 0;
        for (std::int64_t t = 0; t < K; ++t) {
          const double p =
              as[q][static_cast<std::size_t>(3 * K + t)] * b1[static_cast<std::size_t>(t * N + j)];
          want += p;
          scale += std::abs(p);
        }
        CHECK(std::abs(o.c[static_cast<std::size_t>(row * N + j)] - want) <=
              scale * std::ldexp(1.0, -7));
      }
    }
    const std::int64_t row = r * m + 5;  // E's row 5 on this rank
    for (std::int64_t j = 0; j < N; j += 67) {
      double want = 0, scale = 0;
      for (std::int64_t t = 0; t < N; ++t) {
        const double p = out[static_cast<std::size_t>(r)].c[static_cast<std::size_t>(row * N + t)] *
                         b2[static_cast<std::size_t>(t * N + j)];
        want += 2 * p;
        scale += 2 * std::abs(p);
      }
      CHECK(std::abs(o.e[static_cast<std::size_t>(5 * N + j)] - want) <=
            scale * std::ldexp(1.0, -7));
    }
  }
}
