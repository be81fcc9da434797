// tx::dist::Group on host ranks (threads of this process, host memory): rank
// numbering, the barrier, symmetric allocations (zero-filled, the peers'
// table, distinct memory, mismatched requests), a failing rank (rethrown,
// the others not left waiting), and the host collectives against float64.
// Needs no GPU and no NCCL.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "test_support.hpp"
#include "tx/error.hpp"
#include "tx/expr.hpp"
#include "tx/runtime/dist.hpp"
#include "tx/runtime/tensor.hpp"

namespace {

using tx::Device;
using tx::Tensor;
using tx::dist::Group;
using tx::dist::ReduceOp;

// Runs f on another thread; a hang (a barrier nobody releases) ends the
// suite with a message instead of blocking ctest until its timeout.
template <class F>
void within_seconds(int seconds, F&& f) {
  auto done = std::async(std::launch::async, std::forward<F>(f));
  if (done.wait_for(std::chrono::seconds(seconds)) != std::future_status::ready) {
    std::fprintf(stderr, "test_dist_group: no progress in %d s: the ranks hang\n", seconds);
    std::fflush(stderr);
    std::_Exit(1);
  }
  done.get();  // rethrows
}

// The message of the tx::Error f throws ("" when it throws none).
template <class F>
std::string tx_error_of(F&& f) {
  try {
    f();
  } catch (const tx::Error& e) {
    return e.what();
  }
  return "";
}

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

std::vector<float> random_floats(std::size_t n) {
  std::vector<double> d = tx::test::random_values(n, tx::f32, -2.0, 2.0);
  return std::vector<float>(d.begin(), d.end());
}

}  // namespace

TEST_CASE("dist run_local numbers host ranks 0 to n-1") {
  for (int n : {1, 2, 4}) {
    std::mutex mu;
    std::vector<int> ranks;
    std::set<std::thread::id> threads;
    within_seconds(60, [&] {
      Group::run_local(n, [&](Group& g) {
        std::lock_guard<std::mutex> lock(mu);
        ranks.push_back(g.rank());
        threads.insert(std::this_thread::get_id());
        CHECK(g.size() == n);
        CHECK(g.device() == Device::host());
        CHECK(g.is_local());
        CHECK(g.nccl_comm() == nullptr);
      });
    });
    std::sort(ranks.begin(), ranks.end());
    std::vector<int> want(static_cast<std::size_t>(n));
    for (int r = 0; r < n; ++r) want[static_cast<std::size_t>(r)] = r;
    CHECK(ranks == want);
    CHECK(threads.size() == static_cast<std::size_t>(n));
  }
}

TEST_CASE("dist barrier orders writes to symmetric memory on host ranks") {
  for (int n : {2, 4}) {
    const std::size_t len = 1000, rounds = 5;
    // values[round][rank], drawn here: the generator is not thread-safe.
    std::vector<std::vector<std::vector<float>>> values(rounds);
    for (auto& round : values)
      for (int r = 0; r < n; ++r) round.push_back(random_floats(len));
    std::mutex mu;
    std::vector<std::string> wrong;
    within_seconds(60, [&] {
      Group::run_local(n, [&](Group& g) {
        Tensor buf = g.empty_symmetric({static_cast<std::int64_t>(len)}, tx::f32);
        const tx::SymmetricInfo* sym = buf.symmetric();
        REQUIRE(sym != nullptr);
        for (std::size_t k = 0; k < rounds; ++k) {
          const auto& mine = values[k][static_cast<std::size_t>(g.rank())];
          buf.copy_from_bytes(mine.data(), len * sizeof(float));
          g.barrier();  // every copy written
          for (int r = 0; r < n; ++r) {
            const auto* peer = static_cast<const float*>(sym->peers[static_cast<std::size_t>(r)]);
            const auto& want = values[k][static_cast<std::size_t>(r)];
            if (std::memcmp(peer, want.data(), len * sizeof(float)) != 0) {
              std::lock_guard<std::mutex> lock(mu);
              wrong.push_back("round " + std::to_string(k) + ": rank " + std::to_string(g.rank()) +
                              " read a stale copy of rank " + std::to_string(r));
            }
          }
          g.barrier();  // every copy read before the next round overwrites it
        }
      });
    });
    CAPTURE(n);
    CHECK(wrong.empty());
    for (const std::string& w : wrong) MESSAGE(w);
  }
}

