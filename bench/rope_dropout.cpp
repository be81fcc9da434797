// bench/rope_dropout: tx's rope and dropout against a device-to-device copy
// of the same bytes (the ceiling) in the same run; bench/rope_dropout.py
// times PyTorch eager and torch.compile on the same cases and writes the
// report (bench/run_rope_dropout.sh runs both).
//
//   bench_rope_dropout --cases          the case list (JSON) for the Python side
//   bench_rope_dropout --out tx.json    time every case
//
// rope: T tokens, H = 32 query heads, Hkv key heads, head size 128, full
// rotary, neox, an f32 cos/sin cache of 8192 rows, int64 positions; bytes =
// q and k read and written + the positions (the cache rows a batch touches
// mostly hit L2). dropout: p = 0.1, bytes = x read + y written (the mask is
// not asked for). Timing: CUDA events, 5 warm-ups, median of 30.
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
  std::string op;  // "rope" or "dropout"
  DType dtype;
  std::int64_t tokens = 0, heads = 32, kv_heads = 0, head_size = 128;  // rope
  std::int64_t rows = 0, cols = 0;                                     // dropout
  std::string label() const {
    std::ostringstream o;
    if (op == "rope")
      o << "rope T" << tokens << " H" << heads << " Hkv" << kv_heads << " hd" << head_size;
    else
      o << "dropout (" << rows << "," << cols << ")";
    return o.str();
  }
  std::size_t bytes() const {
    const auto b = static_cast<std::size_t>(dtype.bytes());
    if (op == "rope")
      return 2 * static_cast<std::size_t>(tokens * (heads + kv_heads) * head_size) * b +
             static_cast<std::size_t>(tokens) * 8;
    return 2 * static_cast<std::size_t>(rows * cols) * b;
  }
};

std::vector<Case> cases() {
  std::vector<Case> c;
  for (DType t : {bf16, f16})
    for (std::int64_t tokens : {4096, 16384})
      for (std::int64_t kv : {8, 32}) {
        Case k{"rope", t};
        k.tokens = tokens;
        k.kv_heads = kv;
        c.push_back(k);
      }
  for (DType t : {f32, bf16})
    for (auto [r, cols] :
         {std::pair<std::int64_t, std::int64_t>{1024, 4096}, {1024, 10240}, {16384, 16384}}) {
      Case k{"dropout", t};
      k.rows = r;
      k.cols = cols;
      c.push_back(k);
    }
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
                << "\", \"dtype\": \"" << c.dtype.name() << "\", \"tokens\": " << c.tokens
                << ", \"heads\": " << c.heads << ", \"kv_heads\": " << c.kv_heads
                << ", \"head_size\": " << c.head_size << ", \"rows\": " << c.rows
                << ", \"cols\": " << c.cols << ", \"bytes\": " << c.bytes() << "}"
                << (i + 1 < cs.size() ? "," : "") << "\n";
    }
    std::cout << "]\n";
    return 0;
  }
  std::string out = argc > 2 ? argv[2] : "tx_rope_dropout.json";
  std::string why;
  if (!runtime::cuda_available(&why)) {
    std::fprintf(stderr, "bench_rope_dropout needs a GPU: %s\n", why.c_str());
    return 77;
  }
  std::ofstream js(out);
  js << "{\"device\": \"" << runtime::current_device().name << "\", \"results\": [\n";
  bool first = true;
  for (const Case& c : cases()) {
    double tx_ms = 0;
    if (c.op == "rope") {
      Tensor cache = ops::rope_cache(c.head_size, 8192, 10000.0, f32, Device::cuda());
      std::vector<double> pv(static_cast<std::size_t>(c.tokens));
      for (std::size_t i = 0; i < pv.size(); ++i) pv[i] = static_cast<double>((i * 7919) % 8192);
      Tensor pos = Tensor::from_doubles(pv, {c.tokens}, i64, Device::cuda());
      Tensor q = random_tensor({c.tokens, c.heads * c.head_size}, c.dtype);
      Tensor k = random_tensor({c.tokens, c.kv_heads * c.head_size}, c.dtype);
      tx_ms = time_ms([&] { ops::rope(pos, q, k, cache, {.head_size = c.head_size}); });
    } else {
      Tensor x = random_tensor({c.rows, c.cols}, c.dtype);
      Tensor y = Tensor::empty({c.rows, c.cols}, c.dtype, Device::cuda());
      std::int64_t offset = 0;
      tx_ms = time_ms([&] {
        ops::dropout(x, 0.1, 1234, offset, y);
        offset += c.rows * c.cols;  // as a generator advances
      });
    }
    bench::report(js, first, c.label(), c.dtype.name(), c.bytes(), tx_ms,
                  bench::copy_ms(c.bytes()));
  }
  js << "\n]}\n";
  return 0;
}
