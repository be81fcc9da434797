// bench/rows: tx's row kernels (softmax, log_softmax, rms_norm, layer_norm,
// add_rms_norm) against a device-to-device copy of the same bytes (the
// ceiling) in the same run; bench/rows.py times PyTorch eager and
// torch.compile on the same cases and writes the report (bench/run_rows.sh
// runs both).
//
//   bench_rows --cases          the case list (JSON) for the Python side
//   bench_rows --out tx.json    time every case
//
// bytes = x read + y written (add_rms_norm: x and residual read, y and the
// new residual written); the weight and bias rows are not counted (L2).
// Timing: CUDA events around each call, 5 warm-ups, median of 30.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "bench_util.hpp"
#include "tx/ops/ops.hpp"
#include "tx/runtime/cuda_driver.hpp"
#include "tx/tx.hpp"

using namespace tx;
using bench::random_tensor;
using bench::time_ms;

namespace {

struct Case {
  std::string op;
  DType dtype;
  std::int64_t rows = 0, cols = 0;
  std::string label() const {
    std::ostringstream o;
    o << op << " (" << rows << "," << cols << ")";
    return o.str();
  }
  std::size_t bytes() const {
    const auto elems = static_cast<std::size_t>(rows * cols);
    const auto n = elems * static_cast<std::size_t>(dtype.bytes());
    // The fp8 forms write one byte per element of y.
    if (op == "rms_norm_fp8") return n + elems;
    if (op == "add_rms_norm_fp8") return 3 * n + elems;
    return (op == "add_rms_norm" ? 4 : 2) * n;
  }
};

std::vector<Case> cases() {
  std::vector<Case> c;
  for (const char* op : {"softmax", "log_softmax", "rms_norm", "layer_norm", "add_rms_norm"})
    for (DType t : {bf16, f32})
      for (auto [r, cols] :
           {std::pair<std::int64_t, std::int64_t>{16384, 4096}, {4096, 16384}, {65536, 1024}})
        c.push_back({op, t, r, cols});
  // The norms straight into fp8 e4m3 (y / scale, saturated), from bf16.
  for (const char* op : {"rms_norm_fp8", "add_rms_norm_fp8"})
    for (auto [r, cols] :
         {std::pair<std::int64_t, std::int64_t>{16384, 4096}, {4096, 16384}, {65536, 1024}})
      c.push_back({op, bf16, r, cols});
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "--out";
  if (mode == "--cases") {
    std::cout << "[\n";
    auto cs = cases();
    for (std::size_t i = 0; i < cs.size(); ++i) {
      const Case& c = cs[i];
      std::cout << "  {\"label\": \"" << c.label() << "\", \"op\": \"" << c.op
                << "\", \"dtype\": \"" << c.dtype.name() << "\", \"rows\": " << c.rows
                << ", \"cols\": " << c.cols << ", \"bytes\": " << c.bytes() << "}"
                << (i + 1 < cs.size() ? "," : "") << "\n";
    }
    std::cout << "]\n";
    return 0;
  }
  std::string out = argc > 2 ? argv[2] : "tx_rows.json";
  std::string why;
  if (!runtime::cuda_available(&why)) {
    std::fprintf(stderr, "bench_rows needs a GPU: %s\n", why.c_str());
    return 77;
  }
  std::ofstream js(out);
  js << "{\"device\": \"" << runtime::current_device().name << "\", \"results\": [\n";
  bool first = true;
  for (const Case& c : cases()) {
    Tensor x = random_tensor({c.rows, c.cols}, c.dtype);
    Tensor w = random_tensor({c.cols}, c.dtype), bias = random_tensor({c.cols}, c.dtype);
    const bool add = c.op == "add_rms_norm" || c.op == "add_rms_norm_fp8";
    Tensor res = add ? random_tensor({c.rows, c.cols}, c.dtype) : Tensor();
    Tensor y8 = Tensor::empty({c.rows, c.cols}, f8e4m3, x.device());
    std::function<void()> f;
    if (c.op == "softmax")
      f = [&] { (void)ops::softmax(x); };
    else if (c.op == "log_softmax")
      f = [&] { (void)ops::log_softmax(x); };
    else if (c.op == "rms_norm")
      f = [&] { (void)ops::rms_norm(x, w, 1e-6); };
    else if (c.op == "layer_norm")
      f = [&] { (void)ops::layer_norm(x, w, bias, 1e-5); };
    else if (c.op == "add_rms_norm")
      f = [&] { ops::add_rms_norm_(x, res, w, 1e-6); };
    else if (c.op == "rms_norm_fp8")
      f = [&] { ops::rms_norm_out(y8, x, w, 1e-6, 0.05); };
    else
      f = [&] { ops::add_rms_norm_out(y8, x, res, w, 1e-6, 0.05); };
    const double tx_ms = time_ms(f);
    bench::report(js, first, c.label(), c.dtype.name(), c.bytes(), tx_ms,
                  bench::copy_ms(c.bytes()));
  }
  js << "\n]}\n";
  return 0;
}
