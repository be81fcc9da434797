// tx::dist::Group on two GPUs, ranks as threads of this process (run_local
// over cuda:0 and cuda:1): symmetric allocations on each GPU, each rank
// reading its peer's copy through the peer's address, NCCL's collectives
// against float64 (where NCCL loads; else the suite says so and checks the
// rest), ranks sharing a GPU, a failing rank. Skipped (exit 77) without a
// GPU, or with fewer than two.
#include <doctest/doctest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <future>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "test_support.hpp"
#include "tx/error.hpp"
#include "tx/expr.hpp"
#include "tx/runtime/cuda_driver.hpp"
#include "tx/runtime/dist.hpp"
#include "tx/runtime/stream.hpp"
#include "tx/runtime/tensor.hpp"

namespace {

using tx::Device;
using tx::Tensor;
using tx::dist::Group;
using tx::dist::ReduceOp;

// Before doctest's main (which skips without any GPU): this suite needs two.
const bool g_two_gpus = [] {
  if (!tx::runtime::cuda_available()) return false;
  const int n = tx::runtime::device_count();
  if (n < 2) {
    std::printf("SKIPPED: gpu_dist needs 2 GPUs; this machine has %d\n", n);
    std::fflush(stdout);
    std::_Exit(77);
  }
  return true;
}();

const std::vector<Device> kTwo = {Device::cuda(0), Device::cuda(1)};

// Rank r's values in the NCCL groups' checks (the same in every process).
std::vector<float> rank_values(int rank, std::int64_t n) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i)
    v[static_cast<std::size_t>(i)] = static_cast<float>(rank * 1000 + (i % 997)) * 0.5f;
  return v;
}

// One rank of an NCCL group (a process of its own, or a thread): a
// symmetric allocation, the peer's copy read through its address, an
// all-reduce, the barrier. Returns what went wrong ("" when nothing did).
std::string nccl_rank(const tx::dist::UniqueId& id, int rank) {
  const std::int64_t n = 100003;
  const int peer = 1 - rank;
  Group g = Group::nccl(id, rank, 2, Device::cuda(rank));
  if (g.rank() != rank || g.size() != 2 || g.is_local() || !g.nccl_comm())
    return "the group's rank, size, kind or communicator is wrong";
  Tensor buf = g.empty_symmetric({n}, tx::f32);
  const tx::SymmetricInfo* sym = buf.symmetric();
  if (!sym || sym->peers.size() != 2 ||
      sym->peers[static_cast<std::size_t>(rank)] != buf.data_ptr())
    return "the symmetric info is wrong";
  void* table[2] = {};
  tx::runtime::copy_to_host(
      table, static_cast<tx::runtime::DevicePtr>(reinterpret_cast<std::uintptr_t>(sym->table)),
      sizeof table);
  if (table[0] != sym->peers[0] || table[1] != sym->peers[1]) return "the table is not the peers";
  const std::vector<float> mine = rank_values(rank, n);
  buf.copy_from_bytes(mine.data(), mine.size() * sizeof(float));
  tx::runtime::synchronize_device(rank, "gpu_dist: the rank's write");
  g.barrier();
  std::vector<float> got(static_cast<std::size_t>(n));
  tx::runtime::copy_to_host(got.data(),
                            static_cast<tx::runtime::DevicePtr>(reinterpret_cast<std::uintptr_t>(
                                sym->peers[static_cast<std::size_t>(peer)])),
                            got.size() * sizeof(float));
  if (got != rank_values(peer, n)) return "the peer's copy, read through its address, differs";
  Tensor t = Tensor::from_vector(mine, {n}, g.device());
  g.nccl_all_reduce(t);
  const std::vector<float> sum = t.to_vector<float>();
  const std::vector<float> other = rank_values(peer, n);
  for (std::size_t i = 0; i < sum.size(); ++i)
    if (sum[i] != mine[i] + other[i])
      return "nccl_all_reduce's sum differs at " + std::to_string(i);
  g.barrier();
  return "";
}

// The suite run as one rank of a two-process NCCL group (the parent test
// starts it with TX_GPU_DIST_CHILD=rank and TX_GPU_DIST_ID=the unique id).
const bool g_child = [] {
  const char* rank = std::getenv("TX_GPU_DIST_CHILD");
  const char* id = std::getenv("TX_GPU_DIST_ID");
  if (!rank || !id) return false;
  std::string wrong;
  try {
    wrong = nccl_rank(tx::dist::UniqueId::from_hex(id), std::atoi(rank));
  } catch (const std::exception& e) {
    wrong = e.what();
  }
  if (!wrong.empty()) std::fprintf(stderr, "gpu_dist rank %s: %s\n", rank, wrong.c_str());
  std::fflush(stderr);
  std::_Exit(wrong.empty() ? 0 : 1);
}();

