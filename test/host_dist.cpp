// Several ranks on the host (issue 43): ranks are threads of this process
// (tx::dist::Group::run_local), symmetric memory is host memory every rank
// addresses, kernels run on the host JIT as fibers. A hand-written kernel
// that copies through a peer view, the one-shot all-reduce against a float64
// reference (2 and 4 ranks, sum and max, f32 / bf16 / f16, sizes that leave
// partial CTAs), the printed IR and the CUDA of a peer view and the flags,
// and what a kernel author gets wrong: T::peer of a buffer that is not
// symmetric, a plain tensor for a symmetric parameter, a wait nobody
// signals (a timeout naming the flag instead of a hang).
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "test_support.hpp"
#include "tx/ops/dist.hpp"
#include "tx/runtime/nvrtc.hpp"
#include "tx/tx.hpp"

using namespace tx;

namespace {

// Each rank writes `rank * 1000 + i + fresh` into its own copy, signals the
// next rank, waits for the previous one, and copies the previous rank's
// copy (through T::peer) into its output.
PrimFunc ring_copy(int ranks, int n) {
  return T::prim_func("ring_copy", [&](Handle src_ptr, Handle buf_ptr, Handle flags_ptr,
                                       Handle out_ptr, Handle rank_ptr) {
    auto Src = T::match_buffer(src_ptr, {n}, f32);
    auto Buf = T::match_symmetric(buf_ptr, {n}, f32);
    auto Flags = T::match_symmetric(flags_ptr, {ranks}, u32);
    auto Out = T::match_buffer(out_ptr, {n}, f32);
    Var rank = T::match_scalar(rank_ptr, i32, "rank", DimFacts{.min = 0, .max = ranks - 1});
    T::device_entry();
    T::cta_id({1});
    auto tid = T::thread_id({64});
    for (Var k : T::serial((n + 63) / 64, "k")) {
      Var i = T::let(k * 64 + tid, "i");
      T::if_(i < n, [&] { Buf(i) = Src(i); });
    }
    T::cuda::cta_sync();
    Var next = T::let((rank + 1) % ranks, "next");
    Var prev = T::let((rank + ranks - 1) % ranks, "prev");
    T::if_(tid == 0, [&] {
      auto next_flags = T::peer(Flags, next, "next_flags");
      T::dist::signal(next_flags(rank), 1);
      T::dist::wait_until(Flags(prev), 1);
    });
    T::cuda::cta_sync();
    auto from = T::peer(Buf, prev, "from");
    for (Var k : T::serial((n + 63) / 64, "k")) {
      Var i = T::let(k * 64 + tid, "i");
      T::if_(i < n, [&] { Out(i) = from(i); });
    }
  });
}

// A tx error whose message names the op, the operand and the reason.
template <class F>
void check_error(F&& f, const std::string& op, const std::string& operand,
                 const std::string& reason) {
  std::string message;
  try {
    f();
  } catch (const Error& e) {
    message = e.what();
  }
  INFO(message);
  CHECK(message.find(op) != std::string::npos);
  CHECK(message.find(operand) != std::string::npos);
  CHECK(message.find(reason) != std::string::npos);
}

// The unit roundoff of a dtype's round to nearest.
double unit_roundoff(DType t) {
  return t == bf16 ? std::ldexp(1.0, -8) : t == f16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -24);
}

std::vector<double> random_values(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<double> d(-2.0, 2.0);
  std::vector<double> v(n);
  for (double& x : v) x = d(g);
  return v;
}

}  // namespace

TEST_CASE("dist ring copy through T::peer on 2, 4 and 8 host ranks") {
  for (int ranks : {2, 4, 8}) {
    const int n = 200;  // not a multiple of the 64 threads
    const std::uint64_t seed = tx::test::rng()();
    std::mutex mu;
    std::vector<std::vector<double>> inputs(static_cast<std::size_t>(ranks));
    for (int r = 0; r < ranks; ++r)
      inputs[static_cast<std::size_t>(r)] = random_values(n, seed + static_cast<std::uint64_t>(r));
    std::vector<std::vector<double>> outputs(static_cast<std::size_t>(ranks));
    Kernel k = compile(ring_copy(ranks, n), {.device = Device::host()});
    dist::Group::run_local(ranks, [&](dist::Group& g) {
      Tensor src = Tensor::from_doubles(inputs[static_cast<std::size_t>(g.rank())], {n}, f32,
                                        Device::host());
      Tensor buf = g.empty_symmetric({n}, f32);
      Tensor flags = g.symmetric_flags(ranks);
      Tensor out = Tensor::empty({n}, f32, Device::host());
      out.fill_bits(0x7fc0dead);
      k(src, buf, flags, out, g.rank());
      std::lock_guard<std::mutex> lock(mu);
      outputs[static_cast<std::size_t>(g.rank())] = out.to_doubles();
    });
    for (int r = 0; r < ranks; ++r) {
      const auto& want = inputs[static_cast<std::size_t>((r + ranks - 1) % ranks)];
      const auto& got = outputs[static_cast<std::size_t>(r)];
      REQUIRE(got.size() == want.size());
      for (int i = 0; i < n; ++i)
        REQUIRE(got[static_cast<std::size_t>(i)] ==
                quantize(want[static_cast<std::size_t>(i)], f32));
    }
  }
}

