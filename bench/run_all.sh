#!/usr/bin/env bash
# All benches in one batch on the GPU machine (after tests/gpu/run.sh installed kerncap):
#   bash bench/run_all.sh   -> tables on stdout, JSON under $OUT
set -uo pipefail
OUT=${OUT:-$PWD/bench-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
cd "$(dirname "$0")"
timeout 200 python3 overhead.py --json "$OUT/overhead.json" 2>&1 | grep -v "^WARNING"
timeout 200 python3 snapshot.py --json "$OUT/snapshot.json" 2>&1 | grep -v "^WARNING"
timeout 240 python3 replay.py --json "$OUT/replay.json" 2>&1 | grep -v "^WARNING"
