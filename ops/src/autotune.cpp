// Opt-in autotuning: time strategy x threads x num_per_thread on the GPU for
// one (op, dtype, shape class), show progress, and remember the winner per
// GPU in the disk cache folder (autotune.txt, one "key = config" per line),
// so the next process skips the search.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <sstream>

#include "ops_internal.hpp"
#include "tx/ops/broadcast.hpp"
#include "tx/runtime/cuda_driver.hpp"
#include "tx/runtime/disk_cache.hpp"

namespace tx::ops::detail {

namespace {

// Shapes that tune alike: log2 of the element count, and the coalesced
// broadcast pattern (which operands are contiguous / broadcast innermost).
std::string shape_class(const std::vector<std::vector<std::int64_t>>& shapes) {
  std::ostringstream k;
  Coalesced c = coalesce_broadcast(shapes);
  std::int64_t n = 1;
  for (auto e : c.out_shape) n *= e;
  int lg = 0;
  while ((std::int64_t{1} << (lg + 1)) <= n) ++lg;
  k << "n2^" << lg << "_r" << c.shape.size();
  for (const auto& st : c.strides) k << "_" << (st.empty() ? 0 : st.back());
  if (!c.shape.empty()) k << "_i" << (c.shape.back() % 64 == 0 ? 64 : c.shape.back() % 64);
  return k.str();
}

std::string path() {
  const std::string& dir = runtime::DiskCache::instance().dir();
  return dir.empty() ? std::string() : dir + "/autotune.txt";
}

std::string encode(const Config& c) {
  return std::string(strategy_name(*c.strategy)) + " " + std::to_string(c.threads) + " " +
         std::to_string(c.num_per_thread);
}

std::optional<Config> lookup(const std::string& key) {
  std::ifstream in(path());
  for (std::string line; std::getline(in, line);) {
    auto eq = line.find(" = ");
    if (eq == std::string::npos || line.substr(0, eq) != key) continue;
    std::istringstream v(line.substr(eq + 3));
    std::string strat;
    Config c;
    v >> strat >> c.threads >> c.num_per_thread;
    for (Strategy s : {Strategy::direct, Strategy::explicit_parallel, Strategy::register_copy})
      if (strat == strategy_name(s)) c.strategy = s;
    if (c.strategy && v) return c;
  }
  return std::nullopt;
}

void remember(const std::string& key, const Config& c) {
  std::string p = path();
  if (p.empty()) return;
  runtime::DiskCache::instance().store("autotune-probe", {});  // creates the folder (0700)
  std::ofstream out(p, std::ios::app);
  out << key << " = " << encode(c) << "\n";
}

}  // namespace

Config tuned_config(const OpInfo& op, DType dtype, const std::vector<std::vector<std::int64_t>>& shapes,
                    const Params& params, Device device, const Config& requested) {
  if (!device.is_cuda()) {
    warn("tx.ops." + op.name + ": autotuning times kernels on a GPU; using the defaults on " + device.str());
    return resolved(requested, dtype, op);
  }
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  const runtime::DeviceInfo& dev = runtime::current_device();
  std::string key = op.name + "|" + dtype.name() + "|" + shape_class(shapes) + "|" + dev.name;
  if (auto c = lookup(key)) return *c;

  std::vector<Tensor> inputs;
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    bool mask = (op.name == "where" && i == 0) || (op.name == "masked_fill" && i == 1);
    DType t = mask ? boolean : dtype;
    std::int64_t n = 1;
    for (auto e : shapes[i]) n *= e;
    std::vector<double> v(static_cast<std::size_t>(n));
    for (std::size_t j = 0; j < v.size(); ++j) v[j] = mask ? (j % 3 == 0) : 0.25 + 0.5 * std::sin(0.1 * j);
    inputs.push_back(Tensor::from_doubles(v, shapes[i], t, device));
  }
  std::vector<Config> candidates;
  int vec = std::max(1, 16 / dtype.bytes());
  for (Strategy s : {Strategy::register_copy, Strategy::explicit_parallel, Strategy::direct})
    for (int threads : {128, 256, 512})
      for (int mult : {1, 2, 4}) {
        if (s == Strategy::direct && mult > 1) continue;
        candidates.push_back({s, threads, s == Strategy::direct ? 1 : vec * mult, false});
      }
  Config best = resolved(requested, dtype, op);
  float best_ms = 1e30f;
  Tensor out;
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    Config c = candidates[i];
    try {
      Kernel k = kernel_for(op, dtype, shapes, params, c, device);
      if (!out.defined()) {
        Elementwise e(op.name, shapes, dtype, params, c, device);
        out = Tensor::empty(e.out_shape(), e.out_dtype(), device);
      }
      std::vector<Tensor> args = inputs;
      args.push_back(out);
      for (int w = 0; w < 3; ++w) k.launch(args);
      std::vector<float> times;
      runtime::EventTimer t;
      for (int r = 0; r < 15; ++r) {
        t.start();
        k.launch(args);
        t.stop();
        times.push_back(t.elapsed_ms());
      }
      std::nth_element(times.begin(), times.begin() + 7, times.end());
      float ms = times[7];
      std::fprintf(stderr, "[tx tune] %s %s %zu/%zu %s threads=%d npt=%d: %.4f ms\n", op.name.c_str(),
                   dtype.name().c_str(), i + 1, candidates.size(), strategy_name(*c.strategy), c.threads,
                   c.num_per_thread, ms);
      if (ms < best_ms) {
        best_ms = ms;
        best = c;
      }
    } catch (const Error& e) {
      std::fprintf(stderr, "[tx tune] %s candidate %zu failed: %s\n", op.name.c_str(), i + 1, e.what());
    }
  }
  std::fprintf(stderr, "[tx tune] %s %s: best %s\n", op.name.c_str(), dtype.name().c_str(), encode(best).c_str());
  remember(key, best);
  return best;
}

}  // namespace tx::ops::detail
