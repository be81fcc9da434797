// What the three fuzz targets share (tile_fuzzer, invalid_fuzzer,
// builder_fuzzer, and their corpus replays in test/test_fuzz_corpus.cpp):
// reading decisions from the fuzzer's bytes, the switch that turns off a
// generator feature of a known bug, and small helpers of the entry points.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <set>
#include <string>
#include <type_traits>

namespace txfuzz {

// The input bytes as a stream of decisions. Each decision takes a byte (two
// for ranges over 256); once the input is exhausted every read is 0, which
// always means the plain choice, so a short input is a small program.
class Bytes {
 public:
  Bytes(const std::uint8_t* data, std::size_t size) : d_(data), n_(size) {}
  std::uint8_t byte() { return i_ < n_ ? d_[i_++] : 0; }
  // 0 .. k-1; 0 once the input is exhausted.
  int below(int k) {
    if (k <= 1) return 0;
    if (k <= 256) return byte() % k;
    return (byte() | (byte() << 8)) % k;
  }
  // True with about pct percent; false once the input is exhausted.
  bool chance(int pct) { return pct > 0 && below(100) >= 100 - pct; }
  bool exhausted() const { return i_ >= n_; }
  // One of the listed values (the first once the input is exhausted).
  template <class T, std::size_t N>
  std::remove_cv_t<T> pick(const T (&values)[N]) {
    return values[below(static_cast<int>(N))];
  }

 private:
  const std::uint8_t* d_;
  std::size_t n_;
  std::size_t i_ = 0;
};

// Generator features that can be switched off by name, to fuzz past a known,
// reported bug until it is fixed (TXFUZZ_AVOID=name,name in any of the
// fuzzers). Names: the avoided("...") calls of the generators.
inline std::set<std::string>& avoid_set() {
  static std::set<std::string> s;
  return s;
}
inline bool avoided(const char* feature) { return avoid_set().count(feature) != 0; }
inline void avoid_from_string(const std::string& list) {
  std::string cur;
  for (char c : list + ",") {
    if (c == ',' || c == ' ') {
      if (!cur.empty()) avoid_set().insert(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
}

// Features of bugs the fuzzers found that are reported and not fixed yet
// (docs/reliability.md lists them): off by default, so that the fuzzers and
// the corpus replays look past them. TXFUZZ_AVOID replaces the list
// (TXFUZZ_AVOID= , empty, turns every feature back on, to reproduce them).
// Remove a name here when its bug is fixed, and commit its reproducer as
// fuzz/corpus-*/regression-NAME.
// dag-blowup: a shared subexpression is walked once per use by every
// lowering pass (the IR is a DAG, the passes walk trees): acc = acc + x,
// 3000 times with an x of depth 255, compiles in 11 s on the CPU and in
// minutes under the fuzz build's sanitizers (past libFuzzer's 60 s timeout).
inline constexpr const char* kPendingBugs = "dag-blowup";

inline void avoid_from_env() {
  const char* a = std::getenv("TXFUZZ_AVOID");
  avoid_from_string(a ? a : kPendingBugs);
}

inline bool env_on(const char* name) {
  const char* v = std::getenv(name);
  return v && *v && std::string(v) != "0";
}

// A seed for the run-time inputs that follows from the bytes, so that a saved
// crash reproduces exactly.
inline std::uint64_t fnv1a(const std::uint8_t* data, std::size_t size) {
  std::uint64_t h = 1469598103934665603ull;
  for (std::size_t i = 0; i < size; ++i) h = (h ^ data[i]) * 1099511628211ull;
  return h;
}

}  // namespace txfuzz
