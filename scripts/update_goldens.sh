#!/usr/bin/env bash
# Rewrites test/data/golden/ from a build's samples: the IR each seed sample
# prints before (--emit=tirx) and after (--emit=lowered) lowering. Run it
# after a change that is meant to alter that text, and review the diff
# (git diff test/data/golden) before committing.
#
#   scripts/update_goldens.sh [BUILD_DIR]      (default: build)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
mkdir -p test/data/golden
for s in warp_sqrt_reg cta_sqrt_smem warp_copy_reg thread_sum_local warp_sum_shuffle shape_generic softmax cta_sum_cross_warp gemm gemm_hopper attention_hopper attention_backward_hopper; do
  for mode in tirx lowered; do
    "$build/samples/$s" --emit=$mode > "test/data/golden/$s.$mode.txt"
  done
done
git status --short test/data/golden
