// The checked host mode across ranks (issue 43): kernels of host ranks
// (Group::run_local, threads of this process) that exchange data through
// symmetric memory, checked with {.checked = true}. The correct exchange
// (write, signal, wait, read, and a second round of flags before the next
// call overwrites) runs clean over several calls; each deliberately broken
// variant is reported as a race across ranks naming both ranks and both
// lines: a read with no wait, a wait for a value the flag already holds, a
// signal before the other threads' writes reach the signalling thread (no
// cta_sync), and a buffer overwritten while the peer may still read it.
// tx's multi-GPU ops run under TX_CHECK=1 in host_dist_checked (ctest).
#include <doctest/doctest.h>

#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "test_support.hpp"
#include "tx/group_barrier.hpp"
#include "tx/ops/dist.hpp"
#include "tx/runtime/nvrtc.hpp"
#include "tx/tx.hpp"

using namespace tx;

namespace {

enum class Bug { none, no_wait, wrong_value, no_cta_sync, early_reuse };

int g_write_line = 0, g_read_line = 0;

// Each rank writes its copy of Buf, signals the next rank and waits for the
// previous rank's signal, reads the previous rank's copy into Out, then
// tells the previous rank it is done reading (Flags[ranks + r] on the
// previous rank). Call `epoch` (1, 2, ...) waits, before writing, until the
// next rank has read the previous call's data.
PrimFunc exchange(int ranks, int n, Bug bug) {
  return T::prim_func("exchange", [&](Handle buf_ptr, Handle flags_ptr, Handle out_ptr,
                                      Handle rank_ptr, Handle epoch_ptr) {
    auto Buf = T::match_symmetric(buf_ptr, {n}, f32);
    auto Flags = T::match_symmetric(flags_ptr, {2 * ranks}, u32);
    auto Out = T::match_buffer(out_ptr, {n}, f32);
    Var rank = T::match_scalar(rank_ptr, i32, "rank", DimFacts{.min = 0, .max = ranks - 1});
    Var epoch = T::match_scalar(epoch_ptr, i32, "epoch", DimFacts{.min = 1, .max = 1000});
    T::device_entry();
    T::cta_id({1});
    auto tid = T::thread_id({32});
    Var next = T::let((rank + 1) % ranks, "next");
    Var prev = T::let((rank + ranks - 1) % ranks, "prev");
    if (bug != Bug::early_reuse) {
      T::if_(tid == 0, [&] { T::dist::wait_until(Flags(ranks + next), epoch - 1); });
      T::cuda::cta_sync();
    }
    for (Var k : T::serial((n + 31) / 32, "k")) {
      Var i = T::let(k * 32 + tid, "i");
      T::if_(i < n, [&] {
        g_write_line = __LINE__ + 1;  // the store's line
        Buf(i) = cast(rank * 1000 + i + epoch, f32);
      });
    }
    if (bug != Bug::no_cta_sync) T::cuda::cta_sync();
    T::if_(tid == 0, [&] {
      auto next_flags = T::peer(Flags, next, "next_flags");
      T::dist::signal(next_flags(rank), epoch);
      // The wrong value: 0, which the flag holds before any signal.
      if (bug == Bug::wrong_value) T::dist::wait_until(Flags(prev), 0);
      if (bug != Bug::wrong_value && bug != Bug::no_wait) T::dist::wait_until(Flags(prev), epoch);
    });
    T::cuda::cta_sync();
    auto from = T::peer(Buf, prev, "from");
    for (Var k : T::serial((n + 31) / 32, "k")) {
      Var i = T::let(k * 32 + tid, "i");
      T::if_(i < n, [&] {
        g_read_line = __LINE__ + 1;  // the load's line
        Out(i) = from(i);
      });
    }
    T::cuda::cta_sync();
    T::if_(tid == 0, [&] {
      auto prev_flags = T::peer(Flags, prev, "prev_flags");
      T::dist::signal(prev_flags(ranks + rank), epoch);
    });
  });
}

// Runs `calls` calls of the exchange on `ranks` host ranks, checked; returns
// the error's message ("" when none) and checks the outputs of clean runs.
std::string run(int ranks, Bug bug, int calls) {
  const int n = 100;
  Kernel k = compile(exchange(ranks, n, bug), {.device = Device::host(), .checked = true});
  std::mutex mu;
  std::vector<std::vector<double>> outs(static_cast<std::size_t>(ranks));
  try {
    dist::Group::run_local(ranks, [&](dist::Group& g) {
      Tensor buf = g.empty_symmetric({n}, f32);
      Tensor flags = g.symmetric_flags(2 * ranks);
      Tensor out = Tensor::empty({n}, f32, Device::host());
      for (int e = 1; e <= calls; ++e) {
        out.fill_bits(0x7fc0dead);
        k(buf, flags, out, g.rank(), e);
      }
      std::lock_guard<std::mutex> lock(mu);
      outs[static_cast<std::size_t>(g.rank())] = out.to_doubles();
    });
  } catch (const Error& e) {
    return e.what();
  }
  for (int r = 0; r < ranks; ++r) {
    const int prev = (r + ranks - 1) % ranks;
    for (int i = 0; i < n; ++i)
      CHECK(outs[static_cast<std::size_t>(r)][static_cast<std::size_t>(i)] ==
            prev * 1000 + i + calls);
  }
  return "";
}

int g_barrier_write_line = 0, g_barrier_read_line = 0;

// The same exchange with T::dist::barrier: write, meet, read the previous
// rank's copy, meet again (so that the next call's writes come after every
// rank's reads) -- unless `second_barrier` is false.
PrimFunc barrier_exchange(int ranks, int n, bool second_barrier) {
  return T::prim_func("barrier_exchange", [&](Handle buf_ptr, Handle flags_ptr, Handle out_ptr,
                                              Handle rank_ptr, Handle epoch_ptr) {
    auto Buf = T::match_symmetric(buf_ptr, {n}, f32);
    auto Flags = T::match_symmetric(flags_ptr, {ranks}, u32);
    auto Out = T::match_buffer(out_ptr, {n}, f32);
    Var rank = T::match_scalar(rank_ptr, i32, "rank", DimFacts{.min = 0, .max = ranks - 1});
    Var epoch = T::match_scalar(epoch_ptr, i32, "epoch", DimFacts{.min = 1, .max = 1000});
    T::device_entry();
    T::cta_id({1});
    auto tid = T::thread_id({32});
    for (Var k : T::serial((n + 31) / 32, "k")) {
      Var i = T::let(k * 32 + tid, "i");
      T::if_(i < n, [&] {
        g_barrier_write_line = __LINE__ + 1;
        Buf(i) = cast(rank * 1000 + i + epoch, f32);
      });
    }
    T::dist::barrier(Flags, {.rank = rank, .ranks = ranks, .value = 2 * epoch - 1, .thread = tid});
    auto from = T::peer(Buf, (rank + ranks - 1) % ranks, "from");
    for (Var k : T::serial((n + 31) / 32, "k")) {
      Var i = T::let(k * 32 + tid, "i");
      T::if_(i < n, [&] {
        g_barrier_read_line = __LINE__ + 1;
        Out(i) = from(i);
      });
    }
    if (second_barrier)
      T::dist::barrier(Flags, {.rank = rank, .ranks = ranks, .value = 2 * epoch, .thread = tid});
  });
}

std::string at_line(int line) { return "host_dist_races.cpp:" + std::to_string(line); }

}  // namespace

