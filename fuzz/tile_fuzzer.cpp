// libFuzzer entry point: every input is a random tile program
// (fuzz/tile_program.hpp) that must either be rejected with a tx::Error, or
// lower, generate CUDA and, where the host JIT is available, run on the host
// and match the program's double-precision model. Anything else aborts with
// the program printed (libFuzzer saves the input as a crash artifact);
// sanitizer reports abort too.
//
// Environment:
//   TXFUZZ_AVOID=a,b   switch off generator features of known, reported bugs
//                      (names in tile_program.hpp, e.g. local-moffset; default:
//                      txfuzz::kPendingBugs of fuzz_common.hpp)
//   TXFUZZ_PRINT=1     print every program and its outcome (reproducing)
//   TXFUZZ_STATS=1     print outcome counts and the commonest rejections at exit
//   TXFUZZ_NO_RUN=1    lower and generate CUDA only, never launch on the host
//
// Build and run: fuzz/run.sh (or the fuzz preset of CMakePresets.json).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include "tile_program.hpp"

namespace {

struct Stats {
  std::map<std::string, long> outcomes;
  std::map<std::string, long> rejections;
  long compared = 0;
  ~Stats() {
    if (!std::getenv("TXFUZZ_STATS")) return;
    std::fprintf(stderr, "txfuzz: %ld elements compared\n", compared);
    for (const auto& [k, n] : outcomes) std::fprintf(stderr, "txfuzz: %-9s %ld\n", k.c_str(), n);
    std::multimap<long, std::string> top;
    for (const auto& [k, n] : rejections) top.emplace(n, k);
    int shown = 0;
    for (auto it = top.rbegin(); it != top.rend() && shown < 20; ++it, ++shown)
      std::fprintf(stderr, "txfuzz: %6ld x %s\n", it->first, it->second.c_str());
  }
};

Stats& stats() {
  static Stats s;
  return s;
}

// The first line of a tx error without its source location: a rejection's kind.
std::string rejection_kind(const std::string& message) {
  std::string m = message.substr(0, message.find('\n'));
  return m.substr(0, 160);
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
  if (size > 1024) return -1;  // not worth keeping: programs stop growing long before
  txfuzz::Program p = txfuzz::generate(data, size);
  txfuzz::RunOptions opt;
  opt.run_host = !txfuzz::env_on("TXFUZZ_NO_RUN");
  // Inputs follow from the bytes, so a saved crash reproduces exactly.
  txfuzz::Outcome o = txfuzz::run_program(p, txfuzz::fnv1a(data, size), opt);
  Stats& s = stats();
  ++s.outcomes[txfuzz::outcome_name(o.kind)];
  s.compared += static_cast<long>(o.compared);
  if (o.kind == txfuzz::Outcome::rejected) ++s.rejections[rejection_kind(o.message)];
  if (txfuzz::env_on("TXFUZZ_PRINT"))
    std::fprintf(stderr, "---- %s (%zu compared)\n%s%s\n", txfuzz::outcome_name(o.kind), o.compared,
                 txfuzz::describe(p).c_str(), o.message.c_str());
  if (o.kind == txfuzz::Outcome::finding) {
    std::fprintf(stderr, "\ntxfuzz FINDING\n%s%s\n", txfuzz::describe(p).c_str(),
                 o.message.c_str());
    std::abort();
  }
  return 0;
}