TEST_CASE("dist one-shot all-reduce on host ranks against float64") {
  using A = ops::AllReduceAlgorithm;
  struct Case {
    int ranks;
    DType dtype;
    dist::ReduceOp op;
    std::int64_t n;
    A algorithm = A::automatic;
  };
  const std::vector<Case> cases = {
      {2, f32, dist::ReduceOp::sum, 1000},
      {4, f32, dist::ReduceOp::sum, 16384 + 37},
      {2, bf16, dist::ReduceOp::sum, 3000},
      {4, f16, dist::ReduceOp::sum, 777},
      {2, f32, dist::ReduceOp::max, 4099},
      {4, bf16, dist::ReduceOp::max, 1},
      {3, f32, dist::ReduceOp::sum, 513},
      // two-shot: steps owned round-robin, fewer steps than ranks, a partial last step
      {4, f32, dist::ReduceOp::sum, 3 * 32 * 512 + 100, A::two_shot},
      {3, bf16, dist::ReduceOp::max, 5 * 32 * 512 + 1, A::two_shot},
      {2, f16, dist::ReduceOp::sum, 1, A::two_shot},
      {4, f32, dist::ReduceOp::sum, 40000, A::one_shot},
      // several steps per CTA: the pipelined staging
      {2, f32, dist::ReduceOp::sum, 2 * 524288 * 4 + 20},  // 3 steps of 128 x 512 x 8 chunks
      {3, bf16, dist::ReduceOp::sum, 2 * 65536 * 8 + 16, A::two_shot},
      // eight ranks (the 8-GPU issue's group size, as threads)
      {8, f32, dist::ReduceOp::sum, 3000},
      {8, f16, dist::ReduceOp::max, 100, A::one_shot},
      {8, bf16, dist::ReduceOp::sum, 5 * 32 * 512 + 9, A::two_shot},
  };
  for (const Case& c : cases) {
    CAPTURE(c.ranks);
    CAPTURE(c.dtype.name());
    CAPTURE(c.n);
    const std::uint64_t seed = tx::test::rng()();
    std::vector<std::vector<double>> inputs(static_cast<std::size_t>(c.ranks));
    for (int r = 0; r < c.ranks; ++r) {
      inputs[static_cast<std::size_t>(r)] =
          random_values(static_cast<std::size_t>(c.n), seed + static_cast<std::uint64_t>(r));
      for (double& v : inputs[static_cast<std::size_t>(r)]) v = quantize(v, c.dtype);
    }
    // float64 reference: f32 accumulation in rank order is what the kernel
    // does; the bound below covers it against the exact sum.
    std::vector<double> want(static_cast<std::size_t>(c.n));
    for (std::int64_t i = 0; i < c.n; ++i) {
      double acc = inputs[0][static_cast<std::size_t>(i)];
      for (int r = 1; r < c.ranks; ++r) {
        double v = inputs[static_cast<std::size_t>(r)][static_cast<std::size_t>(i)];
        acc = c.op == dist::ReduceOp::sum ? acc + v : std::max(acc, v);
      }
      want[static_cast<std::size_t>(i)] = acc;
    }
    std::mutex mu;
    std::vector<std::vector<double>> outputs(static_cast<std::size_t>(c.ranks));
    std::vector<std::string> plans(static_cast<std::size_t>(c.ranks));
    dist::Group::run_local(c.ranks, [&](dist::Group& g) {
      ops::AllReduce ar(g, c.n + 5, c.dtype);
      Tensor x = Tensor::from_doubles(inputs[static_cast<std::size_t>(g.rank())], {c.n}, c.dtype,
                                      Device::host());
      Tensor out = Tensor::empty({c.n}, c.dtype, Device::host());
      out.fill_bits(0x7fc0);
      ar(x, out, {.op = c.op, .algorithm = c.algorithm});
      // A second call reuses the staging copies: the epochs order it.
      Tensor again = Tensor::empty({c.n}, c.dtype, Device::host());
      again.fill_bits(0x7fc0);
      ar(x, again, {.op = c.op, .algorithm = c.algorithm});
      std::lock_guard<std::mutex> lock(mu);
      auto a = out.to_doubles(), b = again.to_doubles();
      CHECK(a == b);
      outputs[static_cast<std::size_t>(g.rank())] = a;
      plans[static_cast<std::size_t>(g.rank())] =
          ar.plan(c.n, {.op = c.op, .algorithm = c.algorithm});
    });
    // Rounded once to the dtype from an f32 sum of `ranks` terms of |v| <= 2:
    // addition k rounds a partial sum of at most 2 (k + 1), so the sum's
    // error is at most ranks (ranks + 1) 2^-24 (8 ranks: 72 ulps of 1).
    const double f32_err =
        std::max(8.0 * c.ranks, c.ranks * (c.ranks + 1.0)) * std::ldexp(1.0, -24);
    for (int r = 0; r < c.ranks; ++r) {
      const auto& got = outputs[static_cast<std::size_t>(r)];
      REQUIRE(got.size() == want.size());
      CHECK(got == outputs[0]);  // every rank gets the same bits
      for (std::size_t i = 0; i < got.size(); ++i) {
        // The f32 sum's error, then one rounding to the dtype.
        const double bound = f32_err + std::abs(want[i]) * unit_roundoff(c.dtype) * 1.0001;
        INFO("element " << i << " want " << want[i] << " got " << got[i]);
        REQUIRE(std::abs(got[i] - want[i]) <= bound + 1e-30);
      }
    }
    CHECK(plans[0].find(c.algorithm == A::two_shot ? "two_shot" : "one_shot") == 0);
  }
}

