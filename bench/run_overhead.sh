#!/usr/bin/env bash
# Issue 31's benches on the GPU machine, compactly (docs/facts.md §30 has the results of
# the last run). From the repo root, after the same setup as tests/gpu/run.sh (it does
# it here unless KC_SKIP_BUILD is set):   bash bench/run_overhead.sh
# Prints, in order (~6 min on one H200; QUICK=1: ~4 min, 2 processes per paired row, 7
# whole-process runs instead of 11):
#   1. bench/paired.py: the armed dispatcher's cost per launch, armed - pass-through in one
#      process (cudart <<<>>> from 1/2/8/16 threads, cuGraphLaunch, PyTorch eager, Triton;
#      preloaded-but-unused vs no library; skip-fastpath: the cudart row without the
#      launch fast path, the path before it): ns [90 % interval]; goals 1 thread <= 40 ns,
#      16 threads <= 1.5x one thread                                           (~1 min)
#   2. bench/overhead.py, the PyTorch launch loop (the goal's 300k ops; LAUNCHES=N another
#      size): process-wall medians of 11 interleaved runs, plain / armed / profiling
#      (sampled), spread stated; goals armed <= 1.01, profiling <= 1.03    (~4.5 min)
#   3. the same for token generation (decode_loop, 300 tokens): armed <= 1.01  (~2 min)
# JSON of each goes to $OUT (default ./bench-out). NO_PAIRED=1: steps 2 and 3 only;
# APPS="python" or "decode": only that one of steps 2 and 3.
set -uo pipefail
OUT=${OUT:-$PWD/bench-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
if [ -z "${KC_SKIP_BUILD:-}" ]; then
  if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
      && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH} || { echo "wheel install failed"; exit 3; }
  fi
  python3 -m pip install -q --no-build-isolation --no-deps . >"$OUT/build.log" 2>&1 || { tail -50 "$OUT/build.log"; exit 4; }
fi
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
REPEAT=11; PAIRED=3
if [ -n "${QUICK:-}" ]; then REPEAT=7; PAIRED=2; fi
status=0
step() { echo; echo "== $1"; shift; local t0=$(date +%s); "$@" || status=1; echo "($(( $(date +%s) - t0 )) s)"; }
[ -n "${NO_PAIRED:-}" ] || step "paired dispatcher cost" python3 bench/paired.py --repeat "$PAIRED" \
  --rows cudart,skip-fastpath,graph,torch,triton,preloaded --json "$OUT/paired.json"
APPS=${APPS:-python decode}
[[ " $APPS " != *" python "* ]] || step "PyTorch launch loop, whole process" python3 bench/overhead.py \
  --launches "${LAUNCHES:-300000}" --repeat "$REPEAT" --modes armed,profiling --json "$OUT/overhead-python.json"
[[ " $APPS " != *" decode "* ]] || step "token generation, whole process" python3 bench/overhead.py --app decode \
  --tokens 300 --repeat "$REPEAT" --modes armed --json "$OUT/overhead-decode.json"
exit $status
