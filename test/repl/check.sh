#!/usr/bin/env bash
# Checks the output of a scripted clang-repl session against an expectations
# file: every expected line appears, in order (fixed strings; "RUN: " lines
# only where kernels can run, "NORUN: " lines only where they cannot), the
# session exited with 0, and nothing shows a crash or a poisoned session
# (but tx-repl's lines saying it restarted clang-repl).
#
#   check.sh OUTPUT EXPECTED EXIT_CODE CAN_RUN(yes|no|auto)
#
# auto: kernels can run if the session reports a CUDA default device.
set -euo pipefail
out=$1 expected=$2 rc=$3 can_run=$4

fail() {
  echo "---- session output ($out) ----"
  cat "$out"
  echo "----"
  echo "FAIL: $*"
  exit 1
}

[ "$rc" -eq 0 ] || fail "clang-repl exited with $rc (a crash, or the session did not finish)"
# (a crash the guard survives is in the expectations; one it does not is rc != 0;
# tx-repl's own lines may name the JIT error it recovered from)
for bad in 'terminate called' 'PLEASE submit a bug report' 'JIT session error' \
  'Failed to materialize symbols' 'Symbols not found'; do
  if grep -v '^tx-repl: ' "$out" | grep -qF "$bad"; then fail "the output shows '$bad'"; fi
done
if [ "$can_run" = auto ]; then
  if grep -q '^== session: .*default device cuda' "$out"; then can_run=yes; else can_run=no; fi
fi

line=0
checked=0
while IFS= read -r want || [ -n "$want" ]; do
  case "$want" in
    '' | '#'*) continue ;;
    'RUN: '*) [ "$can_run" = yes ] || continue; want=${want#RUN: } ;;
    'NORUN: '*) [ "$can_run" = no ] || continue; want=${want#NORUN: } ;;
  esac
  # the first line after `line` that contains `want`
  found=$(tail -n +$((line + 1)) "$out" | grep -nF -m1 -- "$want" | cut -d: -f1 || true)
  if [ -z "$found" ]; then
    if grep -qF -- "$want" "$out"; then
      fail "'$want' appears, but not after line $line (out of order)"
    fi
    fail "'$want' does not appear"
  fi
  line=$((line + found))
  checked=$((checked + 1))
done <"$expected"
echo "PASS: $checked expectations in order (kernels run: $can_run)"