TEST_CASE("dist all-reduce calls of changing sizes on one AllReduce") {
  // The staging halves, the step counts the flags carry and the grid change
  // from call to call; every call is checked.
  const std::vector<std::int64_t> sizes = {100, 70000, 3, 300000, 8, 70001, 1};
  const int ranks = 3;
  std::mutex mu;
  std::vector<std::vector<std::vector<double>>> in(sizes.size()), out(sizes.size());
  for (std::size_t s = 0; s < sizes.size(); ++s) {
    out[s].resize(ranks);
    for (int r = 0; r < ranks; ++r)
      in[s].push_back(random_values(static_cast<std::size_t>(sizes[s]), tx::test::rng()()));
  }
  dist::Group::run_local(ranks, [&](dist::Group& g) {
    ops::AllReduce ar(g, 300000, f32);
    for (std::size_t s = 0; s < sizes.size(); ++s) {
      Tensor x = Tensor::from_doubles(in[s][static_cast<std::size_t>(g.rank())], {sizes[s]}, f32,
                                      Device::host());
      ar(x);  // in place
      auto got = x.to_doubles();
      std::lock_guard<std::mutex> lock(mu);
      out[s][static_cast<std::size_t>(g.rank())] = std::move(got);
    }
  });
  for (std::size_t s = 0; s < sizes.size(); ++s)
    for (int r = 0; r < ranks; ++r)
      for (std::int64_t i = 0; i < sizes[s]; ++i) {
        double want = 0;
        for (int q = 0; q < ranks; ++q)
          want += quantize(in[s][static_cast<std::size_t>(q)][static_cast<std::size_t>(i)], f32);
        const double got = out[s][static_cast<std::size_t>(r)][static_cast<std::size_t>(i)];
        if (!(std::abs(got - want) <= 1e-6 * (std::abs(want) + 1))) {
          INFO("call " << s << " rank " << r << " element " << i);
          REQUIRE(got == want);
        }
      }
}

