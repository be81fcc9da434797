#!/usr/bin/env bash
# The clang-repl test: feeds session.repl on stdin to the build's tx-repl
# (clang-repl-19 with tx's flags and libtx_repl_guard) and checks the output
# with check.sh against expected.txt.
#
#   test/repl/run.sh BUILD_DIR [HOST_JIT_BUILT(ON|OFF)]
#
# Exit: 0 pass, 1 fail, 77 skipped (no clang-repl-19, or a sanitizer build).
set -euo pipefail
# CI sets TX_REQUIRE_INTERACTIVE=1: there a missing tool fails the test
# instead of skipping it (a sanitizer build still skips).
skip() {
  if [ "${TX_REQUIRE_INTERACTIVE:-0}" = 1 ]; then
    echo "FAIL (TX_REQUIRE_INTERACTIVE=1): $1"
    exit 1
  fi
  echo "SKIPPED: $1"
  exit 77
}
build=$(cd "$1" && pwd)
host_jit=${2:-OFF}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

if grep -q '^CMAKE_CXX_FLAGS:[A-Z]*=.*-fsanitize' "$build/CMakeCache.txt" 2>/dev/null; then
  echo "SKIPPED: a sanitizer build: its libtx cannot be loaded into clang-repl"
  exit 77
fi
repl="$build/tx-repl"
[ -x "$repl" ] || { echo "FAIL: $repl is missing (cmake/install.cmake generates it)"; exit 1; }
if ! why=$("$repl" --check 2>&1); then
  skip "$why"
fi

out="$build/test/repl-session.out"
mkdir -p "$(dirname "$out")"
lib=$("$repl" --lib)
export TX_CACHE_DIR="${TX_CACHE_DIR:-$build/test-cache}"
set +e
sed "s#@TX_LIB@#$lib#" "$here/session.repl" | timeout 600 "$repl" >"$out" 2>&1
rc=$?
set -e
can_run=auto
[ "$host_jit" = ON ] && can_run=yes
exec "$here/check.sh" "$out" "$here/expected.txt" "$rc" "$can_run"
