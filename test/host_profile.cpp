// T::profile on the host JIT (issue 46): a profiled launch records a slice
// per warp and pass through each region, in logical steps; the trace is
// Chrome trace JSON with a track per CTA and warp; the summary and the SVG
// name every region; with profiling off the regions leave no trace in the
// CUDA. (The GPU's records, %globaltimer per warp: gpu_profile.)
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <string>

#include "test_support.hpp"
#include "tx/tx.hpp"

#define TX_SAMPLE_NO_MAIN
#include "../samples/gemm_hopper.cpp"

using namespace tx;

namespace {

// One kernel, with or without its regions (the same source lines either way):
// warp 0 stages a tile into shared memory, every warp then reduces a row.
PrimFunc staged_rows(bool regions) {
  return T::prim_func("staged_rows", [&](Handle A_ptr, Handle O_ptr) {
    auto A = T::match_buffer(A_ptr, {4, 64}, f32);
    auto O = T::match_buffer(O_ptr, {4}, f32);
    auto w = T::warp_id({4});
    auto lane = T::lane_id({32});
    auto S = T::alloc_buffer({4, 64}, f32, scope::shared);
    auto region = [&](const char* name, const std::function<void()>& f) {
      if (regions)
        T::profile(name, f);
      else
        f();
    };
    region("stage", [&] { Tx::cta::copy(S, A); });
    T::cuda::cta_sync();
    region("reduce", [&] {
      auto acc = T::alloc_buffer({1}, f32, scope::local);
      acc(0) = 0.0f;
      T::if_(lane == 0, [&] {
        for (Var c : T::serial(64, "c")) acc(0) = acc(0) + S(w, c);
        O(w) = acc(0);
      });
    });
  });
}

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

}  // namespace

TEST_CASE("profiling off: the regions leave the CUDA and the host form as they were") {
  Kernel plain = compile(staged_rows(false), {.device = Device::host()});
  Kernel regions = compile(staged_rows(true), {.device = Device::host(), .profile = false});
  CHECK(regions.cuda_source() == plain.cuda_source());
  CHECK(regions.lowered_ir() == plain.lowered_ir());
  CHECK_FALSE(regions.profiled());
  CHECK_FALSE(regions.last_profile().has_value());
  // The regions are in the kernel as written.
  CHECK(regions.tirx().find("with T.profile(\"stage\"):") != std::string::npos);
  // On, the GPU kernel takes the records and marks each region.
  Kernel on = compile(staged_rows(true), {.device = Device::host(), .profile = true});
  CHECK(on.cuda_source().find("unsigned long long* __restrict__ tx_profile") != std::string::npos);
  CHECK(on.cuda_source().find("tx_profile_mark(tx_profile, ") != std::string::npos);
  CHECK(on.lowered_ir().find("T.profile_mark") != std::string::npos);
  // The GPU code compiles (NVRTC, no GPU needed), the Hopper GEMM's too, and
  // reads the global timer and the SM id.
  const std::string ptx = on.ptx("sm_90a");
  CHECK(ptx.find("%globaltimer") != std::string::npos);
  CHECK(ptx.find("%smid") != std::string::npos);
  Kernel gemm = compile(gemm_hopper(256, 256, 256), {.device = Device::host(), .profile = true});
  CHECK(gemm.ptx("sm_90a").find("%globaltimer") != std::string::npos);
  Kernel gemm_off = compile(gemm_hopper(256, 256, 256), {.device = Device::host()});
  CHECK(gemm_off.cuda_source().find("tx_profile") == std::string::npos);
}

