// libFuzzer entry point: every input is an invalid tile program
// (fuzz/invalid_program.hpp) -- an out-of-bounds index, an escape, a race,
// an overlapping copy, a huge extent, a division by zero, ... -- whose rule
// is a tx::Error or the documented result, never a signal: it is built,
// compiled, run in the checked host mode and, where that is defined, run
// plainly, and the outcome is judged against what the generator knows the
// fault must give. Anything else aborts with the program printed (libFuzzer
// saves the input as a crash artifact); sanitizer reports abort too.
//
// Environment:
//   TXFUZZ_AVOID=a,b   switch off generator features of known, reported bugs
//                      (default: txfuzz::kPendingBugs; empty: none)
//   TXFUZZ_PRINT=1     print every program and its outcome (reproducing)
//   TXFUZZ_STATS=1     print outcome counts per fault at exit
//   TXFUZZ_NO_RUN=1    build and compile only, never launch on the host
//
// Build and run: fuzz/run.sh invalid (or the fuzz preset of CMakePresets.json).
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>

#include "invalid_program.hpp"

namespace {

struct Stats {
  std::map<std::string, long> outcomes;  // "fault outcome"
  ~Stats() {
    if (!txfuzz::env_on("TXFUZZ_STATS")) return;
    for (const auto& [k, n] : outcomes) std::fprintf(stderr, "txbad: %-32s %ld\n", k.c_str(), n);
  }
};

Stats& stats() {
  static Stats s;
  return s;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  tx::set_warning_handler([](const std::string&) {});  // scalar-fallback notes
  txfuzz::avoid_from_env();    // the pending bugs of fuzz_common.hpp, or TXFUZZ_AVOID
  setenv("TX_CACHE", "0", 0);  // nothing of a fuzz run belongs in the disk cache
  stats();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > 1024) return -1;  // programs stop growing long before
  txbad::Program p = txbad::generate(data, size);
  // Printed before it runs, so that a crash shows the program too.
  if (txfuzz::env_on("TXFUZZ_PRINT"))
    std::fprintf(stderr, "---- program\n%s", txbad::describe(p).c_str());
  txbad::Outcome o =
      txbad::run_program(p, txfuzz::fnv1a(data, size), !txfuzz::env_on("TXFUZZ_NO_RUN"));
  ++stats().outcomes[p.fault + " " + txbad::outcome_name(o.kind)];
  if (txfuzz::env_on("TXFUZZ_PRINT"))
    std::fprintf(stderr, "---- %s\n%s\n", txbad::outcome_name(o.kind),
                 o.message.substr(0, 2000).c_str());
  if (o.kind == txbad::Outcome::finding) {
    std::fprintf(stderr, "\ntxbad FINDING\n%s%s\n", txbad::describe(p).c_str(), o.message.c_str());
    std::abort();
  }
  return 0;
}