TEST_CASE("dist all-reduce through NCCL's path (the host's collective on host ranks)") {
  // AllReduceAlgorithm::nccl, in place and into another tensor; automatic
  // keeps tx's kernels on host ranks (they have no communicator).
  const int ranks = 3;
  const std::int64_t n = 5000;
  std::mutex mu;
  std::vector<std::vector<double>> in(ranks), in_place(ranks), into(ranks);
  for (int r = 0; r < ranks; ++r)
    in[static_cast<std::size_t>(r)] = random_values(n, tx::test::rng()());
  std::string plan_nccl, plan_auto;
  dist::Group::run_local(ranks, [&](dist::Group& g) {
    const auto r = static_cast<std::size_t>(g.rank());
    ops::AllReduce ar(g, 1 << 20, f32);
    const ops::AllReduceOptions nccl{.algorithm = ops::AllReduceAlgorithm::nccl};
    Tensor x = Tensor::from_doubles(in[r], {n}, f32, Device::host());
    Tensor y = Tensor::from_doubles(in[r], {n}, f32, Device::host());
    Tensor out = Tensor::empty({n}, f32, Device::host());
    out.fill_bits(0x7fc0dead);
    ar(x, nccl);
    ar(y, out, nccl);
    std::lock_guard<std::mutex> lock(mu);
    in_place[r] = x.to_doubles();
    into[r] = out.to_doubles();
    if (r == 0) {
      plan_nccl = ar.plan(n, nccl);
      plan_auto = ar.plan(1 << 20);
    }
  });
  CHECK(plan_nccl.find("nccl 3 ranks float32 sum n 5000 (asked)") == 0);
  CHECK(plan_auto.find("two_shot 3 ranks") == 0);
  for (int r = 0; r < ranks; ++r)
    for (std::int64_t i = 0; i < n; ++i) {
      double want = 0;
      for (int q = 0; q < ranks; ++q)
        want += quantize(in[static_cast<std::size_t>(q)][static_cast<std::size_t>(i)], f32);
      for (const auto* got : {&in_place, &into}) {
        const double v = (*got)[static_cast<std::size_t>(r)][static_cast<std::size_t>(i)];
        if (!(std::abs(v - want) <= 1e-6 * (std::abs(want) + 1))) {
          INFO("rank " << r << " element " << i);
          REQUIRE(v == want);
        }
      }
    }
}

TEST_CASE("dist IR and CUDA of a peer view and its flags") {
  PrimFunc f = ring_copy(2, 64);
  std::string ir = to_string(f);
  CHECK(ir.find("T.match_symmetric(") != std::string::npos);
  CHECK(ir.find("= T.peer(Flags, next)") != std::string::npos);
  CHECK(ir.find("T.dist.signal(") != std::string::npos);
  CHECK(ir.find("T.dist.wait_until(") != std::string::npos);
  Kernel k = compile(f, {.device = Device::host()});
  std::string cuda = k.cuda_source();
  CHECK(cuda.find("float* const* __restrict__ tx_peers_Buf") != std::string::npos);
  CHECK(cuda.find("unsigned* const* __restrict__ tx_peers_Flags") != std::string::npos);
  CHECK(cuda.find("st.release.sys.global.u32") != std::string::npos);
  CHECK(cuda.find("ld.acquire.sys.global.u32") != std::string::npos);
  CHECK(cuda.find("= tx_peers_Buf[") != std::string::npos);
  // A symmetric buffer is never read-only: the peers write it.
  CHECK(cuda.find("const float* Buf") == std::string::npos);
}

TEST_CASE("dist the all-reduce's kernel builds for sm_90a with its call counts on the device") {
  // Graph replays advance the counts only if the kernel reads and writes
  // them itself: no epoch or base among the launch arguments.
  for (bool two_shot : {false, true})
    for (int ctas : {16, 128}) {
      CAPTURE(two_shot);
      CAPTURE(ctas);
      const std::string cuda = ops::detail::all_reduce_cuda(4, bf16, two_shot, ctas);
      CHECK(cuda.find("Counters") != std::string::npos);
      CHECK(cuda.find("epoch") != std::string::npos);
      CHECK(cuda.find("unsigned epoch,") == std::string::npos);  // not a parameter
      auto out =
          runtime::nvrtc_compile(cuda, "all_reduce.cu", "sm_90a", runtime::NvrtcTarget::cubin);
      CHECK(out.cubin.size() > 4);
    }
}

TEST_CASE("dist errors a kernel author meets") {
  // T::peer of a buffer that is not symmetric.
  auto not_symmetric = [] {
    return T::prim_func("bad_peer", [&](Handle a_ptr, Handle rank_ptr) {
      auto A = T::match_buffer(a_ptr, {8}, f32);
      Var rank = T::match_scalar(rank_ptr, i32, "rank");
      T::cta_id({1});
      T::thread_id({8});
      auto P = T::peer(A, rank);
      A(0) = P(0);
    });
  };
  check_error(not_symmetric, "T.peer", "A", "is a T::match_buffer parameter");
  // A flag that is not a global u32 element.
  auto bad_flag = [] {
    return T::prim_func("bad_flag", [&](Handle a_ptr) {
      auto A = T::match_symmetric(a_ptr, {8}, f32);
      T::cta_id({1});
      T::thread_id({8});
      T::dist::signal(A(0), 1);
    });
  };
  check_error(bad_flag, "signal", "A", "global u32 buffer");
  // A plain tensor for a symmetric parameter.
  Kernel k = compile(ring_copy(2, 64), {.device = Device::host()});
  Tensor src = Tensor::empty({64}, f32, Device::host());
  Tensor plain = Tensor::empty({64}, f32, Device::host());
  Tensor flags = Tensor::empty({2}, u32, Device::host());
  Tensor out = Tensor::empty({64}, f32, Device::host());
  check_error([&] { k(src, plain, flags, out, 0); }, "launch ring_copy", "Buf",
              "not symmetric memory");
}

