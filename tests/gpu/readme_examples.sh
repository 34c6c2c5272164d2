#!/usr/bin/env bash
# The README's workflow, run for real on the GPU machine (after tests/gpu/run.sh
# installed kerncap); each command's output goes to $OUT/readme.txt.
set -u
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
B=/tmp/kc-readme-apps; W=/tmp/kc-readme; rm -rf "$W"; mkdir -p "$W"
cmake -S testapps -B "$B" -G Ninja >/dev/null && ninja -C "$B" >/dev/null
step() { echo "\$ $*"; "$@" > /tmp/kc-step.txt 2>&1; local rc=$?; grep -v '^WARNING' /tmp/kc-step.txt; echo "[exit $rc]"; echo; }
{
  cd "$W"
  step kerncap profile --top 5 -- "$B/smooth"
  step kerncap extract '^_Z6smooth' --match regex --output "$W/smooth-repro" --source-dir "$OLDPWD/testapps/cuda" --build-dir "$B" -- "$B/smooth"
  step kerncap replay "$W/smooth-repro" --iterations 50
  step kerncap validate "$W/smooth-repro"
  python3 - "$W/smooth-repro" <<'PY'
import sys; from pathlib import Path
sys.path.insert(0, "OLDPWD/tests/gpu".replace("OLDPWD", __import__("os").environ["OLDPWD"]))
from smooth_edits import edit, kernel_header
edit(kernel_header(Path(sys.argv[1])), "fast")
PY
  step kerncap recompile "$W/smooth-repro"
  step kerncap validate "$W/smooth-repro" --cubin "$W/smooth-repro/variants/1.cubin"
  step kerncap replay "$W/smooth-repro" --cubin "$W/smooth-repro/variants/1.cubin" --iterations 50
  step kerncap validate "$W/smooth-repro" --cubin "$B/variants/axpy_fast.cubin"
} > "$OUT/readme.txt" 2>&1
cat "$OUT/readme.txt"
