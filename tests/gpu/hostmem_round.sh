#!/usr/bin/env bash
# Issue 25's GPU round in one command (device tool, repo root): build, the new GPU tests,
# the existing tests that exercise the changed replay core (segments, host items, the
# fill/compare primitives), the native units, then bench/sparse.py. Prints pytest's
# summary and the bench's goal table; logs in $OUT.
#   bash tests/gpu/hostmem_round.sh
set -uo pipefail
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
export KERNCAP_TESTAPPS_BUILD=${KERNCAP_TESTAPPS_BUILD:-/tmp/kc-testapps}
t0=$(date +%s)
bash tests/gpu/run.sh -q \
  tests/gpu/test_hostmem_gpu.py \
  "tests/gpu/test_replay_apps.py::test_validate_is_byte_exact[axpy_inplace]" \
  "tests/gpu/test_replay_apps.py::test_validate_is_byte_exact[pointer_table]" \
  "tests/gpu/test_replay_apps.py::test_validate_is_byte_exact[torch_expandable]" \
  tests/gpu/test_replay_apps.py::test_axpy_changed_constant_fails_on_y \
  tests/gpu/test_replay_apps.py::test_axpy_out_of_bounds_is_reported_and_replay_recovers \
  tests/gpu/test_replay_errors.py \
  tests/gpu/test_trust_gpu.py::test_gpu_fill_equals_the_numpy_reference \
  tests/gpu/test_trust_gpu.py::test_variant_relying_on_equal_buffers_is_caught_by_perturbation \
  tests/gpu/test_native_units.py 2>&1 | tail -60
status=${PIPESTATUS[0]}
echo "pytest: status $status after $(( $(date +%s) - t0 )) s"
site=$(ls -d /tmp/site 2>/dev/null)
PYTHONPATH=${site:+$site:}bench timeout 420 python3 bench/sparse.py --build-dir "$KERNCAP_TESTAPPS_BUILD" \
  --json "$OUT/sparse.json" 2>&1 | tail -25
echo "bench: status ${PIPESTATUS[0]}; total $(( $(date +%s) - t0 )) s"
exit "$status"
