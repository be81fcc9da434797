#!/usr/bin/env bash
# The tx-kernel protocol test (protocol_test.py) with the Python that has
# jupyter_client: $TX_JUPYTER_PYTHON, else the virtual environment
# notebooks/install_kernel.sh makes, else python3.
#
#   test/notebooks/run_protocol.sh TX_KERNEL
#
# Exit: 0 pass, 1 fail, 77 skipped (no jupyter_client; a failure when
# TX_REQUIRE_INTERACTIVE=1, as in CI).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
python=""
for p in "${TX_JUPYTER_PYTHON:-}" "${TX_JUPYTER_VENV:-$HOME/.local/share/tx/jupyter-venv}/bin/python" python3; do
  if [ -n "$p" ] && command -v "$p" >/dev/null 2>&1 && "$p" -c 'import jupyter_client' >/dev/null 2>&1; then
    python=$p
    break
  fi
done
if [ -z "$python" ]; then
  why="no Python with jupyter_client: run notebooks/install_kernel.sh"
  if [ "${TX_REQUIRE_INTERACTIVE:-0}" = 1 ]; then echo "FAIL (TX_REQUIRE_INTERACTIVE=1): $why"; exit 1; fi
  echo "SKIPPED: $why"
  exit 77
fi
exec "$python" "$here/protocol_test.py" "$1"
