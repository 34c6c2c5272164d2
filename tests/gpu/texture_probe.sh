#!/usr/bin/env bash
# Issue 25's driver probe (tests/gpu/texture_probe.cu): builds it with nvcc and runs it
# preloaded with the installed kerncap's libkerncap_entry.so (so it can name the driver
# calls cudart makes), then twice more sampling through handles no object has.
# Usage (GPU machine, repo root, after `pip install --no-build-isolation .`):
#   bash tests/gpu/texture_probe.sh        -> prints Q1..Q9 lines; ~20 s
set -uo pipefail
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
work=$(mktemp -d)
nvcc -arch=sm_90 -std=c++17 -O1 -o "$work/texture_probe" tests/gpu/texture_probe.cu -ldl \
  || { echo "texture_probe: nvcc failed"; exit 4; }
entry=$(python3 -c 'from kerncap.core.native import entry_library; print(entry_library() or "")' 2>/dev/null)
[ -n "$entry" ] || echo "texture_probe: no libkerncap_entry.so found; Q1 will not be answered"
{
  LD_PRELOAD=${entry:-} "$work/texture_probe"; echo "exit status $?"
  for h in 0 7; do timeout 60 "$work/texture_probe" invalid "$h"; echo "exit status $?"; done
} 2>&1 | tee "$OUT/texture_probe.txt"
rm -rf "$work"
