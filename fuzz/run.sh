#!/usr/bin/env bash
# Builds the tile-program fuzzer (clang + libFuzzer, ASan + UBSan, coverage in
# libtx) in build-fuzz and runs it for a bounded time.
#
#   fuzz/run.sh [SECONDS] [libFuzzer flags...]   replay fuzz/corpus, then fuzz (default 240 s)
#   fuzz/run.sh --replay [FILES...]              run the corpus (or FILES) once, print each program
#   fuzz/run.sh --merge                          minimize fuzz/corpus + what runs found into fuzz/corpus
#
# New inputs go to build-fuzz/fuzz/corpus-work, crashes to build-fuzz/fuzz/artifacts/
# (reproduce one with: TXFUZZ_PRINT=1 build-fuzz/fuzz/tile_fuzzer FILE).
# Environment: TX_FUZZ_BUILD (build folder), TX_FUZZ_CXX (clang++), JOBS,
# TXFUZZ_AVOID (generator features of known bugs to skip, see tile_program.hpp).
# Exit status: 0 when nothing was found; libFuzzer's (non-zero) otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD=${TX_FUZZ_BUILD:-$ROOT/build-fuzz}
CXX_CLANG=${TX_FUZZ_CXX:-/usr/lib/llvm-19/bin/clang++}
JOBS=${JOBS:-$(nproc)}
# -fno-sanitize=function: clang's check of indirect calls reads a signature
# 8 bytes before the callee, which JIT-compiled kernels do not have (a read
# before a fresh mapping crashes; see fuzz/CMakeLists.txt).
FLAGS="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize=function -fno-omit-frame-pointer -fno-sanitize-recover=undefined"

if ! command -v "$CXX_CLANG" >/dev/null 2>&1; then
  echo "fuzz/run.sh: $CXX_CLANG not found (apt-get install clang-19, or set TX_FUZZ_CXX)" >&2
  exit 2
fi

build() {
  if [ ! -f "$BUILD/CMakeCache.txt" ]; then
    GEN=
    if command -v ninja >/dev/null 2>&1; then GEN="-G Ninja"; fi
    # shellcheck disable=SC2086
    cmake -S "$ROOT" -B "$BUILD" $GEN -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DCMAKE_CXX_COMPILER="$CXX_CLANG" -DCMAKE_CXX_FLAGS="$FLAGS" \
      -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
      -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=address,undefined" \
      -DTX_BUILD_FUZZERS=ON -DTX_BUILD_TESTS=OFF -DTX_BUILD_SAMPLES=OFF -DTX_BUILD_BENCH=OFF >/dev/null
  fi
  cmake --build "$BUILD" --target tile_fuzzer -j "$JOBS"
}

export TX_CACHE=0
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:symbolize=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
FUZZER=$BUILD/fuzz/tile_fuzzer
WORK=$BUILD/fuzz/corpus-work
ARTIFACTS=$BUILD/fuzz/artifacts/
COMMON=(-timeout=120 -rss_limit_mb=6144 -max_len=256)

case "${1:-}" in
  --replay)
    shift
    build
    if [ $# -eq 0 ]; then set -- "$ROOT"/fuzz/corpus/*; fi
    TXFUZZ_PRINT=1 TXFUZZ_STATS=1 exec "$FUZZER" "${COMMON[@]}" "$@"
    ;;
  --merge)
    build
    mkdir -p "$WORK"
    NEW=$(mktemp -d "$BUILD/fuzz/merged-XXXXXX")
    "$FUZZER" "${COMMON[@]}" -merge=1 "$NEW" "$ROOT/fuzz/corpus" "$WORK"
    echo "fuzz/run.sh: $(find "$NEW" -type f | wc -l) inputs in $NEW" \
      "(was $(find "$ROOT/fuzz/corpus" -type f | wc -l));"
    echo "  review, then replace fuzz/corpus with them (keep it to a few dozen small files)"
    ;;
  *)
    SECONDS_TO_RUN=240
    if [[ "${1:-}" =~ ^[0-9]+$ ]]; then SECONDS_TO_RUN=$1; shift; fi
    build
    mkdir -p "$WORK" "$ARTIFACTS"
    echo "fuzz/run.sh: replaying fuzz/corpus"
    "$FUZZER" "${COMMON[@]}" -runs=0 "$ROOT/fuzz/corpus"
    echo "fuzz/run.sh: fuzzing for $SECONDS_TO_RUN s"
    TXFUZZ_STATS=1 "$FUZZER" "${COMMON[@]}" -max_total_time="$SECONDS_TO_RUN" -print_final_stats=1 \
      -artifact_prefix="$ARTIFACTS" "$@" "$WORK" "$ROOT/fuzz/corpus"
    ;;
esac
