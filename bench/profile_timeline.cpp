// Timelines of the Hopper GEMM and attention samples on the GPU (issue 46):
// each compiled with profiling on, launched once warm, its trace and picture
// written to OUT_DIR, its summary printed; and the kernels' time with
// profiling off and on (CUDA events around each launch; a profiled launch
// also resets and reads back its records, which the second column counts
// too, so `ncu` on the two kernels gives the kernel-only overhead).
//
//   bench_profile_timeline OUT_DIR
#include <algorithm>
#include <cstdio>
#include <string>

#include "bench_util.hpp"
#include "tx/tx.hpp"

#define TX_SAMPLE_NO_MAIN
#include "attention_hopper.cpp"
#include "gemm_hopper.cpp"

using namespace tx;

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : ".";
  // --ncu: launch each kernel once with profiling off, then once on, and
  // stop (for `ncu`, whose kernel durations leave out the records' reset and
  // read-back).
  const std::string mode = argc > 2 ? argv[2] : "";
  const bool ncu = mode == "--ncu";
  auto progress = [](const std::string& name, const char* what) {
    std::fprintf(stderr, "[%s] %s\n", name.c_str(), what);
    std::fflush(stderr);
  };
  if (!runtime::cuda_available()) {
    std::printf("SKIPPED: no GPU\n");
    return 77;
  }
  auto run = [&](const std::string& name, const PrimFunc& f, std::vector<Tensor> args) {
    Kernel off = compile(f, {.profile = false});
    Kernel on = compile(f, {.profile = true});
    if (ncu) {
      off.launch(args);
      on.launch(args);
      synchronize();
      return;
    }
    progress(name, "first launches, off and on");
    off.launch(args);
    synchronize();
    on.launch(args);  // warm: compiled, first records
    synchronize();
    progress(name, "timing off");
    const double ms_off = bench::time_ms([&] { off.launch(args); });
    progress(name, "timing on");
    const double ms_on = bench::time_ms([&] { on.launch(args); }, 2, 10);
    progress(name, "the profile");
    on.launch(args);
    KernelProfile p = *on.last_profile();
    double first = 1e300, last = -1e300;
    for (const ProfileSlice& s : p.slices) {
      first = std::min(first, s.begin);
      last = std::max(last, s.end);
    }
    // The whole launch's summary; the first four CTAs' trace and pictures.
    const std::string path = p.first_ctas(4).write(dir + "/" + name);
    std::printf("== %s: %.3f ms profiling off, %.3f ms on (with the records' reset and "
                "read-back); records span %.1f us; %zu slices, %lld dropped; trace of the first "
                "4 CTAs %s\n%s\n",
                name.c_str(), ms_off, ms_on, last - first, p.slices.size(),
                static_cast<long long>(p.dropped), path.c_str(), p.summary().c_str());
    std::fflush(stdout);
  };
  if (mode != "--attention") {
    const std::int64_t M = 4096, N = 4096, K = 2048;
    run("gemm_hopper_4096x4096x2048", gemm_hopper(M, N, K),
        {bench::random_tensor({M, K}, bf16), bench::random_tensor({K, N}, bf16),
         Tensor::empty({M, N}, bf16, Device::cuda())});
  }
  {
    const AttentionShape p{.batch = 1,
                           .heads = 16,
                           .kv_heads = 16,
                           .seq_q = 4096,
                           .seq_k = 4096,
                           .head_dim = 128,
                           .causal = true};
    run("attention_hopper_b1_h16_4k_d128_causal", attention_hopper(p),
        {bench::random_tensor({p.batch, p.seq_q, p.heads, p.head_dim}, bf16),
         bench::random_tensor({p.batch, p.seq_k, p.kv_heads, p.head_dim}, bf16),
         bench::random_tensor({p.batch, p.seq_k, p.kv_heads, p.head_dim}, bf16),
         Tensor::empty({p.batch, p.seq_q, p.heads, p.head_dim}, bf16, Device::cuda()),
         Tensor::empty({p.batch, p.heads, p.seq_q}, f32, Device::cuda())});
  }
  return 0;
}