TEST_CASE("dist a wait nobody signals times out naming the flag") {
  setenv("TX_DIST_TIMEOUT", "1", 1);
  // Rank 1 never signals rank 0: rank 0's wait times out, rank 1 finishes.
  auto lonely = [] {
    return T::prim_func("lonely_wait", [&](Handle flags_ptr, Handle rank_ptr) {
      auto Flags = T::match_symmetric(flags_ptr, {2}, u32);
      Var rank = T::match_scalar(rank_ptr, i32, "rank", DimFacts{.min = 0, .max = 1});
      T::cta_id({1});
      auto tid = T::thread_id({32});
      T::if_(tid == 0 && rank == 0, [&] { T::dist::wait_until(Flags(1), 7); });
    });
  };
  Kernel k = compile(lonely(), {.device = Device::host()});
  std::string message;
  try {
    dist::Group::run_local(2, [&](dist::Group& g) {
      Tensor flags = g.symmetric_flags(2);
      k(flags, g.rank());
    });
  } catch (const Error& e) {
    message = e.what();
  }
  CHECK(message.find("T.dist.wait_until(Flags)") != std::string::npos);
  CHECK(message.find("for a value >= 7") != std::string::npos);
  CHECK(message.find("a missing T::dist::signal") != std::string::npos);
}

namespace {
// all_gather(A) @ B in float64 from every rank's rows: C (ranks m, N), and
// sum |a b| per element (the scale of an f32 sum's error).
struct GatherReference {
  std::vector<double> c, abs_sum;
};
GatherReference gathered_product(const std::vector<std::vector<double>>& a_rows,
                                 const std::vector<double>& b, std::int64_t m, std::int64_t K,
                                 std::int64_t N) {
  const std::int64_t ranks = static_cast<std::int64_t>(a_rows.size()), M = ranks * m;
  GatherReference ref{std::vector<double>(static_cast<std::size_t>(M * N)),
                      std::vector<double>(static_cast<std::size_t>(M * N))};
  for (std::int64_t i = 0; i < M; ++i)
    for (std::int64_t j = 0; j < N; ++j) {
      double acc = 0, abs_acc = 0;
      for (std::int64_t k = 0; k < K; ++k) {
        const double p =
            a_rows[static_cast<std::size_t>(i / m)][static_cast<std::size_t>(i % m * K + k)] *
            b[static_cast<std::size_t>(k * N + j)];
        acc += p;
        abs_acc += std::abs(p);
      }
      ref.c[static_cast<std::size_t>(i * N + j)] = acc;
      ref.abs_sum[static_cast<std::size_t>(i * N + j)] = abs_acc;
    }
  return ref;
}
}  // namespace