TEST_CASE("dist empty_symmetric is zero-filled with a table of the peers") {
  struct Case {
    std::vector<std::int64_t> shape;
    tx::DType dtype;
  };
  for (int n : {2, 4})
    for (const Case& c : {Case{{4, 64}, tx::f32}, Case{{3}, tx::bf16}, Case{{7, 5}, tx::u8},
                          Case{{0}, tx::f32}, Case{{1}, tx::f64}}) {
      CAPTURE(n);
      CAPTURE(c.dtype.name());
      std::mutex mu;
      std::vector<const void*> tables(static_cast<std::size_t>(n));
      std::vector<std::vector<void*>> peers(static_cast<std::size_t>(n));
      within_seconds(60, [&] {
        Group::run_local(n, [&](Group& g) {
          // Dirty the heap first: the zeros must be the allocation's own.
          {
            std::vector<unsigned char> junk(1 << 16, 0xab);
            volatile unsigned char sink = junk[123];
            (void)sink;
          }
          Tensor t = g.empty_symmetric(c.shape, c.dtype);
          const tx::SymmetricInfo* sym = t.symmetric();
          REQUIRE(sym != nullptr);
          std::lock_guard<std::mutex> lock(mu);
          CHECK(t.shape() == c.shape);
          CHECK(t.dtype() == c.dtype);
          CHECK(t.device() == Device::host());
          CHECK(sym->rank == g.rank());
          CHECK(sym->world == n);
          CHECK(sym->bytes == t.nbytes());
          REQUIRE(sym->peers.size() == static_cast<std::size_t>(n));
          CHECK(sym->peers[static_cast<std::size_t>(g.rank())] == t.data_ptr());
          CHECK(reinterpret_cast<std::uintptr_t>(t.data_ptr()) % 64 == 0);
          REQUIRE(sym->table != nullptr);
          CHECK(reinterpret_cast<std::uintptr_t>(sym->table) % 8 == 0);
          std::vector<void*> table(static_cast<std::size_t>(n));
          std::memcpy(table.data(), sym->table, table.size() * sizeof(void*));
          CHECK(table == sym->peers);
          for (std::uint8_t b : t.to_bytes()) REQUIRE(b == 0);
          tables[static_cast<std::size_t>(g.rank())] = sym->table;
          peers[static_cast<std::size_t>(g.rank())] = sym->peers;
          // Views share the allocation, and so its symmetric info.
          if (t.numel() > 1) {
            CHECK(t.reshape({t.numel()}).symmetric() == sym);
            CHECK(t.slice(0, 0, 1).symmetric() == sym);
          }
          CHECK(Tensor::empty({4}, tx::f32, Device::host()).symmetric() == nullptr);
        });
      });
      // Every rank sees the same copies; each has its own table.
      for (int r = 1; r < n; ++r) CHECK(peers[static_cast<std::size_t>(r)] == peers[0]);
      CHECK(std::set<const void*>(tables.begin(), tables.end()).size() ==
            static_cast<std::size_t>(n));
    }
}

TEST_CASE("dist symmetric_flags are u32 zeros") {
  within_seconds(60, [&] {
    Group::run_local(3, [&](Group& g) {
      Tensor f = g.symmetric_flags(5);
      CHECK(f.dtype() == tx::u32);
      CHECK(f.shape() == std::vector<std::int64_t>{5});
      REQUIRE(f.symmetric() != nullptr);
      CHECK(f.to_vector<std::uint32_t>() == std::vector<std::uint32_t>(5, 0));
    });
  });
  CHECK(has(tx_error_of([] { Group::run_local(2, [](Group& g) { g.symmetric_flags(0); }); }),
            "at least one flag"));
}