tx::runtime::DevicePtr dev(const void* p) {
  return static_cast<tx::runtime::DevicePtr>(reinterpret_cast<std::uintptr_t>(p));
}

// A hang ends the suite with a message instead of blocking ctest.
template <class F>
void within_seconds(int seconds, F&& f) {
  auto done = std::async(std::launch::async, std::forward<F>(f));
  if (done.wait_for(std::chrono::seconds(seconds)) != std::future_status::ready) {
    std::fprintf(stderr, "gpu_dist: no progress in %d s: the ranks hang\n", seconds);
    std::fflush(stderr);
    std::_Exit(1);
  }
  done.get();
}

double unit_roundoff(tx::DType t) {
  if (t == tx::bf16) return std::ldexp(1.0, -8);
  if (t == tx::f16) return std::ldexp(1.0, -11);
  if (t == tx::f32) return std::ldexp(1.0, -24);
  return 0.0;  // integers: exact
}

}  // namespace

TEST_CASE("gpu dist symmetric memory across two GPUs") {
  REQUIRE(g_two_gpus);
  const std::int64_t len = (1 << 20) + 13;  // 4 MiB of f32, not a round size
  std::vector<std::vector<float>> values(2);
  for (auto& v : values) {
    std::vector<double> d = tx::test::random_values(static_cast<std::size_t>(len), tx::f32);
    v.assign(d.begin(), d.end());
  }
  std::mutex mu;
  std::vector<std::string> wrong;
  auto complain = [&](const std::string& s) {
    std::lock_guard<std::mutex> lock(mu);
    wrong.push_back(s);
  };
  within_seconds(120, [&] {
    Group::run_local(kTwo, [&](Group& g) {
      const int me = g.rank(), peer = 1 - g.rank();
      CHECK(g.size() == 2);
      CHECK(g.device() == Device::cuda(me));
      CHECK(g.is_local());
      CHECK(tx::runtime::current_device().ordinal == me);  // the rank thread's GPU

      Tensor buf = g.empty_symmetric({len}, tx::f32);
      const tx::SymmetricInfo* sym = buf.symmetric();
      REQUIRE(sym != nullptr);
      CHECK(buf.device() == g.device());
      CHECK(sym->rank == me);
      CHECK(sym->world == 2);
      CHECK(sym->bytes == static_cast<std::size_t>(len) * 4);
      CHECK(sym->peers[static_cast<std::size_t>(me)] == buf.data_ptr());
      CHECK(tx::runtime::pointer_device(dev(sym->peers[0])) == 0);
      CHECK(tx::runtime::pointer_device(dev(sym->peers[1])) == 1);
      // The table lives on this rank's GPU and holds the peers' addresses.
      CHECK(tx::runtime::pointer_device(dev(sym->table)) == me);
      void* table[2] = {};
      tx::runtime::copy_to_host(table, dev(sym->table), sizeof table);
      CHECK(table[0] == sym->peers[0]);
      CHECK(table[1] == sym->peers[1]);
      // Zero-filled.
      {
        std::vector<std::uint8_t> b = buf.to_bytes();
        if (std::any_of(b.begin(), b.end(), [](std::uint8_t x) { return x != 0; }))
          complain("rank " + std::to_string(me) + ": a new symmetric allocation is not zero");
      }

      // Each rank writes its copy; after the barrier each reads its peer's
      // copy through the peer's address.
      buf.copy_from_bytes(values[static_cast<std::size_t>(me)].data(),
                          static_cast<std::size_t>(len) * sizeof(float));
      // The barrier is host-side: the copy must have landed first.
      tx::runtime::synchronize_device(me, "gpu_dist: the rank's write");
      g.barrier();
      const auto& want = values[static_cast<std::size_t>(peer)];
      std::vector<float> got(static_cast<std::size_t>(len));
      tx::runtime::copy_to_host(got.data(), dev(sym->peers[static_cast<std::size_t>(peer)]),
                                got.size() * sizeof(float));
      if (got != want)
        complain("rank " + std::to_string(me) + ": copy_to_host of the peer's copy differs");
      // Device to device, from the peer's GPU into one of this rank's.
      Tensor local = Tensor::empty({len}, tx::f32, g.device());
      tx::runtime::copy_device_to_device(
          dev(local.data_ptr()), dev(sym->peers[static_cast<std::size_t>(peer)]), local.nbytes());
      if (local.to_vector<float>() != want)
        complain("rank " + std::to_string(me) +
                 ": copy_device_to_device of the peer's copy differs");
      // A second allocation is other memory, zero.
      Tensor flags = g.symmetric_flags(64);
      CHECK(flags.data_ptr() != buf.data_ptr());
      CHECK(flags.to_vector<std::uint32_t>() == std::vector<std::uint32_t>(64, 0));
      g.barrier();  // no rank frees (leaves) while its peer still reads
    });
  });
  CHECK(wrong.empty());
  for (const std::string& w : wrong) MESSAGE(w);
}

