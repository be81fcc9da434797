#!/usr/bin/env bash
# The notebook test: executes samples/notebooks/*.ipynb and
# test/notebooks/kernel_recovery.ipynb headless on the tx Jupyter kernel
# (run_notebooks.py) against this build.
#
#   test/notebooks/run.sh BUILD_DIR [HOST_JIT_BUILT(ON|OFF)]
#
# The Python that runs them: $TX_JUPYTER_PYTHON, else the virtual environment
# notebooks/install_kernel.sh makes on externally managed Pythons, else
# python3 -- the first that has nbclient and ipykernel.
# Exit: 0 pass, 1 fail, 77 skipped (no Jupyter, no clang-repl-19, no host JIT
# and no GPU to run the kernels on, or a sanitizer build).
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
src=$(cd "$here/../.." && pwd)

if grep -q '^CMAKE_CXX_FLAGS:[A-Z]*=.*-fsanitize' "$build/CMakeCache.txt" 2>/dev/null; then
  echo "SKIPPED: a sanitizer build: its libtx cannot be loaded into clang-repl"
  exit 77
fi
if [ "$host_jit" != ON ] && ! { command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; }; then
  skip "tx was built without the host JIT and there is no GPU: the notebooks run kernels"
fi

python=""
for p in "${TX_JUPYTER_PYTHON:-}" "${TX_JUPYTER_VENV:-$HOME/.local/share/tx/jupyter-venv}/bin/python" python3; do
  if [ -n "$p" ] && command -v "$p" >/dev/null 2>&1 &&
    "$p" -c 'import nbclient, nbformat, ipykernel, jupyter_client' >/dev/null 2>&1; then
    python=$p
    break
  fi
done
if [ -z "$python" ]; then
  skip "no Python with Jupyter (nbclient, ipykernel): run notebooks/install_kernel.sh"
fi

export TX_CACHE_DIR="${TX_CACHE_DIR:-$build/test-cache}"
# The samples' notebooks on tx-kernel (the xeus kernel) where it is built;
# the fallback kernel (clang-repl) runs its own recovery notebook, and the
# samples too where there is no tx-kernel.
if [ -x "$build/tx-kernel" ]; then
  "$python" "$here/run_notebooks.py" --tx-kernel "$build/tx-kernel" "$src"/samples/notebooks/*.ipynb
  if "$build/tx-repl" --check >/dev/null 2>&1; then
    exec "$python" "$here/run_notebooks.py" --tx-repl "$build/tx-repl" "$here/kernel_recovery.ipynb"
  fi
  echo "note: the fallback kernel's recovery notebook not run: $("$build/tx-repl" --check 2>&1)"
  exit 0
fi
exec "$python" "$here/run_notebooks.py" --tx-repl "$build/tx-repl" \
  "$src"/samples/notebooks/*.ipynb "$here/kernel_recovery.ipynb"
