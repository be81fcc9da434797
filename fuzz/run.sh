#!/usr/bin/env bash
# Builds the fuzzers (clang + libFuzzer, ASan + UBSan, coverage in libtx) in
# build-fuzz and runs them for a bounded time. Three targets:
#
#   tile      random valid tile programs, checked against a model (fuzz/corpus)
#   invalid   invalid programs: a tx error or the documented result (fuzz/corpus-invalid)
#   builder   random builder call sequences: never a crash (fuzz/corpus-builder)
#
#   fuzz/run.sh [SECONDS] [libFuzzer flags...]   replay every corpus, then fuzz each target
#                                                in turn: tile for SECONDS (default 240),
#                                                invalid and builder for TX_FUZZ_INVALID_SECONDS
#                                                and TX_FUZZ_BUILDER_SECONDS (default 60 each)
#   fuzz/run.sh TARGET [SECONDS] [flags...]      replay and fuzz one target (default 240 s)
#   fuzz/run.sh --replay [TARGET] [FILES...]     run a corpus (or FILES) once, print each program
#   fuzz/run.sh --merge [TARGET]                 minimize a corpus + what runs found into
#                                                build-fuzz/fuzz/merged-* (TARGET default: tile)
#
# New inputs go to build-fuzz/fuzz/corpus-work[-TARGET], crashes to
# build-fuzz/fuzz/artifacts/ (reproduce one with: TXFUZZ_PRINT=1 build-fuzz/fuzz/<target>_fuzzer FILE).
# Environment: TX_FUZZ_BUILD (build folder), TX_FUZZ_CXX (clang++), JOBS,
# TXFUZZ_AVOID (generator features of known bugs to skip; default: the
# pending bugs listed in fuzz/fuzz_common.hpp).
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
      -DTX_BUILD_FUZZERS=ON -DTX_BUILD_TESTS=OFF -DTX_BUILD_SAMPLES=OFF -DTX_BUILD_BENCH=OFF \
      -DTX_BUILD_OPS=OFF -DTX_TORCH=OFF -DTX_XEUS=OFF >/dev/null
  fi
  cmake --build "$BUILD" --target tile_fuzzer invalid_fuzzer builder_fuzzer -j "$JOBS"
}

export TX_CACHE=0
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:symbolize=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
ARTIFACTS=$BUILD/fuzz/artifacts/

# Per target: the fuzzer, its committed corpus, its work corpus, its flags.
target_vars() {
  case "$1" in
    tile)
      FUZZER=$BUILD/fuzz/tile_fuzzer
      CORPUS=$ROOT/fuzz/corpus
      WORK=$BUILD/fuzz/corpus-work
      COMMON=(-timeout=120 -rss_limit_mb=6144 -max_len=256)
      ;;
    invalid)
      FUZZER=$BUILD/fuzz/invalid_fuzzer
      CORPUS=$ROOT/fuzz/corpus-invalid
      WORK=$BUILD/fuzz/corpus-work-invalid
      COMMON=(-timeout=120 -rss_limit_mb=6144 -max_len=256)
      ;;
    builder)
      FUZZER=$BUILD/fuzz/builder_fuzzer
      CORPUS=$ROOT/fuzz/corpus-builder
      WORK=$BUILD/fuzz/corpus-work-builder
      COMMON=(-timeout=60 -rss_limit_mb=6144 -max_len=512)
      ;;
    *)
      echo "fuzz/run.sh: unknown target $1 (tile, invalid, builder)" >&2
      exit 2
      ;;
  esac
}

# Replays the target's corpus, then fuzzes it for $2 seconds ($3...: flags).
fuzz_target() {
  local name=$1 seconds=$2
  shift 2
  target_vars "$name"
  mkdir -p "$WORK" "$ARTIFACTS"
  echo "fuzz/run.sh: $name: replaying ${CORPUS#"$ROOT"/}"
  "$FUZZER" "${COMMON[@]}" -runs=0 "$CORPUS" || return $?
  echo "fuzz/run.sh: $name: fuzzing for $seconds s"
  TXFUZZ_STATS=1 "$FUZZER" "${COMMON[@]}" -max_total_time="$seconds" -print_final_stats=1 \
    -artifact_prefix="$ARTIFACTS" "$@" "$WORK" "$CORPUS"
}

case "${1:-}" in
  --replay)
    shift
    NAME=tile
    if [[ "${1:-}" =~ ^(tile|invalid|builder)$ ]]; then NAME=$1; shift; fi
    build
    target_vars "$NAME"
    if [ $# -eq 0 ]; then set -- "$CORPUS"/*; fi
    TXFUZZ_PRINT=1 TXFUZZ_STATS=1 exec "$FUZZER" "${COMMON[@]}" "$@"
    ;;
  --merge)
    shift
    NAME=${1:-tile}
    build
    target_vars "$NAME"
    mkdir -p "$WORK"
    NEW=$(mktemp -d "$BUILD/fuzz/merged-XXXXXX")
    "$FUZZER" "${COMMON[@]}" -merge=1 "$NEW" "$CORPUS" "$WORK"
    echo "fuzz/run.sh: $(find "$NEW" -type f | wc -l) inputs in $NEW" \
      "(was $(find "$CORPUS" -type f | wc -l));"
    echo "  review, then replace ${CORPUS#"$ROOT"/} with them (keep the regression-* files)"
    ;;
  tile | invalid | builder)
    NAME=$1
    shift
    SECONDS_TO_RUN=240
    if [[ "${1:-}" =~ ^[0-9]+$ ]]; then SECONDS_TO_RUN=$1; shift; fi
    build
    fuzz_target "$NAME" "$SECONDS_TO_RUN" "$@"
    ;;
  *)
    SECONDS_TO_RUN=240
    if [[ "${1:-}" =~ ^[0-9]+$ ]]; then SECONDS_TO_RUN=$1; shift; fi
    build
    # Every target runs even when an earlier one found something; the
    # status is the first failure's.
    status=0
    fuzz_target tile "$SECONDS_TO_RUN" "$@" || { s=$?; [ $status -ne 0 ] || status=$s; }
    fuzz_target invalid "${TX_FUZZ_INVALID_SECONDS:-60}" "$@" || { s=$?; [ $status -ne 0 ] || status=$s; }
    fuzz_target builder "${TX_FUZZ_BUILDER_SECONDS:-60}" "$@" || { s=$?; [ $status -ne 0 ] || status=$s; }
    exit $status
    ;;
esac
