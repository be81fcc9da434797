// Runs every op of the library on the GPU for each dtype it supports and
// writes inputs and outputs as raw bytes, so that ops_vs_torch.py can run
// PyTorch on exactly the same inputs and report the largest difference per
// op and dtype. Inputs include NaN, +-Inf, -0 and values past the fp8 range
// (1000 and 500 > e4m3fn's 448, -1e5 past e5m2's 57344), so the fp8 outputs'
// saturation (e4m3fn) and Inf (e5m2) are compared too. prelu takes its
// weight (C,) on dimension 1, as torch.nn.functional.prelu; alibi (several
// head counts, powers of two and not) and sinusoidal have no inputs: their
// parameters go to the index and the script builds the torch reference.
//
//   bench_ops_vs_torch DIR [--device host]   then   python3 bench/ops_vs_torch.py DIR
//
// --device host runs the kernels on the host JIT (no GPU needed), for a dry
// run of the comparison with `ops_vs_torch.py DIR --device cpu`.
#include <sys/stat.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>

#include "tx/ops/ops.hpp"
#include "tx/ops/registry.hpp"
#include "tx/runtime/cuda_driver.hpp"
#include "tx/tx.hpp"

using namespace tx;

namespace {

std::vector<double> values(const ops::OpInfo& op, DType t, std::size_t n, int which,
                           std::mt19937_64& g) {
  std::vector<double> v(n);
  if (t.is_bool()) {
    for (auto& x : v) x = static_cast<double>(g() % 2);
    return v;
  }
  if (t.is_integer()) {
    std::int64_t lo = t.is_uint() ? 0 : -100, hi = 100;
    for (auto& x : v)
      x = static_cast<double>(lo +
                              static_cast<std::int64_t>(g() % static_cast<std::uint64_t>(hi - lo)));
    return v;
  }
  double lo = -4, hi = 4;
  if (op.name == "pow" && which == 0) lo = 0.1;
  if ((op.name == "div" || op.name == "remainder" || op.name == "floor_divide") && which == 1)
    lo = 0.25;
  std::uniform_real_distribution<double> d(lo, hi);
  for (auto& x : v) do
      x = quantize(d(g), t);
    while (x == 0.0);
  static const double specials[] = {NAN, INFINITY, -INFINITY, -0.0, 1000.0, -1e5, 3e4, 500.0};
  constexpr std::size_t kSpecials = std::size(specials);
  for (std::size_t i = 0; i < n; i += 53) v[i] = quantize(specials[(i / 53) % kSpecials], t);
  return v;
}

void write(const std::string& path, const Tensor& t) {
  auto b = t.to_bytes();
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

std::string shape_spec(const std::vector<std::int64_t>& s) {
  if (s.empty()) return "scalar";
  std::string r;
  for (std::size_t d = 0; d < s.size(); ++d) r += (d ? "x" : "") + std::to_string(s[d]);
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  bool host = argc == 4 && std::string(argv[2]) == "--device" && std::string(argv[3]) == "host";
  if (argc != 2 && !host) {
    std::fprintf(stderr, "usage: %s OUT_DIR [--device host]\n", argv[0]);
    return 2;
  }
  std::string dir = argv[1];
  mkdir(dir.c_str(), 0755);
  std::string why;
  if (host ? !runtime::host_jit_available(&why) : !runtime::cuda_available(&why)) {
    std::printf("SKIPPED: needs %s: %s\n", host ? "the host JIT" : "a GPU", why.c_str());
    return 77;
  }
  const Device dev = host ? Device::host() : Device::cuda();
  std::mt19937_64 g(20261121);
  std::ofstream index(dir + "/index.txt");
  const std::vector<DType> floats{f32, f16, bf16, f8e4m3, f8e5m2};
  const std::vector<DType> ints{i32, u8};
  int count = 0;
  // Index lines: ID OP DTYPE [INPUT_DTYPE:SHAPE ...] params:P,... out:DTYPE:SHAPE
  for (const ops::OpInfo& op : ops::all_ops()) {
    // rope and dropout: bench/rope_dropout.* (their own calls and references).
    if (op.tmpl == optable::Template::rope || op.tmpl == optable::Template::dropout) continue;
    if (op.inputs == 0) {
      // alibi (heads, seq) and sinusoidal (positions, dim): the script builds
      // the torch reference from the parameters.
      for (DType t : floats) {
        std::vector<std::pair<std::int64_t, std::int64_t>> cases =
            op.name == "alibi"
                ? std::vector<std::pair<std::int64_t, std::int64_t>>{{8, 64}, {12, 64}, {5, 33}}
                : std::vector<std::pair<std::int64_t, std::int64_t>>{{2048, 128}, {1000, 6}};
        for (auto [a, b] : cases) {
          Tensor out =
              op.name == "alibi" ? ops::alibi(a, b, t, dev) : ops::sinusoidal(a, b, t, dev);
          std::string id =
              op.name + "." + t.short_name() + "." + std::to_string(a) + "x" + std::to_string(b);
          write(dir + "/" + id + ".out", out);
          index << id << " " << op.name << " " << t.name() << " params:" << a << "," << b
                << " out:" << out.dtype().name() << ":" << shape_spec(out.shape()) << "\n";
          ++count;
        }
      }
      continue;
    }
    std::vector<DType> dts;
    for (DType t : floats)
      if (optable::accepts(op.dtypes, t)) dts.push_back(t);
    for (DType t : ints)
      if (optable::accepts(op.dtypes, t)) dts.push_back(t);
    for (DType t : dts) {
      std::vector<std::vector<std::int64_t>> shapes;
      if (op.tmpl == optable::Template::gated)
        shapes = {{64, 2 * 96}};
      else if (op.name == "prelu")
        shapes = {{8, 16, 32}, {16}};
      else
        for (int k = 0; k < op.inputs; ++k) shapes.push_back({64, 96});
      ops::Params p;
      if (op.name == "leaky_relu") p = {0.2};
      if (op.name == "elu") p = {1.3};
      if (op.name == "hardtanh" || op.name == "clamp") p = {-1.5, 2.25};
      if (op.name == "softplus") p = {1.5, 10.0};
      if (op.name == "masked_fill") p = {3.5};
      if (op.name == "nan_to_num") p = {0.5, 100.0, -200.0};
      std::vector<Tensor> in;
      std::string id = op.name + "." + t.short_name();
      index << id << " " << op.name << " " << t.name();
      for (std::size_t k = 0; k < shapes.size(); ++k) {
        bool mask = (op.name == "where" && k == 0) || (op.name == "masked_fill" && k == 1);
        DType dk = mask ? boolean : t;
        std::int64_t n = 1;
        for (auto e : shapes[k]) n *= e;
        in.push_back(Tensor::from_doubles(
            values(op, dk, static_cast<std::size_t>(n), static_cast<int>(k), g), shapes[k], dk,
            dev));
        write(dir + "/" + id + ".in" + std::to_string(k), in.back());
        index << " " << dk.name() << ":" << shape_spec(shapes[k]);
      }
      index << " params:";
      for (std::size_t i = 0; i < p.size(); ++i) index << (i ? "," : "") << p[i];
      Tensor out = ops::run(op.name, in, p);
      write(dir + "/" + id + ".out", out);
      index << " out:" << out.dtype().name() << ":" << shape_spec(out.shape()) << "\n";
      ++count;
    }
  }
  std::printf("wrote %d (op, dtype) cases to %s\n", count, dir.c_str());
  return 0;
}