TEST_CASE("a profiled host launch: slices per warp and pass, a trace, a summary, a picture") {
  Kernel k = compile(staged_rows(true), {.device = Device::host(), .profile = true});
  REQUIRE(k.profiled());
  auto a = test::random_values(256, f32, -1, 1);
  Tensor A = Tensor::from_doubles(a, {4, 64}, f32, Device::host());
  Tensor O = Tensor::empty({4}, f32, Device::host());
  O.fill_bits(0x7fc00000u);
  k(A, O);
  // The kernel still computes what it computes.
  auto o = O.to_doubles();
  for (int r = 0; r < 4; ++r) {
    double want = 0;
    for (int c = 0; c < 64; ++c) want += a[static_cast<std::size_t>(r * 64 + c)];
    CHECK(o[static_cast<std::size_t>(r)] == doctest::Approx(want).epsilon(1e-5));
  }
  auto p = k.last_profile();
  REQUIRE(p.has_value());
  CHECK(p->unit == "steps");
  CHECK(p->regions == std::vector<std::string>{"stage", "reduce"});
  CHECK(p->warps_per_cta == 4);
  // Each of the 4 warps passes each region once: 8 slices, each ending after it begins.
  CHECK(p->slices.size() == 8);
  std::set<std::pair<int, int>> seen;
  for (const auto& s : p->slices) {
    CHECK(s.end > s.begin);
    seen.insert({s.region, s.warp});
  }
  CHECK(seen.size() == 8);
  // The stage happens before any reduce (the barrier between them).
  double last_stage = 0, first_reduce = 1e30;
  for (const auto& s : p->slices)
    (s.region == 0 ? last_stage : first_reduce) =
        s.region == 0 ? std::max(last_stage, s.end) : std::min(first_reduce, s.begin);
  CHECK(last_stage < first_reduce);
  const std::string trace = p->chrome_trace();
  CHECK(trace.find("\"traceEvents\"") != std::string::npos);
  CHECK(trace.find("\"name\": \"reduce\"") != std::string::npos);
  CHECK(trace.find("CTA 0 warp 3") != std::string::npos);
  CHECK(p->summary().find("| reduce | 0 | 4 |") != std::string::npos);
  CHECK(p->svg().find("<svg") == 0);
  // The files, and the trace as JSON (Python's parser: the format Chrome and
  // Perfetto read).
  const std::string prefix = std::string(std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp") +
                             "/tx_profile_test_" + std::to_string(::getpid());
  const std::string path = p->write(prefix);
  CHECK(read_file(prefix + ".svg").find("</svg>") != std::string::npos);
  const std::string cmd =
      "python3 -c \"import json,sys; t=json.load(open(sys.argv[1])); "
      "x=[e for e in t['traceEvents'] if e['ph']=='X']; "
      "assert len(x)==8 and {e['name'] for e in x}=={'stage','reduce'}, x\" " +
      path;
  CHECK(std::system(cmd.c_str()) == 0);
  // The PNG: 1000 x (4 warps x 8 px), RGB, whose pixels hold the regions' colours.
  const std::string png_cmd =
      "python3 -c \"import struct,sys,zlib; d=open(sys.argv[1],'rb').read(); "
      "assert d[:8]==b'\\x89PNG\\r\\n\\x1a\\n'; w,h=struct.unpack('>II',d[16:24]); "
      "assert (w,h)==(1000,32),(w,h); i=d.index(b'IDAT'); n=struct.unpack('>I',d[i-4:i])[0]; "
      "raw=zlib.decompress(d[i+4:i+4+n]); assert len(raw)==h*(1+3*w); "
      "assert raw.count(bytes([0x4e,0x79,0xa7]))>0 and raw.count(bytes([0xf2,0x8e,0x2b]))>0\" " +
      prefix + ".png";
  CHECK(std::system(png_cmd.c_str()) == 0);
  std::remove(path.c_str());
  std::remove((prefix + ".svg").c_str());
  std::remove((prefix + ".png").c_str());
}

TEST_CASE("the Hopper GEMM sample's regions on the host: producer, consumers, epilogue") {
  Kernel k = compile(gemm_hopper(256, 256, 256, bf16, {.bm = 128, .bn = 128, .ctas = 2}),
                     {.device = Device::host(), .profile = true});
  auto a = test::random_values(256 * 256, bf16, -1, 1);
  auto b = test::random_values(256 * 256, bf16, -1, 1);
  Tensor A = Tensor::from_doubles(a, {256, 256}, bf16, Device::host());
  Tensor B = Tensor::from_doubles(b, {256, 256}, bf16, Device::host());
  Tensor C = Tensor::empty({256, 256}, bf16, Device::host());
  C.fill_bits(test::poison_bits(bf16));
  k(A, B, C);
  CHECK(test::gemm_error(a, b, C.to_doubles(), 256, 256, 256, 0x1p-8) <= 1.0);
  auto p = k.last_profile();
  REQUIRE(p.has_value());
  CHECK(p->ctas == 2);
  CHECK(p->warps_per_cta == 12);
  std::set<std::string> names(p->regions.begin(), p->regions.end());
  CHECK(names == std::set<std::string>{"producer wait", "producer load", "consumer wait", "mma",
                                       "epilogue"});
  // Producer regions on warpgroup 0's warps, the consumers' on 1 and 2;
  // 4 tiles of 4 K steps over 2 CTAs: 8 K steps per CTA.
  std::map<std::string, int> passes;
  for (const auto& s : p->slices) {
    const std::string& r = p->regions[static_cast<std::size_t>(s.region)];
    ++passes[r];
    if (r.rfind("producer", 0) == 0)
      CHECK(s.warp < 4);
    else
      CHECK(s.warp >= 4);
  }
  CHECK(passes["mma"] == 2 * 8 * 8);       // 2 CTAs, 8 consumer warps, 8 K steps
  CHECK(passes["epilogue"] == 2 * 8 * 2);  // 2 tiles per CTA
}
