#!/usr/bin/env bash
# Installs the tx Jupyter kernel, "C++20 (tx)": the Python packages it needs
# (jupyter, nbclient, nbconvert, ipykernel) and a user-level kernelspec. The
# kernel is tx-kernel (notebooks/xeus: xeus, clang's interpreter in process)
# where the build has it; elsewhere the fallback, notebooks/kernel/tx_kernel.py
# driving clang-repl through the tx-repl launcher.
#
#   notebooks/install_kernel.sh [--build DIR | --tx-repl PATH] [--name NAME]
#                               [--minimal] [--no-pip] [--sys-prefix]
#
#   --build DIR      the tx build tree (default: build/ of this source tree)
#   --fallback       install the clang-repl kernel even where tx-kernel is built
#   --tx-repl PATH   a tx-repl launcher (e.g. <prefix>/bin/tx-repl of an install)
#   --name NAME      the kernelspec's name (default: tx)
#   --minimal        only what running notebooks headless needs (nbclient,
#                    nbformat, ipykernel), not jupyter's front ends
#   --no-pip         install no Python packages
#   --sys-prefix     install the kernelspec into the Python environment, not ~/.local
#   --packages-only  only the Python packages, no kernelspec (what `make test`
#                    needs: its notebook tests use a kernelspec of their own)
#
# An installed tx (cmake --install) has its own kernelspec,
# <prefix>/share/jupyter/kernels/tx, found by Jupyter under /usr/local or a
# Python environment's prefix; elsewhere:
#   jupyter kernelspec install --user <prefix>/share/jupyter/kernels/tx
#
# Python: $PYTHON (default python3). Where that Python is externally managed
# (Debian's /usr/bin/python3, PEP 668), the packages go into a virtual
# environment, $TX_JUPYTER_VENV (default ~/.local/share/tx/jupyter-venv;
# Debian needs python3-venv for it). Running it again is cheap: nothing is
# reinstalled that is present. Afterwards:  <that python> -m jupyter lab samples/notebooks
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
src=$(cd "$here/.." && pwd)
build="$src/build"
tx_repl=""
name=tx
minimal=0
packages_only=0
fallback=0
pip=1
where=--user
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --tx-repl) tx_repl=$2; shift 2 ;;
    --name) name=$2; shift 2 ;;
    --minimal) minimal=1; shift ;;
    --packages-only) packages_only=1; shift ;;
    --fallback) fallback=1; shift ;;
    --no-pip) pip=0; shift ;;
    --sys-prefix) where=--sys-prefix; shift ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "install_kernel.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

tx_repl=${tx_repl:-$build/tx-repl}
if [ ! -x "$tx_repl" ]; then
  echo "install_kernel.sh: $tx_repl not found: build tx first (make build), or pass --build/--tx-repl" >&2
  exit 1
fi
tx_repl=$(readlink -f "$tx_repl")
if ! why=$("$tx_repl" --check 2>&1); then
  echo "install_kernel.sh: warning: $why" >&2
fi

python=${PYTHON:-python3}
pkgs=(ipykernel jupyter_client nbclient nbformat)
imports="ipykernel, jupyter_client, nbclient, nbformat"
if [ $minimal = 0 ]; then
  pkgs+=(jupyter nbconvert)
  imports="$imports, nbconvert, notebook"
fi
have() { "$1" -c "import $imports" >/dev/null 2>&1; }

if ! have "$python"; then
  venv=${TX_JUPYTER_VENV:-$HOME/.local/share/tx/jupyter-venv}
  managed=$("$python" -c 'import os, sysconfig; print(int(os.path.exists(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED"))))')
  if [ -x "$venv/bin/python" ] && have "$venv/bin/python"; then
    python="$venv/bin/python"
  elif [ $pip = 0 ]; then
    echo "install_kernel.sh: $python lacks $imports (and --no-pip was given)" >&2
    exit 1
  else
    if [ "$managed" = 1 ]; then
      echo "install_kernel.sh: $python is externally managed; using the virtual environment $venv"
      [ -x "$venv/bin/python" ] || "$python" -m venv "$venv" || {
        echo "install_kernel.sh: cannot create $venv (Debian: apt-get install python3-venv)" >&2
        exit 1
      }
      python="$venv/bin/python"
    fi
    echo "install_kernel.sh: $python -m pip install ${pkgs[*]}"
    "$python" -m pip install --quiet --disable-pip-version-check "${pkgs[@]}"
  fi
fi
python=$("$python" -c "import sys; print(sys.executable)")
if [ $packages_only = 1 ]; then
  echo "install_kernel.sh: Jupyter's packages are ready in $python (no kernelspec installed)"
  exit 0
fi

# The kernelspec: kernel.json, tx_kernel.py and the logo-less rest.
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
cp "$here/kernel/tx_kernel.py" "$stage/"
tx_kernel=""
if [ $fallback = 0 ] && [ -x "$build/tx-kernel" ] && "$build/tx-kernel" --check >/dev/null 2>&1; then
  tx_kernel=$(readlink -f "$build/tx-kernel")
fi
"$python" - "$stage" "$name" "$where" "$python" "$tx_repl" "$tx_kernel" <<'PY'
import json, os, sys
from jupyter_client.kernelspec import KernelSpecManager

stage, name, where, python, tx_repl, tx_kernel = sys.argv[1:]
def spec(kernel_py):
    if tx_kernel:
        return {
            "argv": [tx_kernel, "-f", "{connection_file}"],
            "display_name": "C++20 (tx)",
            "language": "c++",
            "interrupt_mode": "signal",
            "metadata": {"tx": {"tx_kernel": tx_kernel}},
        }
    return {
        "argv": [python, kernel_py, "-f", "{connection_file}"],
        "display_name": "C++20 (tx)",
        "language": "c++",
        "interrupt_mode": "signal",
        "env": {"TX_REPL": tx_repl},
        "metadata": {"tx": {"tx_repl": tx_repl}},
    }
with open(os.path.join(stage, "kernel.json"), "w") as f:
    json.dump(spec(os.path.join(stage, "tx_kernel.py")), f, indent=1)
dest = KernelSpecManager().install_kernel_spec(
    stage, kernel_name=name, user=(where == "--user"),
    prefix=(sys.prefix if where == "--sys-prefix" else None))
# argv with the installed copy of the kernel
with open(os.path.join(dest, "kernel.json"), "w") as f:
    json.dump(spec(os.path.join(dest, "tx_kernel.py")), f, indent=1)
print("install_kernel.sh: kernelspec '%s' in %s" % (name, dest))
PY
if [ -n "$tx_kernel" ]; then
  echo "install_kernel.sh: the kernel is $tx_kernel (xeus, in-process clang interpreter); Python: $python"
else
  echo "install_kernel.sh: the kernel runs $tx_repl (clang-repl; tx-kernel is not built); Python: $python"
fi
if [ $minimal = 0 ]; then
  echo "install_kernel.sh: open the notebooks with:  $python -m jupyter lab $src/samples/notebooks"
fi
