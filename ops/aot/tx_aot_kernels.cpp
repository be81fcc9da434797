// tx_aot_kernels: compiles the op library's shape-generic kernels ahead of
// time, when tx is built, into a folder that Kernel::prepare_gpu looks in
// before NVRTC (runtime::aot_cubin). A fresh process then runs them without
// a JIT compile, as a framework runs the kernels it ships.
//
//   tx_aot_kernels OUT_DIR ARCH...      e.g. tx_aot_kernels build/aot-kernels sm_90a
//
// Which kernels: every op without scalar parameters (those bake their values
// into the kernel), in f16, bf16 and f32 where the op takes them, for the
// classes a shape falls into (coalesced rank and broadcast pattern, and
// whether the extent is a multiple of the vector width): a flat tensor of
// aligned and of odd size, a row broadcast (T, H) + (H,), and the gated
// halves (T, 2H) of *_and_mul ops. No GPU is needed (NVRTC only).
#include <cstdio>
#include <exception>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "tx/ops/ops.hpp"
#include "tx/ops/registry.hpp"
#include "tx/runtime/cubin_cache.hpp"
#include "tx/runtime/nvrtc.hpp"
#include "tx/runtime/prebuilt.hpp"
#include "tx/tx.hpp"

using namespace tx;

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: tx_aot_kernels OUT_DIR ARCH...\n");
    return 2;
  }
  const std::string out = argv[1];
  std::vector<std::string> archs(argv + 2, argv + argc);
  runtime::DiskCache cache(out);
  using Shapes = std::vector<std::vector<std::int64_t>>;
  const std::vector<Shapes> unary = {{{8 * 4096}}, {{4097}}};
  const std::vector<Shapes> binary = {
      {{8 * 4096}, {8 * 4096}}, {{4097}, {4097}}, {{8, 4096}, {4096}}};
  const std::vector<Shapes> gated = {{{8, 2 * 4096}}};
  std::set<std::string> done;
  int kernels = 0, described = 0, skipped = 0;
  try {
    for (const ops::OpInfo& op : ops::all_ops()) {
      if (op.params > 0 || op.inputs < 1 || op.inputs > 2) continue;
      const bool is_gated = op.name.find("_and_mul") != std::string::npos;
      const std::vector<Shapes>& classes = is_gated ? gated : op.inputs == 1 ? unary : binary;
      for (DType t : {f16, bf16, f32}) {
        for (const Shapes& shapes : classes) {
          std::string cuda, name, spec;
          std::optional<std::string> description;
          try {
            ops::Elementwise e(op.name, shapes, t, {}, {}, Device::cuda());
            cuda = e.kernel().cuda_source();
            name = e.kernel().name();
            spec = e.prebuilt_spec();
            description = runtime::describe_launch(e.kernel().info(), name);
          } catch (const Error&) {
            ++skipped;  // a dtype or shape the op does not take
            continue;
          }
          for (const std::string& arch : archs) {
            std::string key = runtime::aot_key(cuda, arch);
            if (!done.insert(key).second) continue;
            std::vector<char> bin =
                runtime::nvrtc_compile(cuda, name + ".cu", arch, runtime::NvrtcTarget::cubin).cubin;
            if (!cache.store(key, bin)) return 1;
            ++kernels;
            // With its launch description, under the op library's key: a
            // fresh process launches it without building the kernel.
            if (!spec.empty() && description) {
              if (!cache.store(runtime::prebuilt_key(spec, arch),
                               runtime::pack_prebuilt(*description, bin)))
                return 1;
              ++described;
            }
          }
        }
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tx_aot_kernels: %s\n", e.what());
    return 1;
  }
  std::printf(
      "tx_aot_kernels: %d kernels for %zu arch(s) in %s, %d with launch descriptions (%d "
      "op/dtype/class combinations not taken)\n",
      kernels, archs.size(), out.c_str(), described, skipped);
  return 0;
}