TEST_CASE("gpu dist NCCL collectives against float64") {
  REQUIRE(g_two_gpus);
  std::string why;
  if (!tx::dist::nccl_available(&why)) {
    MESSAGE("not run: NCCL is not available (" << why << ")");
    return;
  }
  const std::int64_t len = 4099;
  struct Case {
    tx::DType dtype;
    ReduceOp op;
  };
  const std::vector<Case> cases = {{tx::f32, ReduceOp::sum},  {tx::f32, ReduceOp::max},
                                   {tx::bf16, ReduceOp::sum}, {tx::f16, ReduceOp::sum},
                                   {tx::i32, ReduceOp::sum},  {tx::bf16, ReduceOp::max}};
  // Inputs: in[case][rank], 2 * len values (reduce_scatter's input).
  std::vector<std::vector<std::vector<double>>> in(cases.size());
  for (std::size_t c = 0; c < cases.size(); ++c)
    for (int r = 0; r < 2; ++r)
      in[c].push_back(tx::test::random_values(static_cast<std::size_t>(2 * len), cases[c].dtype));
  std::mutex mu;
  std::vector<std::string> wrong;
  auto check_close = [&](const std::string& what, tx::DType t, const std::vector<double>& got,
                         const std::vector<double>& want, std::size_t offset) {
    for (std::size_t i = 0; i < got.size(); ++i) {
      const double w = want[offset + i];
      if (!(std::abs(got[i] - w) <= std::abs(w) * unit_roundoff(t) + 1e-30)) {
        std::lock_guard<std::mutex> lock(mu);
        wrong.push_back(what + " element " + std::to_string(i) + ": got " + std::to_string(got[i]) +
                        ", want " + std::to_string(w));
        return;
      }
    }
  };
  within_seconds(300, [&] {
    Group::run_local(kTwo, [&](Group& g) {
      REQUIRE(g.nccl_comm() != nullptr);
      const int me = g.rank();
      // Once on the legacy default stream, once on a stream of the rank's own.
      for (bool own_stream : {false, true}) {
        tx::Stream s =
            own_stream ? tx::Stream::create(g.device()) : tx::Stream::default_stream(g.device());
        tx::StreamGuard on(s);
        const std::string where = own_stream ? " (own stream)" : " (default stream)";
        for (std::size_t c = 0; c < cases.size(); ++c) {
          const Case& k = cases[c];
          const std::string name = k.dtype.name() + (k.op == ReduceOp::sum ? " sum" : " max");
          std::vector<double> want(static_cast<std::size_t>(2 * len));
          for (std::size_t i = 0; i < want.size(); ++i) {
            const double a = in[c][0][i], b = in[c][1][i];
            want[i] = k.op == ReduceOp::sum ? a + b : std::max(a, b);
          }
          const auto& mine = in[c][static_cast<std::size_t>(me)];
          Tensor t = Tensor::from_doubles(mine, {2 * len}, k.dtype, g.device());
          g.nccl_all_reduce(t, k.op);
          check_close("all_reduce " + name + where, k.dtype, t.to_doubles(), want, 0);
          Tensor x = Tensor::from_doubles(mine, {2, len}, k.dtype, g.device());
          Tensor part = Tensor::empty({len}, k.dtype, g.device());
          g.nccl_reduce_scatter(x, part, k.op);
          check_close("reduce_scatter " + name + where, k.dtype, part.to_doubles(), want,
                      static_cast<std::size_t>(me * len));
        }
        // all_gather (bytes: any dtype).
        const auto& mine = in[0][static_cast<std::size_t>(me)];
        Tensor x = Tensor::from_doubles(std::vector<double>(mine.begin(), mine.begin() + len),
                                        {len}, tx::f32, g.device());
        Tensor all = Tensor::empty({2, len}, tx::f32, g.device());
        g.nccl_all_gather(x, all);
        const std::vector<double> got = all.to_doubles();
        for (int r = 0; r < 2; ++r)
          check_close("all_gather from rank " + std::to_string(r) + where, tx::f32,
                      std::vector<double>(got.begin() + r * len, got.begin() + (r + 1) * len),
                      in[0][static_cast<std::size_t>(r)], 0);
        s.synchronize();
      }
      // The barrier over NCCL's group: the local one (condition variable).
      g.barrier();
    });
  });
  CHECK(wrong.empty());
  for (const std::string& w : wrong) MESSAGE(w);
}

