#!/usr/bin/env bash
# The README's workflow, run for real on the GPU machine (after tests/gpu/run.sh
# installed kerncap); each command's output goes to $OUT/readme.txt, and each step
# checks what the README shows: its exit status and the lines it quotes (as extended
# regular expressions). Exit status: the number of failed expectations (0: all held).
set -u
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
B=/tmp/kc-readme-apps; W=/tmp/kc-readme; rm -rf "$W"; mkdir -p "$W"
cmake -S testapps -B "$B" -G Ninja >/dev/null && ninja -C "$B" >/dev/null
FAILS=0

# step EXIT 'regex' ... -- command ...
step() {
  local want=$1; shift
  local pats=()
  while [ "$1" != "--" ]; do pats+=("$1"); shift; done; shift
  echo "\$ $*"
  "$@" > /tmp/kc-step.txt 2>&1
  local rc=$?
  grep -v '^WARNING' /tmp/kc-step.txt
  echo "[exit $rc]"
  if [ "$rc" != "$want" ]; then echo "!! expected exit status $want"; FAILS=$((FAILS + 1)); fi
  for p in "${pats[@]}"; do
    grep -Eq -- "$p" /tmp/kc-step.txt || { echo "!! expected a line matching: $p"; FAILS=$((FAILS + 1)); }
  done
  echo
}

{
  cd "$W"
  step 0 '^1 +smooth +5 ' '^2 +init_smooth +1 ' '^2 kernels, 6 dispatches in 1 process' '^profile saved to ' \
    -- kerncap profile --top 5 -- "$B/smooth"
  step 0 '^captured +smooth\(float const\*, float\*, float const\*, int, int\)$' \
    '^ +dispatch 0 via cuLaunchKernel, grid 16384, block 256, dynamic smem 0 B$' \
    '^memory +3 regions, 32\.0 MiB logical, 16\.0 MiB stored; written: #0 \(16\.0 MiB\)$' \
    '^sources +cuda: smooth/smooth\.cu$' "^reproducer +$W/smooth-repro\$" \
    -- kerncap extract '^_Z6smooth' --match regex --output "$W/smooth-repro" --source-dir "$OLDPWD/testapps/cuda" \
       --build-dir "$B" -- "$B/smooth"
  step 0 '^captured cubin on device 0 \(.*, sm_90, GPU-.*\): 50 iterations after 3 warm-up, L2 not flushed$' '^median [0-9.]+ us +min [0-9.]+ us' \
    '^check: all 50 timed launches checked on the captured input: each wrote the expected bytes$' \
    -- kerncap replay "$W/smooth-repro" --iterations 50
  step 0 '^captured cubin: PASS on 1 input of 1 reproducer \(1 captured \+ 0 perturbed\)$' \
    '^reproducer .*smooth-repro \(_Z6smoothPKfPfS0_ii\) on device 0 ' '^    ok +region 0 ' '^    ok +region 2 ' \
    -- kerncap validate "$W/smooth-repro"
  python3 - "$W/smooth-repro" <<'PY'
import sys; from pathlib import Path
sys.path.insert(0, "OLDPWD/tests/gpu".replace("OLDPWD", __import__("os").environ["OLDPWD"]))
from smooth_edits import edit, kernel_header
edit(kernel_header(Path(sys.argv[1])), "fast")
PY
  step 0 '^\$ .*nvcc .*-arch=sm_90 -cubin ' "^$W/smooth-repro/variants/1\.cubin +\([0-9.]+ s\)\$" \
    "^replay it with: kerncap replay $W/smooth-repro --cubin $W/smooth-repro/variants/1\.cubin\$" \
    -- kerncap recompile "$W/smooth-repro"
  step 0 "^$W/smooth-repro/variants/1\.cubin: PASS on 1 input of 1 reproducer \(1 captured \+ 0 perturbed\)\$" \
    -- kerncap validate "$W/smooth-repro" --cubin "$W/smooth-repro/variants/1.cubin"
  step 0 "^$W/smooth-repro/variants/1\.cubin on device 0 \(.*\): 50 iterations after 3 warm-up" '^median [0-9.]+ us' \
    '^check: all 50 timed launches checked on the captured input: each wrote the expected bytes$' \
    -- kerncap replay "$W/smooth-repro" --cubin "$W/smooth-repro/variants/1.cubin" --iterations 50
  # Could not run (exit 3): the cubin does not hold the captured kernel.
  step 3 "^kerncap validate: error: variant $B/variants/axpy_fast\.cubin has no kernel _Z6smoothPKfPfS0_ii\$" \
    '^  hint: the variant must keep the captured kernel' \
    -- kerncap validate "$W/smooth-repro" --cubin "$B/variants/axpy_fast.cubin"
  echo "readme examples: $FAILS failed expectation(s)"
} > "$OUT/readme.txt" 2>&1
cat "$OUT/readme.txt"
FAILS=$(grep -c '^!! ' "$OUT/readme.txt")
exit "$FAILS"
