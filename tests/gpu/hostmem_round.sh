#!/usr/bin/env bash
# Issue 25's GPU round in one command (device tool, repo root), in order of value:
#   1. build + tests/gpu/test_hostmem_gpu.py (the new apps and bad inputs),
#   2. bench/sparse.py (100 GiB arena with 1 GiB of data against the data alone),
#   3. the existing GPU tests that exercise the changed replay core (resident copies per
#      segment, host items, the fill/compare primitives) and the arrays path that shares it.
# Each step prints its summary; a step that would start after KC_ROUND_BUDGET seconds
# (default 450) is skipped and says so. Logs in $OUT.
#   bash tests/gpu/hostmem_round.sh
set -uo pipefail
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
export KERNCAP_TESTAPPS_BUILD=${KERNCAP_TESTAPPS_BUILD:-/tmp/kc-testapps}
budget=${KC_ROUND_BUDGET:-450}
t0=$(date +%s)
elapsed() { echo $(( $(date +%s) - t0 )); }

bash tests/gpu/run.sh -q tests/gpu/test_hostmem_gpu.py 2>&1 | tail -40
s1=${PIPESTATUS[0]}
echo "== step 1 (test_hostmem_gpu.py): status $s1 at $(elapsed) s"

s2=skipped
if [ "$(elapsed)" -lt "$budget" ]; then
  site=$(ls -d /tmp/site 2>/dev/null)
  PYTHONPATH=${site:+$site:}bench timeout 300 python3 bench/sparse.py --build-dir "$KERNCAP_TESTAPPS_BUILD" \
    --json "$OUT/sparse.json" 2>&1 | tail -20
  s2=${PIPESTATUS[0]}
fi
echo "== step 2 (bench/sparse.py): status $s2 at $(elapsed) s"

s3=skipped
if [ "$(elapsed)" -lt "$budget" ]; then
  KC_SKIP_BUILD=1 bash tests/gpu/run.sh -q \
    "tests/gpu/test_replay_apps.py::test_validate_is_byte_exact[axpy_inplace]" \
    "tests/gpu/test_replay_apps.py::test_validate_is_byte_exact[pointer_table]" \
    "tests/gpu/test_replay_apps.py::test_validate_is_byte_exact[torch_expandable]" \
    tests/gpu/test_replay_apps.py::test_axpy_changed_constant_fails_on_y \
    tests/gpu/test_replay_apps.py::test_axpy_out_of_bounds_is_reported_and_replay_recovers \
    tests/gpu/test_replay_errors.py \
    tests/gpu/test_trust_gpu.py::test_gpu_fill_equals_the_numpy_reference \
    tests/gpu/test_trust_gpu.py::test_variant_relying_on_equal_buffers_is_caught_by_perturbation \
    tests/gpu/test_native_units.py tests/gpu/test_textures.py 2>&1 | tail -30
  s3=${PIPESTATUS[0]}
fi
echo "== step 3 (replay regressions, textures): status $s3 at $(elapsed) s"
echo "== summary: hostmem tests $s1, bench $s2, regressions $s3; $(elapsed) s in all"
[ "$s1" = 0 ] && { [ "$s3" = 0 ] || [ "$s3" = skipped ]; }
