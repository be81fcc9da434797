// libFuzzer entry point: every input is a sequence of builder calls
// (fuzz/builder_calls.hpp) on a pool of objects -- default-constructed ones,
// ones of earlier kernels and of ended blocks included -- with compiles and
// host launches on random tensors. Rule: a tx::Error is fine; a signal, a
// sanitizer report, another exception type or an internal error is a finding,
// printed with the calls that led to it (libFuzzer saves the input).
//
// Environment:
//   TXFUZZ_AVOID=a,b   switch off calls of known, reported bugs (default:
//                      txfuzz::kPendingBugs; empty: none)
//   TXFUZZ_PRINT=1     print every call as it is made (reproducing)
//   TXFUZZ_STATS=1     print counts at exit
//
// Build and run: fuzz/run.sh builder (or the fuzz preset of CMakePresets.json).
#include <cstdint>
#include <cstdio>
#include <string>

#include "builder_calls.hpp"

namespace {

struct Stats {
  long inputs = 0, steps = 0, errors = 0, compiled = 0, launched = 0;
  ~Stats() {
    if (!txfuzz::env_on("TXFUZZ_STATS")) return;
    std::fprintf(stderr,
                 "txbuild: %ld inputs, %ld calls (%ld tx errors), %ld compiles, %ld launches\n",
                 inputs, steps, errors, compiled, launched);
  }
};

Stats& stats() {
  static Stats s;
  return s;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  tx::set_warning_handler([](const std::string&) {});
  txfuzz::avoid_from_env();    // the pending bugs of fuzz_common.hpp, or TXFUZZ_AVOID
  setenv("TX_CACHE", "0", 0);  // nothing of a fuzz run belongs in the disk cache
  stats();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > 2048) return -1;
  bool print = txfuzz::env_on("TXFUZZ_PRINT");
  if (print) std::fprintf(stderr, "---- calls\n");
  txbuild::Result r = txbuild::run_bytes(data, size, print);
  Stats& s = stats();
  ++s.inputs;
  s.steps += r.steps;
  s.errors += r.errors;
  s.compiled += r.compiled;
  s.launched += r.launched;
  if (r.finding) {
    std::fprintf(stderr, "\ntxbuild FINDING: %s\nafter these calls:\n%s\n", r.message.c_str(),
                 r.trace.c_str());
    std::abort();
  }
  return 0;
}
