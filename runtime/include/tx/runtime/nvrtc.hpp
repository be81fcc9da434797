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

// ------------------------------------------------- compiling in a child process
//
// NVRTC runs inside the process that calls it, and a crash inside it (or in
// the ptxas it embeds) ends that process: NVRTC 13.0 was seen to segfault
// compiling a wgmma with constant zero descriptors to an sm_90a cubin. A
// long-running host -- a server, a notebook -- survives it when compiles run
// in a child process: tx-nvrtc-worker, a small program installed next to
// libtx (lib/tx/), started with posix_spawn on the first compile and kept for
// the next ones. A crash or a hang there becomes a tx::Error naming the
// kernel and the signal (op "tx.nvrtc", operand "<kernel>.cu"), the worker is
// replaced, and the next compile works. Measured cost and the default:
// docs/reliability.md, "Compiler crashes".
//
// TX_COMPILE_ISOLATION=process | inprocess | auto picks the mode (default
// auto: process where the worker is found, else in this process with a
// warning, once); set_compile_isolation overrides it. TX_COMPILE_TIMEOUT
// (seconds; default 600, 0 for none) bounds one isolated compile.
enum class CompileIsolation { automatic, process, in_process };
void set_compile_isolation(CompileIsolation mode);
// The mode as set (by the call above, else by TX_COMPILE_ISOLATION).
CompileIsolation compile_isolation();
// Whether the next compile runs in a child process; if not, `why`.
bool compiles_in_child(std::string* why = nullptr);
// The worker program that would run ("" when none is found; `why` says where
// it was looked for). TX_NVRTC_WORKER names it explicitly.
std::string nvrtc_worker_path(std::string* why = nullptr);

struct CompileWorkerStats {
  std::uint64_t spawned = 0;   // workers started
  std::uint64_t compiles = 0;  // compiles that ran in a worker
  std::uint64_t crashes = 0;   // compiles whose worker died (signal or exit)
  std::uint64_t timeouts = 0;  // compiles killed at TX_COMPILE_TIMEOUT
  // Of the compiles that returned: the time from sending the request to the
  // reply, and the part of it NVRTC ran in the worker -- the difference is
  // what the child process costs. And the time spent starting workers.
  std::uint64_t round_trip_ns = 0;
  std::uint64_t worker_compile_ns = 0;
  std::uint64_t spawn_ns = 0;
};
CompileWorkerStats compile_worker_stats();

}  // namespace tx::runtime
