// T::profile on the GPU (issue 46): a profiled launch records, per warp and
// pass through each region, %globaltimer and the SM id; the records come back
// as slices in time order per warp, a Chrome trace with a track per CTA and
// warp, and a count of the marks that did not fit a warp's area. The Hopper
// GEMM sample's regions land on its producer and consumer warpgroups as on
// the host (host_profile). Fresh random inputs, poisoned outputs, float64
// references: profiling never changes what a kernel computes.
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <set>
#include <string>

#include "gpu_support.hpp"
#include "test_support.hpp"
#include "tx/tx.hpp"

#define TX_SAMPLE_NO_MAIN
#include "../samples/gemm_hopper.cpp"

using namespace tx;

namespace {

// Warp 0..3 stage a tile into shared memory together, then each warp reduces
// its row; `passes` times around the two regions.
PrimFunc staged_rows(int passes) {
  return T::prim_func("staged_rows_gpu", [&](Handle A_ptr, Handle O_ptr) {
    auto A = T::match_buffer(A_ptr, {4, 64}, f32);
    auto O = T::match_buffer(O_ptr, {4}, f32);
    auto w = T::warp_id({4});
    auto lane = T::lane_id({32});
    auto S = T::alloc_buffer({4, 64}, f32, scope::shared);
    for (Var it : T::serial(passes, "it")) {
      (void)it;
      T::profile("stage", [&] { Tx::cta::copy(S, A); });
      T::cuda::cta_sync();
      T::profile("reduce", [&] {
        auto acc = T::alloc_buffer({1}, f32, scope::local);
        acc(0) = 0.0f;
        T::if_(lane == 0, [&] {
          for (Var c : T::serial(64, "c")) acc(0) = acc(0) + S(w, c);
          O(w) = acc(0);
        });
      });
      T::cuda::cta_sync();
    }
  });
}

struct Rows {
  std::vector<double> a;
  Tensor A, O;
};

Rows rows_inputs() {
  Rows r;
  r.a = test::random_values(4 * 64, f32, -1, 1);
  r.A = Tensor::from_doubles(r.a, {4, 64}, f32, Device::cuda());
  r.O = Tensor::empty({4}, f32, Device::cuda());
  r.O.fill_bits(test::poison_bits(f32));
  return r;
}

void check_rows(const Rows& r) {
  const auto o = r.O.to_doubles();
  for (int w = 0; w < 4; ++w) {
    double want = 0;
    for (int c = 0; c < 64; ++c) want += r.a[static_cast<std::size_t>(w * 64 + c)];
    CHECK(o[static_cast<std::size_t>(w)] == doctest::Approx(want).epsilon(1e-5));
  }
}

}  // namespace

