// bench/interop: what tx costs inside someone else's program (issue 16).
// bench/interop_torch.py measures PyTorch on the same work, and
// bench/interop.sh runs both in one job and writes the table.
//
//   bench_interop overhead [DEVICE]   host time per call of gelu(x) on 4096
//                                     f32 elements, a new result each call
//                                     (allocation included), and its parts
//   bench_interop strided             transposed / sliced / broadcast (4096,
//                                     4096) f16 adds: bandwidth on the views
//
// Each prints JSON lines. The overhead loop never synchronizes inside: it
// measures what the host spends per call while the GPU drains the queue, as
// a serving loop sees it.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "tx/ops/ops.hpp"
#include "tx/runtime/cuda_driver.hpp"
#include "tx/runtime/nvrtc.hpp"
#include "tx/runtime/stream.hpp"
#include "tx/tx.hpp"

using namespace tx;

namespace {

using Clock = std::chrono::steady_clock;

// Median over `reps` runs of `iters` calls, in microseconds per call. On the
// GPU a run is 256 calls: well inside the launch queue, so the host's time
// is measured, not the GPU's throughput (a full queue blocks the host).
double us_per_call(const std::function<void()>& call, int iters, int reps, bool gpu) {
  if (gpu) {
    iters = 256;
    reps = 41;
  }
  for (int i = 0; i < iters / 10 + 1; ++i) call();  // warm: compiles, pool, caches
  if (gpu) runtime::synchronize("bench");
  std::vector<double> r;
  for (int k = 0; k < reps; ++k) {
    auto t0 = Clock::now();
    for (int i = 0; i < iters; ++i) call();
    auto t1 = Clock::now();
    if (gpu) runtime::synchronize("bench");
    r.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / iters);
  }
  std::sort(r.begin(), r.end());
  return r[r.size() / 2];
}

void line(const char* what, const char* device, double us) {
  std::printf(
      "{\"bench\": \"overhead\", \"impl\": \"tx\", \"what\": \"%s\", \"device\": \"%s\", "
      "\"us_per_call\": %.3f}\n",
      what, device, us);
  std::fflush(stdout);
}

int overhead(Device d) {
  const bool gpu = d.is_cuda();
  const char* dn = gpu ? "cuda" : "host";
  const int iters = gpu ? 20000 : 2000;
  std::vector<double> v(4096);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = 0.001 * static_cast<double>(i) - 2.0;
  Tensor x = Tensor::from_doubles(v, {4096}, f32, d);
  Tensor y = Tensor::empty({4096}, f32, d);
  // The whole call as a user writes it.
  line("gelu(x) -> new tensor", dn, us_per_call([&] { (void)ops::gelu(x); }, iters, 5, gpu));
  // Its parts: the out= form (no allocation), an op object built once, the
  // allocation alone.
  line("gelu(x, out)", dn, us_per_call([&] { ops::gelu(x, y); }, iters, 5, gpu));
  ops::Elementwise e("gelu", {{4096}}, f32, {}, {}, d);
  line("Elementwise(x, out), built once", dn, us_per_call([&] { e({x}, y); }, iters, 5, gpu));
  line("Tensor::empty(4096) + free", dn,
       us_per_call([&] { (void)Tensor::empty({4096}, f32, d); }, iters, 5, gpu));
  if (!gpu) return 0;
  // The floor under all of it: cuLaunchKernel of a one-CTA kernel, on the
  // legacy default stream and on a stream of tx's.
  const char* src = "extern \"C\" __global__ void tiny(float* y) { y[threadIdx.x] += 1.0f; }";
  auto out = runtime::nvrtc_compile(src, "tiny.cu", runtime::current_device().arch(),
                                    runtime::NvrtcTarget::cubin);
  auto mod = runtime::Module::load(out.cubin, "tiny");
  void* f = mod->function("tiny");
  Tensor t = Tensor::empty({256}, f32, d);
  runtime::DevicePtr p = reinterpret_cast<std::uintptr_t>(t.data_ptr());
  void* args[] = {&p};
  line("cuLaunchKernel, null stream", dn,
       us_per_call(
           [&] {
             runtime::launch(f, {1, 1, 1}, {256, 1, 1}, 0, args, "tiny", 0, nullptr);
           },
           iters, 5, gpu));
  Stream s = Stream::create(d);
  line("cuLaunchKernel, a created stream", dn,
       us_per_call(
           [&] {
             runtime::launch(f, {1, 1, 1}, {256, 1, 1}, 0, args, "tiny", 0, s.handle());
           },
           iters, 5, gpu));
  {
    StreamGuard g(s);
    line("gelu(x) -> new tensor, a created stream", dn,
         us_per_call([&] { (void)ops::gelu(x); }, iters, 5, gpu));
    line("Elementwise(x, out), a created stream", dn,
         us_per_call([&] { e({x}, y); }, iters, 5, gpu));
  }
  return 0;
}

// GB/s of out = a + b over views of (4096, 4096) f16 tensors.
int strided() {
  const std::int64_t n = 4096;
  Device d = Device::cuda();
  Tensor a = Tensor::empty({n, n}, f16, d), b = Tensor::empty({n, n}, f16, d);
  a.fill_bits(0x3c00);
  b.fill_bits(0x3a00);
  Tensor wide = Tensor::empty({n, 2 * n}, f16, d);
  wide.fill_bits(0x3800);
  Tensor col = Tensor::empty({n, 1}, f16, d);
  col.fill_bits(0x3800);
  struct Case {
    const char* name;
    Tensor x, y;
  };
  std::vector<Case> cases = {
      {"contiguous a + b", a, b},
      {"a.T + b.T", a.transpose(0, 1), b.transpose(0, 1)},
      {"a.T + b", a.transpose(0, 1), b},
      {"wide[:, :n] + b", wide.slice(1, 0, n), b},
      {"a + col.expand", a, col.expand({n, n})},
  };
  for (const Case& c : cases) {
    // Bytes the op must move: each input element once, the output once.
    double bytes = 3.0 * static_cast<double>(n * n) * 2.0;
    if (std::string(c.name).find("expand") != std::string::npos)
      bytes = 2.0 * static_cast<double>(n * n) * 2.0;
    (void)ops::add(c.x, c.y);  // compile
    runtime::synchronize("bench");
    Event t0, t1;
    std::vector<double> ms;
    for (int k = 0; k < 7; ++k) {
      t0.record(current_stream());
      for (int i = 0; i < 20; ++i) (void)ops::add(c.x, c.y);
      t1.record(current_stream());
      t1.synchronize();
      ms.push_back(t1.elapsed_since(t0) / 20.0);
    }
    std::sort(ms.begin(), ms.end());
    double m = ms[ms.size() / 2];
    std::printf(
        "{\"bench\": \"strided\", \"impl\": \"tx\", \"case\": \"%s\", \"ms\": %.4f, "
        "\"gbps\": %.1f}\n",
        c.name, m, bytes / (m * 1e-3) / 1e9);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "";
  try {
    if (mode == "overhead") {
      std::string dev = argc > 2 ? argv[2] : "cuda";
      return overhead(dev == "host" ? Device::host() : Device::cuda());
    }
    if (mode == "strided") return strided();
  } catch (const Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  std::fprintf(stderr, "usage: bench_interop overhead [cuda|host] | strided\n");
  return 2;
}