TEST_CASE("dist two symmetric allocations get distinct memory") {
  const int n = 4;
  const std::int64_t len = 333;
  std::mutex mu;
  std::vector<std::pair<std::uintptr_t, std::uintptr_t>> ranges;  // [begin, end) of every copy
  within_seconds(60, [&] {
    Group::run_local(n, [&](Group& g) {
      Tensor a = g.empty_symmetric({len}, tx::f32);
      Tensor b = g.empty_symmetric({len}, tx::f32);
      // Writing every copy of a leaves b zero.
      std::vector<float> ones(static_cast<std::size_t>(len), 1.0f);
      a.copy_from_bytes(ones.data(), ones.size() * sizeof(float));
      g.barrier();
      for (int r = 0; r < n; ++r) {
        const auto* pb =
            static_cast<const float*>(b.symmetric()->peers[static_cast<std::size_t>(r)]);
        for (std::int64_t i = 0; i < len; ++i) REQUIRE(pb[i] == 0.0f);
      }
      std::lock_guard<std::mutex> lock(mu);
      for (const Tensor* t : {&a, &b}) {
        const auto p = reinterpret_cast<std::uintptr_t>(t->data_ptr());
        ranges.push_back({p, p + t->nbytes()});
      }
    });
  });
  REQUIRE(ranges.size() == 2 * n);
  std::sort(ranges.begin(), ranges.end());
  for (std::size_t i = 1; i < ranges.size(); ++i) CHECK(ranges[i - 1].second <= ranges[i].first);
}

TEST_CASE("dist a failing rank is rethrown and releases the others") {
  // A std::exception before a barrier the other ranks are already in.
  std::string message;
  within_seconds(60, [&] {
    try {
      Group::run_local(4, [&](Group& g) {
        if (g.rank() == 1) {
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
          throw std::runtime_error("rank one gives up");
        }
        g.barrier();
        g.barrier();
      });
    } catch (const tx::Error& e) {
      message = e.what();
    }
  });
  CHECK(has(message, "rank 1 of 4"));
  CHECK(has(message, "rank one gives up"));

  // A tx error while the others wait in a collective allocation: the error
  // keeps its own op, with the rank in front of its reason.
  message.clear();
  within_seconds(60, [&] {
    try {
      Group::run_local(3, [&](Group& g) {
        if (g.rank() == 2) (void)Tensor::from_doubles({1.0, 2.0}, {3}, tx::f32, Device::host());
        (void)g.empty_symmetric({16}, tx::f32);
      });
    } catch (const tx::Error& e) {
      message = e.what();
      CHECK(e.op() == "tx.Tensor.from_doubles");
    }
  });
  CHECK(has(message, "rank 2 of 3 (host)"));
  CHECK(has(message, "2 values given"));

  // Every rank failing: still one error, the first.
  message = tx_error_of([] {
    Group::run_local(
        2, [](Group& g) { throw std::runtime_error("both fail " + std::to_string(g.rank())); });
  });
  CHECK(has(message, "both fail"));
}

TEST_CASE("dist mismatched symmetric requests are a tx error on every rank") {
  std::mutex mu;
  std::vector<std::string> per_rank(2);
  std::string message;
  within_seconds(60, [&] {
    message = tx_error_of([&] {
      Group::run_local(2, [&](Group& g) {
        try {
          (void)g.empty_symmetric({g.rank() == 0 ? 4 : 5, 2}, tx::f32);
        } catch (const tx::Error& e) {
          std::lock_guard<std::mutex> lock(mu);
          per_rank[static_cast<std::size_t>(g.rank())] = e.what();
          throw;
        }
      });
    });
  });
  CHECK(has(message, "different allocations"));
  CHECK(has(message, "[4, 2] float32"));
  CHECK(has(message, "[5, 2] float32"));
  for (const std::string& m : per_rank) CHECK(has(m, "different allocations"));

  within_seconds(60, [&] {
    message = tx_error_of([&] {
      Group::run_local(
          3, [&](Group& g) { (void)g.empty_symmetric({8}, g.rank() == 2 ? tx::f16 : tx::f32); });
    });
  });
  CHECK(has(message, "rank 2 for [8] float16"));
}

