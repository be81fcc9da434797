#!/usr/bin/env bash
# The package test: install a tx build into a temporary prefix, move the
# prefix elsewhere (the package must be relocatable), then configure, build
# and run test/package/consumer against it as a separate project would.
#
#   test/package/run.sh BUILD_DIR
#
# Checks: the headers of every layer, libtx with its SONAME and the package
# files are installed; no installed file names the source tree, the build
# tree or the staging prefix; find_package(tx) + tx::tx build a program that
# prints its kernel's CUDA and, with the host JIT or a GPU, runs it (PASS).
# Exit: 0 pass, 1 fail, 77 skipped (with the reason).
set -euo pipefail

if [ $# -ne 1 ] || [ ! -f "$1/CMakeCache.txt" ]; then
  echo "usage: $0 BUILD_DIR (a configured and built tx build tree)" >&2
  exit 2
fi
build=$(cd "$1" && pwd)
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
src=$(cd "$here/../.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/tx-package.XXXXXX")
trap '[ -n "${TX_KEEP_WORK:-}" ] || rm -rf "$work"' EXIT

fail() {
  echo "FAIL: $*" >&2
  exit 1
}
cache() { sed -n "s/^$1:[A-Z]*=//p" "$build/CMakeCache.txt" | head -1; }

# 1. install into a staging prefix
echo "== cmake --install $build --prefix <stage>"
cmake --install "$build" --prefix "$work/stage" >"$work/install.log" 2>&1 ||
  { cat "$work/install.log"; fail "cmake --install failed"; }

stage="$work/stage"
libdir=$(cache CMAKE_INSTALL_LIBDIR)
libdir=${libdir:-lib}
for f in include/tx/tx.hpp include/tx/builder.hpp include/tx/dtype.hpp \
  include/tx/lowering/lower.hpp include/tx/runtime/kernel.hpp include/tx/ops/ops.hpp \
  "$libdir/cmake/tx/txConfig.cmake" "$libdir/cmake/tx/txConfigVersion.cmake" \
  "$libdir/cmake/tx/txTargets.cmake"; do
  [ -e "$stage/$f" ] || fail "not installed: $f"
done
lib=$(ls "$stage/$libdir"/libtx.so.*.*.* 2>/dev/null | head -1)
[ -n "$lib" ] || fail "libtx.so.X.Y.Z not installed in $libdir"
[ -L "$stage/$libdir/libtx.so" ] || fail "$libdir/libtx.so (the link-time name) is not a symlink"
soname=$(readelf -d "$lib" | sed -n 's/.*Library soname: \[\(.*\)\].*/\1/p')
[ "$soname" = "libtx.so.0" ] || fail "SONAME of $(basename "$lib") is '$soname', not libtx.so.0"
[ -e "$stage/$libdir/$soname" ] || fail "$libdir/$soname (the SONAME link) is missing"
echo "installed: $(cd "$stage" && find . -type f | wc -l) files, $(basename "$lib") (SONAME $soname)"

# Nothing installed may point back at this machine's trees or the prefix.
leaks=$(grep -rlI -e "$src" -e "$build" -e "$stage" "$stage" 2>/dev/null || true)
[ -z "$leaks" ] || fail "installed files name the source/build tree or the prefix: $leaks"
if readelf -d "$lib" | grep -E 'R(UN)?PATH' | grep -q -e "$src" -e "$build"; then
  fail "libtx's RPATH names the build tree: $(readelf -d "$lib" | grep -E 'R(UN)?PATH')"
fi

# 2. relocate: the package must work from wherever it is put
prefix="$work/elsewhere/prefix"
mkdir -p "$work/elsewhere"
mv "$stage" "$prefix"

# 3. a separate project, copied out of the source tree: same compiler and
# flags (sanitizer builds), its own generator
# The Jupyter kernel, where this build has one: installed with its
# kernelspec, working from the moved prefix with the installed headers.
if [ -x "$build/tx-kernel" ]; then
  echo "== the installed tx-kernel and its kernelspec, from the moved prefix"
  kernel="$prefix/bin/tx-kernel"
  spec="$prefix/share/jupyter/kernels/tx/kernel.json"
  [ -x "$kernel" ] || fail "tx-kernel is built but not installed in bin/"
  [ -f "$spec" ] || fail "the kernelspec share/jupyter/kernels/tx/kernel.json is not installed"
  argv0=$(python3 -c 'import json, os, sys
spec = sys.argv[1]
a = json.load(open(spec))["argv"][0].replace("{resource_dir}", os.path.dirname(spec))
print(os.path.realpath(a))' "$spec")
  [ "$argv0" = "$(readlink -f "$kernel")" ] || fail "the kernelspec runs $argv0, not $kernel"
  args=$("$kernel" --print-args)
  if grep -q -e "$src" -e "$build" <<<"$args"; then
    fail "the installed tx-kernel compiles cells with the source or build tree's headers: $args"
  fi
  grep -qx -- "-I$(readlink -f "$prefix")/include" <<<"$args" || fail "the installed tx-kernel does not use $prefix/include: $args"
  out=$("$kernel" --check 2>&1) || fail "the installed tx-kernel --check failed: $out"
  echo "tx-kernel from the moved prefix: $out"
fi

cp -r "$here/consumer" "$work/consumer"
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
cxx=$(cache CMAKE_CXX_COMPILER)
echo "== configure test/package/consumer with CMAKE_PREFIX_PATH=<prefix>"
cmake -S "$work/consumer" -B "$work/build" "${gen[@]}" \
  -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release \
  ${cxx:+-DCMAKE_CXX_COMPILER="$cxx"} \
  -DCMAKE_CXX_FLAGS="$(cache CMAKE_CXX_FLAGS)" \
  -DCMAKE_EXE_LINKER_FLAGS="$(cache CMAKE_EXE_LINKER_FLAGS)" \
  -DCMAKE_EXPORT_COMPILE_COMMANDS=ON >"$work/configure.log" 2>&1 ||
  { cat "$work/configure.log"; fail "configuring the consumer failed"; }
grep 'tx .* from' "$work/configure.log" | sed "s#$prefix#<prefix>#" || true
echo "== build"
cmake --build "$work/build" >"$work/build.log" 2>&1 || { cat "$work/build.log"; fail "building the consumer failed"; }
if grep -E 'warning:' "$work/build.log"; then fail "the consumer built with warnings"; fi
if grep -q -e "$src" -e "$build" "$work/build/compile_commands.json"; then
  fail "the consumer's compile lines name tx's source or build tree"
fi

# 4. run it
echo "== run"
export TX_CACHE_DIR="$work/cache"
set +e
"$work/build/tx_consumer" >"$work/run.log" 2>&1
rc=$?
set -e
sed -n '/^== CUDA/,$!p' "$work/run.log" | head -20
grep -m1 '__global__' "$work/run.log" || { cat "$work/run.log"; fail "no CUDA kernel printed"; }
tail -1 "$work/run.log"
[ $rc -eq 0 ] || fail "tx_consumer exited with $rc"
if grep -q '^not run:' "$work/run.log"; then
  echo "PASS (built and printed; $(grep '^not run:' "$work/run.log"))"
else
  grep -q 'PASS' "$work/run.log" || fail "no PASS from tx_consumer"
  echo "PASS"
fi

# 5. the installed clang-repl launcher points into the (moved) prefix
if [ -x "$prefix/bin/tx-repl" ]; then
  repl_lib=$("$prefix/bin/tx-repl" --lib)
  case "$repl_lib" in
    "$prefix"/*) [ -e "$repl_lib" ] || fail "tx-repl --lib names a missing file: $repl_lib" ;;
    *) fail "the installed tx-repl points outside its prefix: $repl_lib" ;;
  esac
fi