TEST_CASE("a profiled GPU launch: a slice per warp and pass, in time order, on a real SM") {
  Kernel k = compile(staged_rows(3), {.device = Device::cuda(), .profile = true});
  CHECK(k.profiled());
  Rows r = rows_inputs();
  k(r.A, r.O);
  check_rows(r);
  auto p = k.last_profile();
  REQUIRE(p.has_value());
  CHECK(p->unit == "us");
  CHECK(p->regions == std::vector<std::string>{"stage", "reduce"});
  CHECK(p->warps_per_cta == 4);
  CHECK(p->ctas == 1);
  CHECK(p->dropped == 0);
  REQUIRE(p->slices.size() == 4 * 2 * 3);
  const int sms = runtime::current_device().sm_count;
  std::map<int, std::vector<ProfileSlice>> per_warp;
  std::set<int> sm_seen;
  for (const ProfileSlice& s : p->slices) {
    CHECK(s.cta == 0);
    CHECK(s.depth == 0);
    CHECK(s.end >= s.begin);
    CHECK(s.begin >= 0.0);
    CHECK(s.end < 1e5);  // microseconds from the launch's first record
    CHECK(s.sm >= 0);
    CHECK(s.sm < sms);
    sm_seen.insert(s.sm);
    per_warp[s.warp].push_back(s);
  }
  CHECK(sm_seen.size() == 1);  // one CTA, one SM
  REQUIRE(per_warp.size() == 4);
  for (auto& [warp, list] : per_warp) {
    CAPTURE(warp);
    std::sort(list.begin(), list.end(),
              [](const ProfileSlice& x, const ProfileSlice& y) { return x.begin < y.begin; });
    REQUIRE(list.size() == 6);
    for (std::size_t i = 0; i < list.size(); ++i) {
      CHECK(list[i].region == static_cast<int>(i % 2));  // stage, reduce, stage, ...
      if (i > 0) CHECK(list[i].begin >= list[i - 1].end);
    }
  }
  // The trace, through Python's JSON parser: 24 slices on 4 warp tracks.
  const std::string prefix = std::string(std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp") +
                             "/tx_gpu_profile_test_" + std::to_string(::getpid());
  const std::string path = p->write(prefix);
  const std::string cmd =
      "python3 -c \"import json,sys; t=json.load(open(sys.argv[1])); "
      "x=[e for e in t['traceEvents'] if e['ph']=='X']; "
      "assert len(x)==24 and {e['name'] for e in x}=={'stage','reduce'}, x; "
      "assert len({(e['pid'],e['tid']) for e in x})==4\" " +
      path;
  CHECK(std::system(cmd.c_str()) == 0);
  std::remove(path.c_str());
  std::remove((prefix + ".svg").c_str());
  std::remove((prefix + ".png").c_str());
}

TEST_CASE("a warp's marks past its area are counted as dropped, the rest paired") {
  // 700 passes x 2 regions x 2 marks = 2800 marks per warp; 1024 fit.
  Kernel k = compile(staged_rows(700), {.device = Device::cuda(), .profile = true});
  Rows r = rows_inputs();
  k(r.A, r.O);
  check_rows(r);
  auto p = k.last_profile();
  REQUIRE(p.has_value());
  CHECK(p->dropped == 4 * (2800 - lowering::kProfileCapacity));
  CHECK(p->slices.size() == static_cast<std::size_t>(4 * lowering::kProfileCapacity / 2));
  // A second launch starts from empty areas (the counts are per launch).
  Kernel few = compile(staged_rows(2), {.device = Device::cuda(), .profile = true});
  few(r.A, r.O);
  k(r.A, r.O);
  CHECK(k.last_profile()->dropped == p->dropped);
  CHECK(few.last_profile()->slices.size() == 16);
  CHECK(few.last_profile()->first_ctas(0).slices.empty());
}

TEST_CASE("profiling on or off, the kernel computes the same; off, its CUDA is the plain one") {
  Kernel off = compile(staged_rows(2), {.device = Device::cuda(), .profile = false});
  Kernel on = compile(staged_rows(2), {.device = Device::cuda(), .profile = true});
  CHECK(off.cuda_source().find("tx_profile") == std::string::npos);
  CHECK(on.cuda_source().find("tx_profile_mark(tx_profile, tx_profile_n, ") != std::string::npos);
  Rows r = rows_inputs();
  off(r.A, r.O);
  check_rows(r);
  r.O.fill_bits(test::poison_bits(f32));
  on(r.A, r.O);
  check_rows(r);
  CHECK_FALSE(off.last_profile().has_value());
}

TEST_CASE("the Hopper GEMM sample's regions on the GPU: producer, consumers, epilogue") {
  if (!test::hopper_gpu("the profiled Hopper GEMM")) return;
  Kernel k = compile(gemm_hopper(256, 256, 256, bf16, {.bm = 128, .bn = 128, .ctas = 2}),
                     {.device = Device::cuda(), .profile = true});
  auto a = test::random_values(256 * 256, bf16, -1, 1);
  auto b = test::random_values(256 * 256, bf16, -1, 1);
  Tensor A = Tensor::from_doubles(a, {256, 256}, bf16, Device::cuda());
  Tensor B = Tensor::from_doubles(b, {256, 256}, bf16, Device::cuda());
  Tensor C = Tensor::empty({256, 256}, bf16, Device::cuda());
  C.fill_bits(test::poison_bits(bf16));
  k(A, B, C);
  CHECK(test::gemm_error(a, b, C.to_doubles(), 256, 256, 256, 0x1p-8) <= 1.0);
  auto p = k.last_profile();
  REQUIRE(p.has_value());
  CHECK(p->ctas == 2);
  CHECK(p->warps_per_cta == 12);
  CHECK(p->dropped == 0);
  std::map<std::string, int> passes;
  for (const auto& s : p->slices) {
    const std::string& r = p->regions[static_cast<std::size_t>(s.region)];
    ++passes[r];
    if (r.rfind("producer", 0) == 0)
      CHECK(s.warp < 4);
    else
      CHECK(s.warp >= 4);
  }
  CHECK(passes["mma"] == 2 * 8 * 8);  // as on the host: 2 CTAs, 8 consumer warps, 8 K steps
  CHECK(passes["consumer wait"] == 2 * 8 * 8);
  CHECK(passes["epilogue"] == 2 * 8 * 2);
  CHECK(passes["producer load"] > 0);
  CHECK(p->summary().find("| mma |") != std::string::npos);
}
