// NVRTC, opened with dlopen on first use (libnvrtc.so.13, .12, or the
// toolkit's lib64). Compiles CUDA source to PTX or straight to a cubin for
// one exact architecture. Needs no GPU and no driver.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace tx::runtime {

enum class NvrtcTarget { ptx, cubin };

struct NvrtcOutput {
  std::string ptx;          // set when target == ptx
  std::vector<char> cubin;  // set when target == cubin
  std::string log;          // the compiler log (warnings), possibly empty
};

// True when libnvrtc can be opened; otherwise `why` says what was tried.
bool nvrtc_available(std::string* why = nullptr);

// (major, minor) of the loaded NVRTC; throws tx::Error when it cannot load.
std::pair<int, int> nvrtc_version();

// The options tx always passes: --gpu-architecture=<arch> (e.g. sm_90a),
// -std=c++17, --use_fast_math off, default-device, the CUDA include dir.
std::vector<std::string> nvrtc_default_options(const std::string& arch);

// Compiles `source`. On failure throws tx::Error whose op is "nvrtc", whose
// operand is `program_name`, and whose detail holds the log followed by the
// offending source lines (each error's line with two lines of context,
// numbered).
// NVRTC compiles run by this process so far (benchmarks report it).
std::uint64_t nvrtc_compile_count();
// Whether this process has loaded libnvrtc (10-15 ms, on first need): a
// program whose kernels all come from the caches never does.
bool nvrtc_loaded();
NvrtcOutput nvrtc_compile(const std::string& source, const std::string& program_name,
                          const std::string& arch, NvrtcTarget target,
                          const std::vector<std::string>& extra_options = {});

}  // namespace tx::runtime