TEST_CASE("dist all_gather_matmul on host ranks against float64, fused and sequential") {
  using P = ops::FusionPath;
  struct Case {
    int ranks;
    DType dtype;
    std::int64_t K, N;
    std::vector<std::int64_t> m_per_call;  // rows per rank, call by call
    P path;
    bool b_transposed = false;
  };
  const std::vector<Case> cases = {
      {2, bf16, 24, 7, {5, 5, 3}, P::fused},     {4, f16, 16, 9, {3, 2, 3}, P::fused, true},
      {3, bf16, 40, 5, {4, 1}, P::fused},        {2, f16, 8, 12, {6, 2}, P::sequential},
      {4, bf16, 12, 3, {2}, P::automatic, true}, {8, bf16, 16, 5, {2, 1}, P::fused},
  };
  for (const Case& c : cases) {
    CAPTURE(c.ranks);
    CAPTURE(c.dtype.name());
    CAPTURE(static_cast<int>(c.path));
    const std::int64_t max_rows = *std::max_element(c.m_per_call.begin(), c.m_per_call.end());
    const std::uint64_t seed = tx::test::rng()();
    std::vector<double> b = random_values(static_cast<std::size_t>(c.K * c.N), seed);
    for (double& v : b) v = quantize(v, c.dtype);
    // Fresh rows for every call and rank.
    std::vector<std::vector<std::vector<double>>> a(c.m_per_call.size());
    for (std::size_t call = 0; call < a.size(); ++call)
      for (int r = 0; r < c.ranks; ++r) {
        auto v = random_values(static_cast<std::size_t>(c.m_per_call[call] * c.K),
                               seed + 1 + call * 16 + static_cast<std::uint64_t>(r));
        for (double& x : v) x = quantize(x, c.dtype);
        a[call].push_back(v);
      }
    std::mutex mu;
    std::vector<std::vector<std::vector<double>>> got(
        a.size(), std::vector<std::vector<double>>(static_cast<std::size_t>(c.ranks)));
    std::string plan;
    dist::Group::run_local(c.ranks, [&](dist::Group& g) {
      ops::AllGatherMatmul agm(g, max_rows, c.K, c.dtype);
      // B as (K, N), or as the transpose of an (N, K) tensor.
      Tensor bt = Tensor::from_doubles(b, {c.K, c.N}, c.dtype, Device::host());
      if (c.b_transposed) bt = bt.transpose(0, 1).contiguous().transpose(0, 1);
      for (std::size_t call = 0; call < a.size(); ++call) {
        const std::int64_t m = c.m_per_call[call];
        Tensor x = Tensor::from_doubles(a[call][static_cast<std::size_t>(g.rank())], {m, c.K},
                                        c.dtype, Device::host());
        Tensor out = agm(x, bt, {.path = c.path});
        REQUIRE(out.shape() == std::vector<std::int64_t>{c.ranks * m, c.N});
        std::lock_guard<std::mutex> lock(mu);
        got[call][static_cast<std::size_t>(g.rank())] = out.to_doubles();
        if (g.rank() == 0 && call == 0) plan = agm.plan(m, c.N, {.path = c.path});
      }
    });
    INFO(plan);
    CHECK(plan.find(c.path == P::sequential ? "sequential" : "fused") == 0);
    for (std::size_t call = 0; call < a.size(); ++call) {
      const std::int64_t m = c.m_per_call[call];
      GatherReference ref = gathered_product(a[call], b, m, c.K, c.N);
      for (int r = 0; r < c.ranks; ++r) {
        const auto& out = got[call][static_cast<std::size_t>(r)];
        REQUIRE(out.size() == ref.c.size());
        for (std::size_t i = 0; i < out.size(); ++i) {
          // An f32 sum of K products, rounded once to the dtype.
          const double bound = static_cast<double>(c.K) * ref.abs_sum[i] * std::ldexp(1.0, -24) +
                               std::abs(ref.c[i]) * unit_roundoff(c.dtype) * 1.0001;
          INFO("call " << call << " rank " << r << " element " << i << " want " << ref.c[i]
                       << " got " << out[i]);
          REQUIRE(std::abs(out[i] - ref.c[i]) <= bound + 1e-30);
        }
      }
    }
  }
}

TEST_CASE("dist all_gather_matmul errors name the operand") {
  dist::Group::run_local(2, [&](dist::Group& g) {
    ops::AllGatherMatmul agm(g, 4, 8, bf16);
    Tensor a = Tensor::empty({4, 8}, bf16, Device::host());
    Tensor b = Tensor::empty({8, 3}, bf16, Device::host());
    if (g.rank() != 0) return;  // errors are raised before any rank waits
    check_error(
        [&] {
          agm(Tensor::empty({5, 8}, bf16, Device::host()), b);
        },
        "tx.ops.all_gather_matmul", "a", "more than the 4");
    check_error(
        [&] {
          agm(a, Tensor::empty({7, 3}, bf16, Device::host()));
        },
        "tx.ops.all_gather_matmul", "b", "K = 8");
    check_error(
        [&] {
          agm(a, Tensor::empty({8, 3}, f16, Device::host()));
        },
        "tx.ops.all_gather_matmul", "b", "built for bfloat16");
    check_error([&] { ops::AllGatherMatmul(g, 4, 8, f32); }, "tx.ops.all_gather_matmul", "dtype",
                "f16 and bf16");
  });
}

