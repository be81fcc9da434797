// Runs the kernels of broken_pipelines.hpp (not a test by itself; the CPU
// test is host_pipeline_checks):
//
//   broken_pipelines --device=host [NAME]   each kernel in the checked mode; prints
//                                           what it reports
//   broken_pipelines --device=cuda NAME     one kernel on the GPU (run it under
//                                           compute-sanitizer; a deadlocked one
//                                           hangs: run it under timeout)
//   broken_pipelines --list                 the names and what each one gets wrong
//
// Exit status: 0 when every kernel ran (and, on the host, each broken one
// was reported as expected and each correct one ran silent and right), 1
// otherwise.
#include "broken_pipelines.hpp"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>

using namespace tx;

namespace {

// Runs k on fresh random inputs (C poisoned); the largest error against a
// double-precision product when the kernel is a GEMM (-1 otherwise).
double run(const Kernel& kernel) {
  std::mt19937_64 rng(std::random_device{}());
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  std::vector<Tensor> args;
  std::vector<std::vector<double>> in;
  for (const auto& p : kernel.info().params) {
    std::vector<double> v(static_cast<std::size_t>(p.elems));
    for (double& x : v) x = u(rng);
    Tensor t = Tensor::from_doubles(v, p.shape, p.dtype, kernel.device());
    in.push_back(t.to_doubles());  // as rounded to the dtype
    args.push_back(t);
  }
  const bool gemm = args.size() == 3;
  if (gemm) args[2].fill_bits(0x7fc00000u);  // NaN until written
  kernel.launch(args);
  synchronize();
  if (!gemm) return -1;
  const auto& A = in[0];
  const auto& B = in[1];
  const std::int64_t M = args[0].shape()[0], K = args[0].shape()[1], N = args[1].shape()[1];
  std::vector<double> C = args[2].to_doubles();
  double worst = 0;
  for (std::int64_t i = 0; i < M; ++i)
    for (std::int64_t j = 0; j < N; ++j) {
      double want = 0;
      for (std::int64_t p = 0; p < K; ++p) want += A[i * K + p] * B[p * N + j];
      const double got = C[static_cast<std::size_t>(i * N + j)];
      worst = std::isnan(got) ? INFINITY : std::max(worst, std::abs(got - want));
    }
  return worst;
}

}  // namespace

int main(int argc, char** argv) {
  std::string device = "host", only;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--list") {
      for (const auto& k : test::broken_pipelines())
        std::printf("%-26s %s\n", k.name.c_str(), k.what.c_str());
      return 0;
    }
    if (a.rfind("--device=", 0) == 0)
      device = a.substr(9);
    else
      only = a;
  }
  const bool host = device == "host" || device == "cpu";
  int bad = 0, ran = 0;
  for (const auto& k : test::broken_pipelines()) {
    if (!only.empty() && k.name != only) continue;
    ++ran;
    try {
      Kernel kernel = host ? compile(k.func, {.device = Device::host(), .checked = true})
                           : compile(k.func, {.device = Device::cuda()});
      const double err = run(kernel);
      const bool right = err < 0 || err < 1e-2;
      std::printf("%s: ran, nothing reported%s (max error %.3g)\n", k.name.c_str(),
                  !host || k.expect.empty() ? "" : " (MISSED)", err);
      bad += host && (!k.expect.empty() || !right);
    } catch (const Error& e) {
      const std::string all = e.reason() + "\n" + e.detail();
      bool found = !k.expect.empty();
      for (const auto& x : k.expect) found = found && all.find(x) != std::string::npos;
      std::printf("%s: %s\n%s%s\n", k.name.c_str(), e.reason().c_str(), e.detail().c_str(),
                  found ? "" : "\n  (UNEXPECTED)");
      bad += !found;
    }
  }
  if (ran == 0) {
    std::fprintf(stderr, "broken_pipelines: no kernel named %s (--list)\n", only.c_str());
    return 1;
  }
  return bad ? 1 : 0;
}