TEST_CASE("dist checked: the exchange with its flags is clean over several calls") {
  for (int ranks : {2, 4}) {
    CAPTURE(ranks);
    CHECK(run(ranks, Bug::none, 3) == "");
  }
}

TEST_CASE("dist checked: each broken exchange is a race across ranks naming both") {
  setenv("TX_DIST_TIMEOUT", "5", 1);
  struct Case {
    Bug bug;
    int calls;
    bool write_first;  // the earlier access is the write (else the peer's read)
  };
  for (Case c : {Case{Bug::no_wait, 1, true}, Case{Bug::wrong_value, 1, true},
                 Case{Bug::no_cta_sync, 1, true}, Case{Bug::early_reuse, 2, false}}) {
    for (int ranks : {2, 4}) {
      CAPTURE(static_cast<int>(c.bug));
      CAPTURE(ranks);
      const std::string m = run(ranks, c.bug, c.calls);
      INFO(m);
      CHECK(m.find("race across ranks") != std::string::npos);
      CHECK(m.find("copy of Buf") != std::string::npos);
      CHECK(m.find(at_line(g_write_line)) != std::string::npos);
      CHECK(m.find(at_line(g_read_line)) != std::string::npos);
      CHECK(m.find("with no T::dist::signal / wait_until") != std::string::npos);
      // Both ranks named: the writer and the reader of one copy.
      CHECK(m.find(c.write_first ? "writes it (T.store" : "reads it (T.load") != std::string::npos);
    }
  }
}

TEST_CASE("dist checked: T::dist::barrier orders an exchange; without its second use, a race") {
  setenv("TX_DIST_TIMEOUT", "5", 1);
  const int n = 70;
  for (int ranks : {2, 4}) {
    for (bool second : {true, false}) {
      CAPTURE(ranks);
      CAPTURE(second);
      Kernel k =
          compile(barrier_exchange(ranks, n, second), {.device = Device::host(), .checked = true});
      std::mutex mu;
      std::vector<std::vector<double>> outs(static_cast<std::size_t>(ranks));
      std::string message;
      const int calls = 3;
      try {
        dist::Group::run_local(ranks, [&](dist::Group& g) {
          Tensor buf = g.empty_symmetric({n}, f32);
          Tensor flags = g.symmetric_flags(ranks);
          Tensor out = Tensor::empty({n}, f32, Device::host());
          for (int e = 1; e <= calls; ++e) {
            out.fill_bits(0x7fc0dead);
            k(buf, flags, out, g.rank(), e);
          }
          std::lock_guard<std::mutex> lock(mu);
          outs[static_cast<std::size_t>(g.rank())] = out.to_doubles();
        });
      } catch (const Error& e) {
        message = e.what();
      }
      INFO(message);
      if (second) {
        CHECK(message == "");
        for (int r = 0; r < ranks && message.empty(); ++r)
          for (int i = 0; i < n; ++i)
            CHECK(outs[static_cast<std::size_t>(r)][static_cast<std::size_t>(i)] ==
                  ((r + ranks - 1) % ranks) * 1000 + i + calls);
      } else {
        CHECK(message.find("race across ranks") != std::string::npos);
        CHECK(message.find(at_line(g_barrier_write_line)) != std::string::npos);
        CHECK(message.find(at_line(g_barrier_read_line)) != std::string::npos);
      }
    }
  }
}

