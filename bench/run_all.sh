#!/usr/bin/env bash
# All benches in one batch on the GPU machine (after tests/gpu/run.sh installed kerncap):
#   bash bench/run_all.sh   -> tables on stdout, JSON under $OUT
set -uo pipefail
OUT=${OUT:-$PWD/bench-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
cd "$(dirname "$0")"
timeout 200 python3 overhead.py --launches 300000 --repeat 5 --json "$OUT/overhead.json" 2>&1 | grep -v "^WARNING"
timeout 150 python3 cupti_floor.py --launches 300000 --json "$OUT/cupti_floor.json" 2>&1 | grep -v "^WARNING"
timeout 200 python3 snapshot.py --json "$OUT/snapshot.json" 2>&1 | grep -v "^WARNING"
timeout 240 python3 replay.py --json "$OUT/replay.json" 2>&1 | grep -v "^WARNING"
timeout 300 python3 scale.py --json "$OUT/scale.json" 2>&1 | grep -v "^WARNING"
timeout 400 python3 sweep_scaling.py --json "$OUT/sweep_scaling.json" 2>&1 | grep -v "^WARNING"
timeout 300 python3 recompile.py --only tu --repeat 3 --json "$OUT/recompile.json" 2>&1 | grep -v "^WARNING"
timeout 400 python3 sets.py --repeat 3 --json "$OUT/sets.json" 2>&1 | grep -v "^WARNING"
timeout 600 python3 edit_loop.py --repeat 3 --json "$OUT/edit_loop.json" 2>&1 | grep -v "^WARNING"
timeout 600 python3 speedups.py --reps 20 --json "$OUT/speedups.json" 2>&1 | grep -v "^WARNING"
timeout 120 python3 profile_merge.py --json "$OUT/profile_merge.json" 2>&1 | grep -v "^WARNING"