TEST_CASE("dist matmul_reduce_scatter on host ranks against float64, fused and sequential") {
  using P = ops::FusionPath;
  struct Case {
    int ranks;
    DType dtype;
    std::int64_t K, N;  // K: each rank's shard
    std::vector<std::int64_t> m_per_call;
    P path;
  };
  const std::vector<Case> cases = {
      {2, bf16, 12, 16, {3, 3, 2}, P::fused},
      {4, f16, 8, 8, {2, 1}, P::fused},
      {3, bf16, 20, 24, {2}, P::automatic},
      {2, f16, 6, 9, {4}, P::automatic},  // N * 2 % 16 != 0: sequential
      {2, bf16, 10, 16, {3}, P::sequential},
      {8, bf16, 8, 16, {2, 1}, P::fused},
  };
  for (const Case& c : cases) {
    CAPTURE(c.ranks);
    CAPTURE(c.dtype.name());
    CAPTURE(static_cast<int>(c.path));
    const std::int64_t max_rows = *std::max_element(c.m_per_call.begin(), c.m_per_call.end());
    const std::uint64_t seed = tx::test::rng()();
    // Per call and rank: A shard (ranks m, K) and B shard (K, N).
    struct Inputs {
      std::vector<std::vector<double>> a, b;
    };
    std::vector<Inputs> in(c.m_per_call.size());
    for (std::size_t call = 0; call < in.size(); ++call)
      for (int r = 0; r < c.ranks; ++r) {
        const std::uint64_t s = seed + 1 + call * 64 + static_cast<std::uint64_t>(r) * 2;
        auto av = random_values(static_cast<std::size_t>(c.ranks * c.m_per_call[call] * c.K), s);
        auto bv = random_values(static_cast<std::size_t>(c.K * c.N), s + 1);
        for (double& x : av) x = quantize(x, c.dtype);
        for (double& x : bv) x = quantize(x, c.dtype);
        in[call].a.push_back(av);
        in[call].b.push_back(bv);
      }
    std::mutex mu;
    std::vector<std::vector<std::vector<double>>> got(
        in.size(), std::vector<std::vector<double>>(static_cast<std::size_t>(c.ranks)));
    std::string plan;
    dist::Group::run_local(c.ranks, [&](dist::Group& g) {
      ops::MatmulReduceScatter mrs(g, max_rows, c.N, c.dtype);
      const auto me = static_cast<std::size_t>(g.rank());
      for (std::size_t call = 0; call < in.size(); ++call) {
        const std::int64_t m = c.m_per_call[call];
        Tensor a =
            Tensor::from_doubles(in[call].a[me], {c.ranks * m, c.K}, c.dtype, Device::host());
        Tensor b = Tensor::from_doubles(in[call].b[me], {c.K, c.N}, c.dtype, Device::host());
        Tensor out = mrs(a, b, {.path = c.path});
        REQUIRE(out.shape() == std::vector<std::int64_t>{m, c.N});
        std::lock_guard<std::mutex> lock(mu);
        got[call][me] = out.to_doubles();
        if (g.rank() == 0 && call == 0) plan = mrs.plan(m, c.K, {.path = c.path});
      }
    });
    INFO(plan);
    const bool fused = c.path == P::fused || (c.path == P::automatic && c.N * 2 % 16 == 0);
    CHECK(plan.find(fused ? "fused" : "sequential") == 0);
    for (std::size_t call = 0; call < in.size(); ++call) {
      const std::int64_t m = c.m_per_call[call];
      for (int r = 0; r < c.ranks; ++r) {
        const auto& out = got[call][static_cast<std::size_t>(r)];
        REQUIRE(out.size() == static_cast<std::size_t>(m * c.N));
        for (std::int64_t i = 0; i < m; ++i)
          for (std::int64_t j = 0; j < c.N; ++j) {
            // Each rank's partial: an f32 sum of K products rounded to the
            // dtype; then their f32 sum rounded once.
            double want = 0, bound = 0;
            for (int q = 0; q < c.ranks; ++q) {
              double p = 0, scale = 0;
              for (std::int64_t k = 0; k < c.K; ++k) {
                const double v =
                    in[call].a[static_cast<std::size_t>(q)]
                              [static_cast<std::size_t>(((r * m) + i) * c.K + k)] *
                    in[call].b[static_cast<std::size_t>(q)][static_cast<std::size_t>(k * c.N + j)];
                p += v;
                scale += std::abs(v);
              }
              want += p;
              bound += c.K * scale * std::ldexp(1.0, -24) + std::abs(p) * unit_roundoff(c.dtype);
            }
            bound += std::abs(want) * unit_roundoff(c.dtype) * 1.0001 +
                     c.ranks * bound * std::ldexp(1.0, -24);
            const double v = out[static_cast<std::size_t>(i * c.N + j)];
            INFO("call " << call << " rank " << r << " C[" << i << ", " << j << "] want " << want
                         << " got " << v);
            REQUIRE(std::abs(v - want) <= bound + 1e-30);
          }
      }
    }
  }
}

