// What compiling in a child process (tx-nvrtc-worker) costs next to compiling
// in this process: NVRTC to an sm_90a cubin (no GPU needed), no cache.
//
//   bench_compile_isolation [ROUNDS]        every kernel in both modes, alternating
//                                           (which mode goes first alternates too),
//                                           ROUNDS times each (default 3); then an
//                                           empty kernel 40 times each (what the
//                                           child costs beyond NVRTC's own work)
//   bench_compile_isolation --first MODE    one compile in a fresh process (MODE:
//                                           process | inprocess): the cost of the
//                                           first compile, worker start included
//
// Kernels: the op library's shape-generic elementwise kernels (small: what
// most programs compile) and matmul's tensor-core kernels (large), each with
// its CUDA as tx generates it. docs/reliability.md, "Compiler crashes", has
// the numbers and the default they chose.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tx/ops/ops.hpp"
#include "tx/runtime/nvrtc.hpp"
#include "tx/tx.hpp"

using namespace tx;
namespace rt = tx::runtime;

namespace {

struct Source {
  std::string name, cuda;
};

std::vector<Source> kernels() {
  std::vector<Source> out;
  const Device host = Device::host();  // builds IR and CUDA, never needs a GPU
  for (const char* op : {"gelu", "exp", "silu", "relu", "add", "mul", "where", "maximum"})
    for (DType t : {f32, bf16, f16}) {
      const bool binary =
          std::string(op) == "add" || std::string(op) == "mul" || std::string(op) == "maximum";
      const bool where = std::string(op) == "where";
      std::vector<std::vector<std::int64_t>> shapes(where ? 3 : binary ? 2 : 1, {4096, 1024});
      ops::Elementwise e(op, shapes, t, {}, {}, host);
      out.push_back({e.kernel().name(), e.kernel().cuda_source()});
    }
  for (DType t : {bf16, f16}) {
    for (const char* tiling : {"wgmma 128x256x64 s4", "128x256x64 w64x64 s3"}) {
      const ops::MatmulTiling* c = nullptr;
      for (const auto& m : ops::matmul_tilings())
        if (m.str() == tiling) c = &m;
      Kernel k = compile(ops::detail::matmul_kernel(4096, 4096, 4096, t, *c), {.device = host});
      std::string name = k.name() + "_" + (c->wgmma ? "wgmma" : "mma");
      out.push_back({name, k.cuda_source()});
    }
  }
  return out;
}

double compile_ms(const Source& s, const std::string& program) {
  const auto t0 = std::chrono::steady_clock::now();
  auto r = rt::nvrtc_compile(s.cuda, program + ".cu", "sm_90a", rt::NvrtcTarget::cubin);
  const auto t1 = std::chrono::steady_clock::now();
  if (r.cubin.empty()) std::fprintf(stderr, "empty cubin for %s\n", program.c_str());
  return std::chrono::duration<double, std::milli>(t1 - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "--first") {
    const bool child = std::string(argv[2]) == "process";
    rt::set_compile_isolation(child ? rt::CompileIsolation::process
                                    : rt::CompileIsolation::in_process);
    Source s = kernels().front();
    // NVRTC opened by this process first (both modes do it: its version is
    // part of every cache key), so that the time below is the compile's.
    rt::nvrtc_version();
    std::printf("first compile (%s) %s: %.1f ms\n", argv[2], s.name.c_str(), compile_ms(s, s.name));
    return 0;
  }
  const int rounds = argc > 1 ? std::max(1, std::atoi(argv[1])) : 3;
  const std::vector<Source> ks = kernels();
  rt::nvrtc_version();
  // Warm both: NVRTC's first compile in each process, and the worker's start.
  rt::set_compile_isolation(rt::CompileIsolation::in_process);
  compile_ms(ks.front(), "warm_here");
  rt::set_compile_isolation(rt::CompileIsolation::process);
  compile_ms(ks.front(), "warm_child");
  std::printf(
      "| kernel | CUDA bytes | in process (ms) | child process (ms) | child - in process (ms) |\n");
  std::printf("|---|---|---|---|---|\n");
  std::vector<double> here_small, child_small, diff_small, here_large, child_large, diff_large;
  for (std::size_t i = 0; i < ks.size(); ++i) {
    std::vector<double> h, c;
    for (int r = 0; r < rounds; ++r) {
      // Alternate which mode goes first; a distinct program name each time.
      for (int m = 0; m < 2; ++m) {
        const bool child = (m + r + static_cast<int>(i)) % 2 == 0;
        rt::set_compile_isolation(child ? rt::CompileIsolation::process
                                        : rt::CompileIsolation::in_process);
        (child ? c : h).push_back(compile_ms(ks[i], ks[i].name + "_r" + std::to_string(r)));
      }
    }
    const double mh = median(h), mc = median(c);
    const bool large = ks[i].name.rfind("matmul", 0) == 0;
    (large ? here_large : here_small).push_back(mh);
    (large ? child_large : child_small).push_back(mc);
    (large ? diff_large : diff_small).push_back(mc - mh);
    std::printf("| %s | %zu | %.1f | %.1f | %+.1f |\n", ks[i].name.c_str(), ks[i].cuda.size(), mh,
                mc, mc - mh);
  }
  auto summary = [](const char* what, const std::vector<double>& h, const std::vector<double>& c,
                    const std::vector<double>& d) {
    std::printf(
        "%s (%zu kernels): median in process %.1f ms, child %.1f ms, median difference "
        "%+.2f ms (%+.1f%%)\n",
        what, h.size(), median(h), median(c), median(d), 100 * median(d) / median(h));
  };
  summary("elementwise", here_small, child_small, diff_small);
  summary("matmul", here_large, child_large, diff_large);
  // The smallest compile there is: what remains is the frames on the socket
  // and the worker's bookkeeping.
  const Source empty{"empty", "extern \"C\" __global__ void empty_kernel() {}\n"};
  std::vector<double> h, c, d;
  for (int r = 0; r < 40; ++r) {
    rt::set_compile_isolation(rt::CompileIsolation::in_process);
    const double a = compile_ms(empty, "empty_" + std::to_string(r));
    rt::set_compile_isolation(rt::CompileIsolation::process);
    const double b = compile_ms(empty, "empty_" + std::to_string(r));
    h.push_back(a);
    c.push_back(b);
    d.push_back(b - a);
  }
  std::printf(
      "empty kernel (40 pairs): median in process %.2f ms, child %.2f ms, median "
      "difference %+.2f ms\n",
      median(h), median(c), median(d));
  const auto st = rt::compile_worker_stats();
  std::printf("workers started %llu (%.2f ms each, until ready), compiles in a worker %llu\n",
              static_cast<unsigned long long>(st.spawned),
              1e-6 * static_cast<double>(st.spawn_ns) / static_cast<double>(st.spawned),
              static_cast<unsigned long long>(st.compiles));
  // The round trip beyond NVRTC's own time in the worker: the price of the
  // child per compile, without the compiles' noise.
  std::printf(
      "per compile in a worker: round trip %.3f ms, of which NVRTC %.3f ms: the child "
      "process adds %.3f ms\n",
      1e-6 * static_cast<double>(st.round_trip_ns) / static_cast<double>(st.compiles),
      1e-6 * static_cast<double>(st.worker_compile_ns) / static_cast<double>(st.compiles),
      1e-6 * static_cast<double>(st.round_trip_ns - st.worker_compile_ns) /
          static_cast<double>(st.compiles));
  return 0;
}