TEST_CASE("dist T::dist::barrier in CUDA: system-scope flags on every peer, PTX for sm_90a") {
  Kernel k = compile(barrier_exchange(4, 64, true), {.device = Device::host()});
  const std::string cuda = k.cuda_source();
  CHECK(cuda.find("st.release.sys.global.u32") != std::string::npos);
  CHECK(cuda.find("ld.acquire.sys.global.u32") != std::string::npos);
  CHECK(cuda.find("= tx_peers_Flags[") != std::string::npos);
  const auto out =
      runtime::nvrtc_compile(cuda, "barrier_exchange.cu", "sm_90a", runtime::NvrtcTarget::ptx);
  CHECK(out.ptx.find(".entry barrier_exchange(") != std::string::npos);
  CHECK(out.ptx.find("st.release.sys.global.u32") != std::string::npos);
}

namespace {
int g_plain_write_line = 0, g_plain_read_line = 0;
// A kernel that writes only its own copy (no peer view, no flags), and one
// that reads the previous rank's copy: ordered by the host, or not at all.
PrimFunc write_own(int n) {
  return T::prim_func("write_own", [&](Handle buf_ptr, Handle rank_ptr) {
    auto Buf = T::match_symmetric(buf_ptr, {n}, f32);
    Var rank = T::match_scalar(rank_ptr, i32, "rank");
    T::cta_id({1});
    auto tid = T::thread_id({32});
    for (Var k : T::serial((n + 31) / 32, "k")) {
      Var i = T::let(k * 32 + tid, "i");
      T::if_(i < n, [&] {
        g_plain_write_line = __LINE__ + 1;
        Buf(i) = cast(rank * 1000 + i, f32);
      });
    }
  });
}
PrimFunc read_previous(int ranks, int n) {
  return T::prim_func("read_previous", [&](Handle buf_ptr, Handle out_ptr, Handle rank_ptr) {
    auto Buf = T::match_symmetric(buf_ptr, {n}, f32);
    auto Out = T::match_buffer(out_ptr, {n}, f32);
    Var rank = T::match_scalar(rank_ptr, i32, "rank", DimFacts{.min = 0, .max = ranks - 1});
    T::cta_id({1});
    auto tid = T::thread_id({32});
    auto from = T::peer(Buf, (rank + ranks - 1) % ranks, "from");
    for (Var k : T::serial((n + 31) / 32, "k")) {
      Var i = T::let(k * 32 + tid, "i");
      T::if_(i < n, [&] {
        g_plain_read_line = __LINE__ + 1;
        Out(i) = from(i);
      });
    }
  });
}
}  // namespace

TEST_CASE("dist checked: a host barrier orders two launches across ranks; without it, a race") {
  const int n = 64;
  for (int ranks : {2, 3}) {
    for (bool barrier : {true, false}) {
      CAPTURE(ranks);
      CAPTURE(barrier);
      Kernel w = compile(write_own(n), {.device = Device::host(), .checked = true});
      Kernel rd = compile(read_previous(ranks, n), {.device = Device::host(), .checked = true});
      std::string message;
      std::mutex mu;
      std::vector<std::vector<double>> outs(static_cast<std::size_t>(ranks));
      try {
        dist::Group::run_local(ranks, [&](dist::Group& g) {
          Tensor buf = g.empty_symmetric({n}, f32);
          Tensor out = Tensor::empty({n}, f32, Device::host());
          w(buf, g.rank());
          if (barrier) g.barrier();
          rd(buf, out, g.rank());
          std::lock_guard<std::mutex> lock(mu);
          outs[static_cast<std::size_t>(g.rank())] = out.to_doubles();
        });
      } catch (const Error& e) {
        message = e.what();
      }
      INFO(message);
      if (barrier) {
        REQUIRE(message == "");
        for (int r = 0; r < ranks; ++r)
          for (int i = 0; i < n; ++i)
            CHECK(outs[static_cast<std::size_t>(r)][static_cast<std::size_t>(i)] ==
                  ((r + ranks - 1) % ranks) * 1000 + i);
      } else {
        CHECK(message.find("race across ranks") != std::string::npos);
        CHECK(message.find(at_line(g_plain_write_line)) != std::string::npos);
        CHECK(message.find(at_line(g_plain_read_line)) != std::string::npos);
      }
    }
  }
}
