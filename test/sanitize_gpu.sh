#!/usr/bin/env bash
# Runs every sample program and every GPU suite (test/gpu_*) of a build under
# compute-sanitizer, once with memcheck (out-of-bounds and misaligned
# accesses, device-memory leaks) and once with racecheck (shared-memory
# hazards: a missing or misplaced barrier), then prints a summary table:
# program, tool, errors, exit code, verdict. Full logs go to OUT_DIR.
#
#   test/sanitize_gpu.sh BUILD_DIR OUT_DIR
#
# BUILD_DIR is a build with samples and tests, made on the GPU machine, e.g.
#   TX_HOST_JIT=OFF make build BUILD=build-device   (or scripts/device_check.sh)
#   test/sanitize_gpu.sh build-device "$OUT/sanitize"
#
# Environment:
#   COMPUTE_SANITIZER   the tool (default: compute-sanitizer on PATH, else
#                       /usr/local/cuda/bin/compute-sanitizer)
#   TOOLS               tools to run (default "memcheck racecheck")
#   ONLY                a regex; only programs whose name matches run
#   RUN_TIMEOUT         seconds per program and tool (default 1800)
#   CS_FLAGS            extra compute-sanitizer flags
#
# CUDA API errors are not counted (--report-api-errors no): the error suites
# provoke them on purpose (out of memory, refused launches). The deliberate
# kernel faults of gpu_runtime and gpu_errors are excluded; they would
# be reported as the faults they are.
# Exit status: 0 when every run is clean (or skipped: exit 77), 1 otherwise.
set -uo pipefail

if [ $# -ne 2 ]; then
  sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
BUILD=$(cd "$1" && pwd) || exit 2
OUT=$2
mkdir -p "$OUT" || exit 2
OUT=$(cd "$OUT" && pwd)

CS=${COMPUTE_SANITIZER:-}
if [ -z "$CS" ]; then
  CS=$(command -v compute-sanitizer || true)
  [ -z "$CS" ] && [ -x /usr/local/cuda/bin/compute-sanitizer ] && CS=/usr/local/cuda/bin/compute-sanitizer
fi
if [ -z "$CS" ] || [ ! -x "$CS" ]; then
  echo "sanitize_gpu.sh: compute-sanitizer not found (set COMPUTE_SANITIZER)" >&2
  exit 2
fi
TOOLS=${TOOLS:-memcheck racecheck}
RUN_TIMEOUT=${RUN_TIMEOUT:-1800}
ONLY=${ONLY:-.}

# Kernels compiled once (by the first tool) come from the disk cache after.
export TX_CACHE_DIR=${TX_CACHE_DIR:-$OUT/tx-cache}
# Synchronous launches: a report names the kernel that was running.
export TX_SYNC=1

# Programs: the samples, then the GPU suites.
PROGRAMS=()
for f in "$BUILD"/samples/*; do
  case "$(basename "$f")" in op_list) continue ;; esac  # prints the op table; no GPU work
  [ -f "$f" ] && [ -x "$f" ] && PROGRAMS+=("$f")
done
for f in "$BUILD"/test/gpu_*; do
  [ -f "$f" ] && [ -x "$f" ] && PROGRAMS+=("$f")
done
if [ ${#PROGRAMS[@]} -eq 0 ]; then
  echo "sanitize_gpu.sh: no samples or GPU suites under $BUILD (build with tests and samples)" >&2
  exit 2
fi

# Arguments of a program (into ARGS).
args_for() {
  ARGS=()
  case "$(basename "$1")" in
    gpu_runtime) ARGS=("--test-case-exclude=*fault*") ;;  # the deliberate fault and its child
    gpu_errors) ARGS=("--test-case-exclude=*trap*") ;;    # the deliberate __trap() and its child
  esac
}

# "errors" for a log: memcheck's ERROR SUMMARY count, racecheck's error and
# warning hazards; "?" when the tool printed no summary (crash, timeout).
count_errors() {
  local tool=$1 log=$2 line
  if [ "$tool" = racecheck ]; then
    line=$(grep -E "RACECHECK SUMMARY:" "$log" | tail -1)
    if [ -n "$line" ]; then
      local e w
      e=$(sed -E 's/.*\(([0-9]+) errors?.*/\1/' <<<"$line")
      w=$(sed -E 's/.*, ([0-9]+) warnings?\).*/\1/' <<<"$line")
      echo "$e errors, $w warnings"
      return
    fi
  fi
  line=$(grep -E "ERROR SUMMARY:" "$log" | tail -1)
  if [ -n "$line" ]; then
    sed -E 's/.*ERROR SUMMARY: ([0-9]+) errors?.*/\1 errors/' <<<"$line"
  else
    echo "?"
  fi
}

SUMMARY=$OUT/summary.txt
printf "%-22s %-10s %-26s %-5s %s\n" program tool errors exit verdict | tee "$SUMMARY"
failed=0
for prog in "${PROGRAMS[@]}"; do
  name=$(basename "$prog")
  [[ "$name" =~ $ONLY ]] || continue
  for tool in $TOOLS; do
    log=$OUT/$name.$tool.log
    args_for "$prog"
    TOOL_FLAGS=(--tool "$tool" --error-exitcode 86 --report-api-errors no --print-limit 200)
    [ "$tool" = memcheck ] && TOOL_FLAGS+=(--leak-check full)
    # shellcheck disable=SC2086
    timeout "$RUN_TIMEOUT" "$CS" "${TOOL_FLAGS[@]}" ${CS_FLAGS:-} "$prog" "${ARGS[@]}" >"$log" 2>&1
    rc=$?
    errors=$(count_errors "$tool" "$log")
    verdict=ok
    if [ "$rc" -eq 77 ]; then
      verdict=skipped
    elif [ "$rc" -eq 124 ]; then
      verdict="TIMEOUT after ${RUN_TIMEOUT}s"
    elif [ "$rc" -eq 86 ]; then
      verdict="SANITIZER ERRORS"
    elif [ "$rc" -ne 0 ]; then
      verdict="FAILED"
    elif [[ ! "$errors" =~ ^0\ errors ]]; then
      verdict="SANITIZER ERRORS"
    fi
    case "$verdict" in ok | skipped) ;; *) failed=1 ;; esac
    printf "%-22s %-10s %-26s %-5s %s\n" "$name" "$tool" "$errors" "$rc" "$verdict" | tee -a "$SUMMARY"
  done
done
echo "logs: $OUT/<program>.<tool>.log; this table: $SUMMARY"
exit $failed