TEST_CASE("dist all_gather and reduce_scatter written in tx, on host ranks, against float64") {
  struct Case {
    int ranks;
    DType dtype;
    std::vector<std::int64_t> n_per_call;  // elements per segment, call by call
    dist::ReduceOp op = dist::ReduceOp::sum;
  };
  const std::vector<Case> cases = {
      {2, f32, {1024, 4096 + 4, 8}},
      {3, bf16, {512 * 4 * 16 + 8, 16}},       // several steps on 16 CTAs
      {4, f16, {40, 7}, dist::ReduceOp::max},  // 7: the NCCL (host) fallback
      {2, bf16, {5, 64}},
      {8, f32, {1000, 64}},
  };
  for (const Case& c : cases) {
    CAPTURE(c.ranks);
    CAPTURE(c.dtype.name());
    const std::int64_t max_n = *std::max_element(c.n_per_call.begin(), c.n_per_call.end());
    const std::uint64_t seed = tx::test::rng()();
    const auto R = static_cast<std::size_t>(c.ranks);
    // in[call][rank]: ranks * n values (the reduce-scatter's x; the
    // all-gather sends segment 0).
    std::vector<std::vector<std::vector<double>>> in(c.n_per_call.size());
    for (std::size_t call = 0; call < in.size(); ++call)
      for (std::size_t r = 0; r < R; ++r) {
        auto v =
            random_values(R * static_cast<std::size_t>(c.n_per_call[call]), seed + call * 16 + r);
        for (double& x : v) x = quantize(x, c.dtype);
        in[call].push_back(v);
      }
    std::mutex mu;
    std::vector<std::vector<std::vector<double>>> gathered(in.size(),
                                                           std::vector<std::vector<double>>(R)),
        scattered(in.size(), std::vector<std::vector<double>>(R));
    std::vector<std::string> plans;
    dist::Group::run_local(c.ranks, [&](dist::Group& g) {
      ops::AllGather ag(g, max_n, c.dtype);
      ops::ReduceScatter rs(g, max_n, c.dtype);
      const auto me = static_cast<std::size_t>(g.rank());
      for (std::size_t call = 0; call < in.size(); ++call) {
        const std::int64_t n = c.n_per_call[call];
        Tensor x = Tensor::from_doubles(in[call][me], {c.ranks * n}, c.dtype, Device::host());
        Tensor all = ag(x.slice(0, 0, n));
        Tensor out = Tensor::empty({n}, c.dtype, Device::host());
        out.fill_bits(0x7fc0);
        rs(x, out, c.op);
        std::lock_guard<std::mutex> lock(mu);
        gathered[call][me] = all.to_doubles();
        scattered[call][me] = out.to_doubles();
        if (me == 0) {
          plans.push_back(ag.plan(n));
          plans.push_back(rs.plan(n));
        }
      }
    });
    for (std::size_t call = 0; call < in.size(); ++call) {
      const auto n = static_cast<std::size_t>(c.n_per_call[call]);
      const bool kernel = n * c.dtype.bytes() % 16 == 0;
      INFO(plans[2 * call] << " / " << plans[2 * call + 1]);
      CHECK(plans[2 * call].find(kernel ? "all_gather" : "nccl") == 0);
      CHECK(plans[2 * call + 1].find(kernel ? "reduce_scatter" : "nccl") == 0);
      for (std::size_t r = 0; r < R; ++r) {
        // The gather is exact: rank q's first n values at [q n, (q + 1) n).
        const auto& all = gathered[call][r];
        REQUIRE(all.size() == R * n);
        for (std::size_t q = 0; q < R; ++q)
          for (std::size_t i = 0; i < n; ++i) REQUIRE(all[q * n + i] == in[call][q][i]);
        const auto& out = scattered[call][r];
        REQUIRE(out.size() == n);
        for (std::size_t i = 0; i < n; ++i) {
          double want = in[call][0][r * n + i];
          for (std::size_t q = 1; q < R; ++q) {
            const double v = in[call][q][r * n + i];
            want = c.op == dist::ReduceOp::sum ? want + v : std::max(want, v);
          }
          const double bound =
              std::max(8.0 * c.ranks, c.ranks * (c.ranks + 1.0)) * std::ldexp(1.0, -24) +
              std::abs(want) * unit_roundoff(c.dtype) * 1.0001;
          INFO("call " << call << " rank " << r << " element " << i);
          REQUIRE(std::abs(out[i] - want) <= bound);
        }
      }
    }
  }
}

TEST_CASE("dist all_gather and reduce_scatter errors name the operand") {
  dist::Group::run_local(2, [&](dist::Group& g) {
    ops::AllGather ag(g, 16, f32);
    ops::ReduceScatter rs(g, 16, f32);
    if (g.rank() != 0) return;  // raised before any rank waits
    Tensor x = Tensor::empty({17}, f32, Device::host());
    check_error([&] { ag(x); }, "tx.ops.all_gather", "x", "more than the 16");
    Tensor small = Tensor::empty({8}, f32, Device::host());
    Tensor wrong = Tensor::empty({15}, f32, Device::host());
    check_error([&] { ag(small, wrong); }, "tx.ops.all_gather", "out", "2 x 8");
    check_error([&] { rs(wrong, small); }, "tx.ops.reduce_scatter", "x", "2 x out's 8");
    Tensor half = Tensor::empty({8}, f16, Device::host());
    check_error([&] { rs(Tensor::empty({16}, f32, Device::host()), half); },
                "tx.ops.reduce_scatter", "out", "built for float32");
  });
}