TEST_CASE("dist host collectives against float64") {
  for (int n : {1, 2, 3, 4})
    for (std::int64_t len : {std::int64_t{1}, std::int64_t{1000}}) {
      CAPTURE(n);
      CAPTURE(len);
      std::vector<std::vector<double>> in(static_cast<std::size_t>(n));
      for (auto& v : in) v = tx::test::random_values(static_cast<std::size_t>(len * n), tx::f32);
      // The references, in double.
      std::vector<double> sum(static_cast<std::size_t>(len * n), 0.0), max = in[0];
      for (const auto& v : in)
        for (std::size_t i = 0; i < v.size(); ++i) {
          sum[i] += v[i];
          max[i] = std::max(max[i], v[i]);
        }
      auto close = [](double got, double want) {
        return std::abs(got - want) <= std::abs(want) * std::ldexp(1.0, -24) + 1e-30;
      };
      std::mutex mu;
      std::vector<std::string> wrong;
      auto expect = [&](const std::string& what, const std::vector<double>& got,
                        const std::vector<double>& want, std::size_t offset) {
        for (std::size_t i = 0; i < got.size(); ++i)
          if (!close(got[i], want[offset + i])) {
            std::lock_guard<std::mutex> lock(mu);
            wrong.push_back(what + " element " + std::to_string(i) + ": got " +
                            std::to_string(got[i]) + ", want " + std::to_string(want[offset + i]));
            return;
          }
      };
      within_seconds(60, [&] {
        Group::run_local(n, [&](Group& g) {
          const auto& mine = in[static_cast<std::size_t>(g.rank())];
          for (ReduceOp op : {ReduceOp::sum, ReduceOp::max}) {
            const char* name = op == ReduceOp::sum ? "sum" : "max";
            const auto& want = op == ReduceOp::sum ? sum : max;
            Tensor t = Tensor::from_doubles(mine, {len * n}, tx::f32, Device::host());
            g.nccl_all_reduce(t, op);
            expect(std::string("all_reduce ") + name, t.to_doubles(), want, 0);
            Tensor x = Tensor::from_doubles(mine, {n, len}, tx::f32, Device::host());
            Tensor part = Tensor::empty({len}, tx::f32, Device::host());
            g.nccl_reduce_scatter(x, part, op);
            expect(std::string("reduce_scatter ") + name, part.to_doubles(), want,
                   static_cast<std::size_t>(g.rank() * len));
          }
          // all_gather: rank r's first len values at [r * len, ...).
          Tensor x = Tensor::from_doubles(std::vector<double>(mine.begin(), mine.begin() + len),
                                          {len}, tx::f32, Device::host());
          Tensor all = Tensor::empty({n, len}, tx::f32, Device::host());
          g.nccl_all_gather(x, all);
          const std::vector<double> got = all.to_doubles();
          for (int r = 0; r < n; ++r)
            expect("all_gather from rank " + std::to_string(r),
                   std::vector<double>(got.begin() + r * len, got.begin() + (r + 1) * len),
                   in[static_cast<std::size_t>(r)], 0);
        });
      });
      CHECK(wrong.empty());
      for (const std::string& w : wrong) MESSAGE(w);
    }
}

