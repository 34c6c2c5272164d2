#!/usr/bin/env bash
# One batch on the GPU machine: install carried wheels, build kerncap from source (the
# package build compiles the native parts), run the GPU suite, then optional extra steps.
# Usage (device tool, repo root):  bash tests/gpu/run.sh [pytest args...]
# Logs land in $OUT (or ./gpu-out when run by hand).
set -uo pipefail
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH} || { echo "wheel install failed"; exit 3; }
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
if [ -z "${KC_SKIP_BUILD:-}" ]; then  # set by a batch that already built this tree
  t0=$(date +%s)
  python3 -m pip install -q --no-build-isolation --no-deps . >"$OUT/build.log" 2>&1 || { tail -50 "$OUT/build.log"; exit 4; }
  echo "build: $(( $(date +%s) - t0 )) s"
fi
python3 -m pytest -m "gpu or native" -p no:cacheprovider -o addopts="" -ra --durations=15 "$@" 2>&1 | tee "$OUT/pytest-gpu.log"
exit "${PIPESTATUS[0]}"