TEST_CASE("gpu dist ranks sharing a GPU have symmetric memory but no NCCL") {
  REQUIRE(g_two_gpus);
  std::mutex mu;
  std::vector<std::string> errors(2);
  within_seconds(120, [&] {
    Group::run_local({Device::cuda(1), Device::cuda(1)}, [&](Group& g) {
      CHECK(g.nccl_comm() == nullptr);
      Tensor buf = g.empty_symmetric({256}, tx::i32);
      std::vector<std::int32_t> mine(256, g.rank() + 7);
      buf.copy_from_bytes(mine.data(), mine.size() * 4);
      tx::runtime::synchronize_device(1, "gpu_dist: the rank's write");
      g.barrier();
      std::vector<std::int32_t> got(256);
      tx::runtime::copy_to_host(got.data(),
                                dev(buf.symmetric()->peers[static_cast<std::size_t>(1 - g.rank())]),
                                got.size() * 4);
      CHECK(got == std::vector<std::int32_t>(256, 1 - g.rank() + 7));
      try {
        g.nccl_all_reduce(buf);
      } catch (const tx::Error& e) {
        std::lock_guard<std::mutex> lock(mu);
        errors[static_cast<std::size_t>(g.rank())] = e.what();
      }
      g.barrier();
    });
  });
  for (const std::string& e : errors) CHECK(e.find("share a GPU") != std::string::npos);
}

TEST_CASE("gpu dist a failing rank releases its peer") {
  REQUIRE(g_two_gpus);
  std::string message;
  within_seconds(120, [&] {
    try {
      Group::run_local(kTwo, [&](Group& g) {
        if (g.rank() == 1) throw std::runtime_error("cuda:1 gives up");
        g.barrier();
      });
    } catch (const tx::Error& e) {
      message = e.what();
    }
  });
  CHECK(message.find("rank 1 of 2 (cuda:1)") != std::string::npos);
  CHECK(message.find("cuda:1 gives up") != std::string::npos);
}

TEST_CASE("gpu dist NCCL group of two threads addresses peers directly") {
  REQUIRE(g_two_gpus);
  std::string why;
  if (!tx::dist::nccl_available(&why)) {
    MESSAGE("not run: NCCL is not available (" << why << ")");
    return;
  }
  const tx::dist::UniqueId id = tx::dist::unique_id();
  std::vector<std::string> wrong(2);
  within_seconds(120, [&] {
    std::vector<std::thread> ranks;
    for (int r = 0; r < 2; ++r)
      ranks.emplace_back([&, r] {
        try {
          wrong[static_cast<std::size_t>(r)] = nccl_rank(id, r);
        } catch (const std::exception& e) {
          wrong[static_cast<std::size_t>(r)] = e.what();
        }
      });
    for (std::thread& t : ranks) t.join();
  });
  for (const std::string& w : wrong) CHECK(w == "");
}

extern char** environ;

TEST_CASE("gpu dist NCCL group of two processes shares memory through CUDA IPC") {
  REQUIRE(g_two_gpus);
  REQUIRE_FALSE(g_child);
  std::string why;
  if (!tx::dist::nccl_available(&why)) {
    MESSAGE("not run: NCCL is not available (" << why << ")");
    return;
  }
  const std::string id = "TX_GPU_DIST_ID=" + tx::dist::unique_id().hex();
  std::vector<pid_t> pids;
  for (int r = 0; r < 2; ++r) {
    std::vector<std::string> env;
    for (char** e = environ; *e; ++e) env.emplace_back(*e);
    env.push_back("TX_GPU_DIST_CHILD=" + std::to_string(r));
    env.push_back(id);
    std::vector<char*> envp;
    for (std::string& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    char self[] = "/proc/self/exe";
    char* argv[] = {self, nullptr};
    pid_t pid = 0;
    REQUIRE(posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv, envp.data()) == 0);
    pids.push_back(pid);
  }
  // Wait for both, two minutes at most.
  std::vector<int> status(2, -1);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  for (std::size_t r = 0; r < pids.size(); ++r) {
    int st = 0;
    while (waitpid(pids[r], &st, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > until) {
        kill(pids[r], SIGKILL);
        waitpid(pids[r], &st, 0);
        MESSAGE("rank " << r << " hung and was killed");
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    status[r] = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  }
  CHECK(status[0] == 0);
  CHECK(status[1] == 0);
}