TEST_CASE("dist collectives and groups refuse bad input") {
  auto in_group = [](int n, auto&& f) {
    return tx_error_of([&] { Group::run_local(n, [&](Group& g) { f(g); }); });
  };
  CHECK(has(in_group(2,
                     [](Group& g) {
                       Tensor t = Tensor::empty({4}, tx::f32, Device::host());
                       Tensor out = Tensor::empty({5}, tx::f32, Device::host());
                       g.nccl_all_gather(t, out);
                     }),
            "needs 8 of float32"));
  CHECK(has(in_group(2,
                     [](Group& g) {
                       Tensor t = Tensor::empty({4}, tx::u8, Device::host());
                       g.nccl_all_reduce(t);
                     }),
            "reduces f32, f16, bf16 and i32"));
  CHECK(has(in_group(2,
                     [](Group& g) {
                       Tensor t = Tensor::empty({4, 4}, tx::f32, Device::host()).transpose(0, 1);
                       g.nccl_all_reduce(t);
                     }),
            "strided view"));
  // Ranks passing different element counts: every rank fails alike.
  CHECK(has(in_group(2,
                     [](Group& g) {
                       Tensor t = Tensor::empty({g.rank() + 3}, tx::f32, Device::host());
                       g.nccl_all_reduce(t);
                     }),
            "the ranks pass different tensors"));
  // A GPU tensor on host ranks: refused before any GPU call.
  CHECK(has(tx_error_of([] {
              Group::run_local({Device::host(), Device::cuda(0)}, [](Group&) {});
            }),
            "mixes the host and GPUs"));
  CHECK(has(tx_error_of([] { Group::run_local(0, [](Group&) {}); }), "at least one rank"));
  Group none;
  CHECK_FALSE(none.defined());
  CHECK(has(tx_error_of([&] { (void)none.rank(); }), "empty"));
  CHECK(has(tx_error_of([&] { none.barrier(); }), "empty"));
}

TEST_CASE("dist symmetric memory outlives run_local while a tensor holds it") {
  Tensor kept;
  std::vector<float> want = random_floats(64);
  within_seconds(60, [&] {
    Group::run_local(2, [&](Group& g) {
      Tensor t = g.empty_symmetric({64}, tx::f32);
      if (g.rank() == 1) {
        t.copy_from_bytes(want.data(), want.size() * sizeof(float));
        kept = t;  // only rank 1 writes `kept`
      }
    });
  });
  REQUIRE(kept.symmetric() != nullptr);
  CHECK(kept.to_vector<float>() == want);
  // The other rank's copy is alive too (the group's memory goes as a whole).
  const auto* peer0 = static_cast<const float*>(kept.symmetric()->peers[0]);
  for (int i = 0; i < 64; ++i) CHECK(peer0[i] == 0.0f);
}

TEST_CASE("dist UniqueId hex round trip and NCCL availability") {
  tx::dist::UniqueId id;
  for (std::size_t i = 0; i < id.bytes.size(); ++i)
    id.bytes[i] = static_cast<unsigned char>(i * 37 + 11);
  const std::string hex = id.hex();
  CHECK(hex.size() == 256);
  CHECK(tx::dist::UniqueId::from_hex(hex).bytes == id.bytes);
  CHECK(has(tx_error_of([] { tx::dist::UniqueId::from_hex("abc"); }), "256 hex digits"));
  CHECK(has(tx_error_of([] { tx::dist::UniqueId::from_hex(std::string(256, 'g')); }),
            "not a hex digit"));
  std::string why;
  const bool nccl = tx::dist::nccl_available(&why);
  MESSAGE("NCCL " << (nccl ? "loads" : "is not available: " + why));
  if (!nccl) {
    CHECK(has(tx_error_of([] { tx::dist::unique_id(); }), "NCCL"));
  } else {
    // ncclGetUniqueId needs no GPU: a bootstrap address and a random magic.
    const tx::dist::UniqueId a = tx::dist::unique_id();
    CHECK(a.bytes != tx::dist::UniqueId{}.bytes);
    CHECK(tx::dist::UniqueId::from_hex(a.hex()).bytes == a.bytes);
  }
}
