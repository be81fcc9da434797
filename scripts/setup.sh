#!/usr/bin/env bash
# Installs what tx needs to build and test, and nothing that is already
# there. Required: a C++20 compiler, CMake >= 3.25, Ninja, Boost (Hana),
# doctest, the CUDA toolkit headers and NVRTC. Optional: LLVM >= 16 for the
# host JIT (skipped with TX_HOST_JIT=OFF); for the notebooks (skipped with
# TX_NOTEBOOKS=0) xeus and clang's interpreter library (the Jupyter kernel
# tx-kernel), clang-repl (the fallback kernel and tx-repl) and python3-venv
# (the Jupyter packages come from pip, in notebooks/install_kernel.sh); with TX_FUZZ=1, clang and its
# libFuzzer runtime for the fuzzer; with TX_TORCH=1, PyTorch (from PyPI, in
# a virtual environment) for the tx_torch extension and its tests.
#
# On a machine where everything required is present this script installs
# nothing and needs no network (the GPU machines have none).
set -euo pipefail

missing=()
have_header() { [ -e "/usr/include/$1" ] || [ -e "/usr/local/include/$1" ]; }

command -v cmake >/dev/null || missing+=(cmake)
command -v ninja >/dev/null || missing+=(ninja-build)
command -v g++ >/dev/null || command -v c++ >/dev/null || missing+=(g++)
have_header boost/hana.hpp || missing+=(libboost-dev)
have_header doctest/doctest.h || [ -e /usr/include/doctest.h ] || missing+=(doctest-dev)

optional=()
# DLPack (Tensor::from_dlpack); without it tx builds without that feature.
have_header dlpack/dlpack.h || optional+=(libdlpack-dev)
# zlib deflates the profiler's PNG timelines; without it they are stored.
have_header zlib.h || optional+=(zlib1g-dev)
if [ "${TX_HOST_JIT:-AUTO}" != "OFF" ]; then
  if ! ls /usr/lib/llvm-*/lib/cmake/llvm/LLVMConfig.cmake >/dev/null 2>&1; then
    optional+=(llvm-19-dev)
  fi
fi
if [ "${TX_NOTEBOOKS:-1}" != "0" ]; then
  command -v clang-repl-19 >/dev/null || optional+=(clang-tools-19)
  # tx-kernel (notebooks/xeus): xeus 2.4 and libclang-cpp 19 with its headers.
  have_header xeus/xinterpreter.hpp || optional+=(xeus-dev)
  [ -e /usr/lib/llvm-19/include/clang/Interpreter/Interpreter.h ] || optional+=(libclang-19-dev)
  [ -e /usr/lib/llvm-19/lib/libclang-cpp.so ] || optional+=(libclang-cpp19-dev)
  # install_kernel.sh makes a virtual environment on externally managed Pythons.
  if command -v python3 >/dev/null && ! python3 -c 'import ensurepip, venv' >/dev/null 2>&1; then
    optional+=(python3-venv)
  fi
fi
if [ "${TX_TORCH:-}" = "1" ] && command -v python3 >/dev/null &&
  ! python3 -c 'import ensurepip, venv' >/dev/null 2>&1; then
  optional+=(python3-venv)
fi
if [ "${TX_FUZZ:-0}" = "1" ]; then
  [ -x /usr/lib/llvm-19/bin/clang++ ] || optional+=(clang-19)
  ls /usr/lib/llvm-19/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1 ||
    optional+=(libclang-rt-19-dev)
fi

apt_install() {
  local sudo=""
  if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null || return 1
    sudo="sudo"
  fi
  command -v apt-get >/dev/null || return 1
  $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$@"
}

if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing required packages: ${missing[*]}"
  if ! apt_install "${missing[@]}"; then
    echo "setup: could not install ${missing[*]}; install them and run again" >&2
    exit 1
  fi
fi
if [ ${#optional[@]} -gt 0 ]; then
  echo "setup: installing optional packages: ${optional[*]}"
  if ! timeout 900 bash -c "$(declare -f apt_install); apt_install ${optional[*]}"; then
    echo "setup: could not install ${optional[*]}; continuing without them (the tests that need them report themselves skipped)" >&2
  fi
fi

if ! command -v nvcc >/dev/null && [ ! -e /usr/local/cuda/include/nvrtc.h ] && [ -z "${CUDA_HOME:-}" ]; then
  echo "setup: the CUDA toolkit (headers and NVRTC) is required; install it from NVIDIA" >&2
  exit 1
fi
# PyTorch for tx_torch (TX_TORCH=1): a Python that imports torch already
# (TX_TORCH_PYTHON, python3) is used as it is; else a virtual environment at
# $TX_TORCH_VENV gets the torch of the GPU machines (2.11.0) and pytest from
# PyPI: about 4.7 GB (PyPI's Linux wheel brings CUDA's libraries, unused on
# a machine without a GPU), about a minute on CI's network.
if [ "${TX_TORCH:-}" = "1" ]; then
  venv=${TX_TORCH_VENV:-$HOME/.local/share/tx/torch-venv}
  has_torch() { [ -n "$1" ] && "$1" -c 'import torch, pytest' >/dev/null 2>&1; }
  if has_torch "${TX_TORCH_PYTHON:-}" || has_torch "$venv/bin/python" || has_torch python3; then
    :
  else
    echo "setup: installing PyTorch 2.11.0 and pytest into $venv (TX_TORCH=1)"
    python3 -m venv "$venv" && "$venv/bin/pip" install -q "torch==2.11.0" pytest || {
      echo "setup: could not install PyTorch into $venv; tx_torch cannot be built" >&2
      exit 1
    }
  fi
fi
echo "setup: ok"
