// The cost of the checked host mode (TX_CHECK=1) on the seed samples and
// the two Hopper samples (TMA, wgmma, mbarriers: checked through the model
// of sm_90, unchecked as fibers with synchronous copies and FMA products):
// each kernel run on the host plain and checked, compile and launch timed
// separately. The numbers are in docs/reliability.md.
//
//   bench_checked_mode [repeats]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "tx/tx.hpp"

#define TX_SAMPLE_NO_MAIN
#include "attention_hopper.cpp"
#include "cta_sqrt_smem.cpp"
#include "gemm_hopper.cpp"
#include "thread_sum_local.cpp"
#include "warp_copy_reg.cpp"
#include "warp_sqrt_reg.cpp"
#include "warp_sum_shuffle.cpp"

using namespace tx;
using Clock = std::chrono::steady_clock;

namespace {

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

struct Times {
  double compile_ms = 0, launch_us = 0;
};

Times measure(const PrimFunc& f, bool checked, int repeats) {
  Times t;
  auto t0 = Clock::now();
  Kernel k = checked ? compile(f, {.checked = true}) : compile(f, {.device = Device::host()});
  std::vector<Tensor> args;
  for (const auto& p : k.info().params)
    args.push_back(Tensor::from_doubles(std::vector<double>(static_cast<std::size_t>(p.elems), 1.5),
                                        p.shape, p.dtype, Device::host()));
  k.launch(args);  // the host JIT compiles on the first launch
  t.compile_ms = ms_since(t0);
  std::vector<double> us;
  for (int r = 0; r < repeats; ++r) {
    auto t1 = Clock::now();
    k.launch(args);
    us.push_back(ms_since(t1) * 1000.0);
  }
  std::sort(us.begin(), us.end());
  t.launch_us = us[us.size() / 2];
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  int repeats = argc > 1 ? std::atoi(argv[1]) : 200;
  setenv("TX_HOST_CACHE", "0", 1);  // time the JIT compile of each, not a cache hit
  struct Sample {
    const char* name;
    PrimFunc f;
  };
  // And one larger kernel: y = 2x + 1 over 2^20 floats (4096 CTAs of 256).
  PrimFunc axpb = T::prim_func("axpb", [&](Handle X_ptr, Handle Y_ptr) {
    auto X = T::match_buffer(X_ptr, {4096, 256}, f32);
    auto Y = T::match_buffer(Y_ptr, {4096, 256}, f32);
    auto row = T::cta_id({4096});
    auto col = T::thread_id({256});
    Y(row, col) = X(row, col) * 2.0f + 1.0f;
  });
  std::vector<Sample> samples = {
      {"warp_sqrt_reg", warp_sqrt()},
      {"cta_sqrt_smem", cta_sqrt()},
      {"warp_copy_reg", warp_copy_reg()},
      {"thread_sum_local", thread_sum()},
      {"warp_sum_shuffle", warp_sum_shuffle()},
      {"axpb 2^20 elements", axpb},
      {"gemm_hopper 512x768x384", gemm_hopper(512, 768, 384)},
      {"attention_hopper 2x4x200x300, D 64, causal", attention_hopper({.batch = 2,
                                                                       .heads = 4,
                                                                       .kv_heads = 2,
                                                                       .seq_q = 200,
                                                                       .seq_k = 300,
                                                                       .head_dim = 64,
                                                                       .causal = true})}};
  std::printf(
      "| kernel | compile plain (ms) | compile checked (ms) | launch plain (us) | "
      "launch checked (us) | launch ratio |\n|---|---|---|---|---|---|\n");
  for (const Sample& s : samples) {
    const std::string name = s.name;
    const bool big = name.rfind("axpb", 0) == 0 || name.find("hopper") != std::string::npos;
    int n = big ? std::max(3, repeats / 50) : repeats;
    Times plain = measure(s.f, false, n), checked = measure(s.f, true, n);
    std::printf("| %s | %.1f | %.1f | %.1f | %.1f | %.1fx |\n", s.name, plain.compile_ms,
                checked.compile_ms, plain.launch_us, checked.launch_us,
                checked.launch_us / plain.launch_us);
  }
  return 0;
}
