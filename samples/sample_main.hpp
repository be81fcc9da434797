// What every sample shares: the command line (--emit=tirx|lowered|cuda|ptx,
// --device=cuda|host), choosing where to run, and the final check against a
// double-precision reference. A sample reads as: build the kernel, make
// random inputs, run, compare.
#pragma once

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <random>
#include <string>
#include <tx/tx.hpp>
#include <vector>

namespace sample {

struct Args {
  std::string emit;    // empty: run the kernel
  std::string device;  // empty: tx's default
};

inline Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    if (s.rfind("--emit=", 0) == 0) {
      a.emit = s.substr(7);
    } else if (s.rfind("--device=", 0) == 0) {
      a.device = s.substr(9);
      if (a.device != "cuda" && a.device != "gpu" && a.device != "host" && a.device != "cpu") {
        std::fprintf(stderr, "unknown --device=%s (cuda or host)\n", a.device.c_str());
        std::exit(2);
      }
    } else {
      std::fprintf(stderr, "usage: %s [--emit=tirx|lowered|cuda|ptx] [--device=cuda|host]\n",
                   argv[0]);
      std::exit(2);
    }
  }
  return a;
}

// Random values in [lo, hi), rounded to dtype, never zero.
inline std::vector<double> random(std::size_t n, tx::DType t, double lo, double hi) {
  static std::mt19937_64 rng(std::random_device{}());
  std::uniform_real_distribution<double> d(lo, hi);
  std::vector<double> v(n);
  for (auto& x : v) do
      x = tx::quantize(d(rng), t);
    while (x == 0.0);
  return v;
}

// Runs the sample: prints what --emit asks for, or runs `body` on the chosen
// device. `body` returns the largest error relative to the tolerance
// (<= 1 passes). Exit codes: 0 pass, 1 wrong result, 2 tx error, 77 no
// device to run on.
// `options`: how the kernel is compiled (the device and arch come from the
// command line).
inline int run(int argc, char** argv, const tx::PrimFunc& func,
               const std::function<double(const tx::Kernel&)>& body,
               tx::CompileOptions options = {}) {
  Args a = parse(argc, argv);
  try {
    tx::CompileOptions opt = options;
    if (!a.device.empty())
      opt.device =
          a.device == "host" || a.device == "cpu" ? tx::Device::host() : tx::Device::cuda();
    // What --emit prints is the code for the GPU (sm_90a, as the PTX), on any
    // machine: the host lowers tensor-core calls to portable variants, and
    // the reviewed goldens show the GPU's code. --device=host shows the host's.
    if (!a.emit.empty() && a.device.empty()) {
      opt.device = tx::Device::cuda();
      opt.arch = "sm_90a";
    }
    if (a.emit == "tirx") {
      std::cout << func;
      return 0;
    }
    tx::Kernel k = tx::compile(func, opt);
    if (a.emit == "lowered") {
      std::cout << k.lowered_ir();
      return 0;
    }
    if (a.emit == "cuda") {
      std::cout << k.cuda_source();
      return 0;
    }
    if (a.emit == "ptx") {
      std::cout << k.ptx("sm_90a");
      return 0;
    }
    if (!a.emit.empty()) {
      std::fprintf(stderr, "unknown --emit=%s (tirx, lowered, cuda or ptx)\n", a.emit.c_str());
      return 2;
    }
    std::cout << "== " << func->name << ": the kernel as written\n" << func;
    std::cout << "== generated TIRx IR\n" << k.lowered_ir();
    std::cout << "== CUDA\n" << k.cuda_source();
    if (!k.device().is_cuda()) {
      std::string why;
      if (!tx::runtime::host_jit_available(&why)) {
        std::cout << "SKIPPED: no GPU and no host JIT: " << why << "\n";
        return 77;
      }
    }
    std::cout << "== running on " << k.device().str() << "\n";
    double err = body(k);
    // TX_PROFILE=1: what the T::profile regions recorded (TX_PROFILE_DIR=d
    // also writes d/<kernel>-1.trace.json and .svg).
    if (auto p = k.last_profile()) std::cout << p->summary();
    bool ok = err <= 1.0;
    std::printf("max error (relative to tolerance): %.3g -> %s\n", err, ok ? "PASS" : "FAIL");
    return ok ? 0 : 1;
  } catch (const tx::Error& e) {
    std::cerr << e.what() << "\n";
    return 2;
  }
}

// max |got - want| / (atol + rtol |want|); NaN anywhere fails.
inline double max_error(const std::vector<double>& got, const std::vector<double>& want,
                        double atol, double rtol) {
  double worst = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(got[i]) != std::isnan(want[i])) return INFINITY;
    if (std::isnan(want[i])) continue;
    worst = std::max(worst, std::fabs(got[i] - want[i]) / (atol + rtol * std::fabs(want[i])));
  }
  return got.size() == want.size() ? worst : INFINITY;
}

}  // namespace sample
