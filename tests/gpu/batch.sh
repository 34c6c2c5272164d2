#!/usr/bin/env bash
# One GPU batch in parallel shards on one machine: install carried wheels, build kerncap
# and the test apps once, then run each shard as its own pytest process (its own Triton,
# Inductor and temporary directories; the shared test-app build), all at once, then the
# tests that need the GPU to themselves (they take most of its memory) one after another.
#
#   bash tests/gpu/batch.sh "tests/gpu/test_a.py tests/gpu/test_b.py" "tests/gpu/test_c.py" ...
#   KC_ALONE="tests/gpu/test_big.py::test_x" bash tests/gpu/batch.sh ...
#   KC_STEPS="python3 bench/foo.py --json \$OUT/foo.json" bash tests/gpu/batch.sh ...   (after the tests)
#
# Each argument is one shard's pytest arguments. With no argument the whole suite runs in
# seven shards (KC_EXTRA: an eighth), then the host-memory and profile tests alone. KC_BESIDE="cmd": a command run beside the shards (its output in $OUT/beside.log).
# Logs: $OUT/shards.log (every shard's log, one after another; failures on stdout),
# $OUT/summary.txt, $OUT/steps.log (the device tool brings back at most 8 files; build logs
# stay in /tmp/kc-*.log).
set -uo pipefail
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
t_start=$(date +%s)
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    >/tmp/kc-wheels.log 2>&1 && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH} \
    || { tail -20 /tmp/kc-wheels.log; echo "wheel install failed"; exit 3; }
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/summary.txt"
if [ -z "${KC_SKIP_BUILD:-}" ]; then
  python3 -m pip install -q --no-build-isolation --no-deps . >/tmp/kc-build.log 2>&1 || { tail -50 /tmp/kc-build.log; exit 4; }
fi
export KERNCAP_TESTAPPS_BUILD=${KERNCAP_TESTAPPS_BUILD:-/tmp/kc-testapps}
{ cmake -S testapps -B "$KERNCAP_TESTAPPS_BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release && ninja -C "$KERNCAP_TESTAPPS_BUILD"; } \
  >/tmp/kc-testapps.log 2>&1 || { tail -50 /tmp/kc-testapps.log; exit 4; }
export KERNCAP_TESTAPPS_PREBUILT=1
echo "build: $(( $(date +%s) - t_start )) s" | tee -a "$OUT/summary.txt"

if [ $# -eq 0 ]; then
  # The profile's timings, the host-memory tests' arenas and the L2 states (another shard's
  # kernels would evict what --warm-l2 read) need the GPU to themselves.
  KC_ALONE=${KC_ALONE:-tests/gpu/test_hostmem_gpu.py tests/gpu/test_profile.py tests/gpu/test_l2_states_gpu.py}
  # The whole suite as the 2026-12-01 H200 runs split it (docs/testing.md): seven shards at once;
  # test_apply_gpu.py moved to the first (126 s) from the last, which reached 430 s on an H100 (facts §49).
  set -- "tests/gpu/test_capture_apps.py tests/gpu/test_prune_gpu.py tests/gpu/test_store_gpu.py tests/gpu/test_apply_gpu.py" \
         "tests/gpu/test_scale.py tests/gpu/test_sources_gpu.py tests/gpu/test_sigkill_gpu.py" \
         "tests/gpu/test_triton_repro.py tests/gpu/test_graphs.py tests/gpu/test_fingerprints.py" \
         "tests/gpu/test_replay_apps.py tests/gpu/test_interception_paths.py tests/gpu/test_fast_path.py" \
         "tests/gpu/test_selection.py tests/gpu/test_inspect_gpu.py tests/gpu/test_trust_gpu.py tests/gpu/test_replay_errors.py tests/gpu/test_capture_errors.py tests/gpu/test_buckets.py" \
         "tests/gpu/test_tui_loop.py tests/gpu/test_tui_triton_loop.py tests/gpu/test_session_gpu.py tests/gpu/test_mcp_gpu.py tests/gpu/test_check_gpu.py tests/gpu/test_sweep_gpu.py tests/gpu/test_recompile_big.py tests/gpu/test_mismatch_gpu.py tests/gpu/test_textures.py tests/gpu/test_launch_kinds.py tests/gpu/test_compare_gpu.py tests/gpu/test_hang_gpu.py tests/gpu/test_multigpu.py tests/test_native_units.py" \
         "tests/gpu/test_sequences.py tests/gpu/test_sequence_sections_gpu.py tests/gpu/test_graph_edges.py tests/gpu/test_integrity_gpu.py tests/gpu/test_aliased_gpu.py"
  # KC_EXTRA="<test files> ...": one more shard beside the seven.
  [ -z "${KC_EXTRA:-}" ] || set -- "$@" "$KC_EXTRA"
fi

run_shard() {  # index, pytest args...
  local i=$1; shift
  local dir=/tmp/kc-shard-$i; mkdir -p "$dir/tmp" "$dir/triton" "$dir/inductor"
  # shellcheck disable=SC2068
  # KC_SHARD_TIMEOUT (s): SIGINT then, so pytest still prints what failed and its summary.
  TMPDIR=$dir/tmp TRITON_CACHE_DIR=$dir/triton TORCHINDUCTOR_CACHE_DIR=$dir/inductor \
    timeout -s INT -k 20 "${KC_SHARD_TIMEOUT:-100000}" python3 -m pytest -m "${KC_MARK:-gpu or native}" -p no:cacheprovider -p no:randomly -o addopts="" -ra --durations=8 \
    --basetemp="$dir/pt" $@ >"/tmp/kc-shard-$i.log" 2>&1
  local rc=$?
  echo $rc >"$dir/rc"
  # At once, on stdout: a call that runs out of time still shows what each finished shard did.
  echo "shard $i done (rc $rc, $(( $(date +%s) - t_start )) s): $(tail -1 "/tmp/kc-shard-$i.log")"
  grep -E "^(FAILED|ERROR) " "/tmp/kc-shard-$i.log" | head -10
  [ "$rc" = 0 ] || grep -E "^E  " "/tmp/kc-shard-$i.log" | head -20
}

if [ -n "${KC_BESIDE:-}" ]; then
  bash -c "$KC_BESIDE" >"$OUT/beside.log" 2>&1 &
  beside=$!
fi
i=0
for shard in "$@"; do
  i=$((i + 1))
  # shellcheck disable=SC2086
  run_shard "$i" $shard &
done
for job in $(jobs -p); do [ "$job" = "${beside:-}" ] || wait "$job"; done
if [ -n "${KC_ALONE:-}" ] && [ "$KC_ALONE" != none ]; then  # KC_ALONE=none: the seven shards only
  i=$((i + 1))
  # shellcheck disable=SC2086
  run_shard "$i" $KC_ALONE
fi
status=0
for n in $(seq 1 "$i"); do
  rc=$(cat /tmp/kc-shard-$n/rc 2>/dev/null || echo "?")
  [ "$rc" = 0 ] || status=1
  echo "shard $n (rc $rc): $(grep -E '^(=+ )?[0-9]+ (passed|failed)|^=+ .*(passed|failed|error)' "/tmp/kc-shard-$n.log" | tail -1)" \
    | tee -a "$OUT/summary.txt"
done
echo "tests: $(( $(date +%s) - t_start )) s since start" | tee -a "$OUT/summary.txt"
[ -z "${beside:-}" ] || { wait "$beside"; echo "beside: status $? ($(tail -1 "$OUT/beside.log"))" | tee -a "$OUT/summary.txt"; }
if [ -n "${KC_STEPS:-}" ]; then
  bash -c "$KC_STEPS" 2>&1 | tee "$OUT/steps.log"
fi
for n in $(seq 1 "$i"); do
  echo "===== shard $n: failures and summary"
  grep -E "^(FAILED|ERROR) " "/tmp/kc-shard-$n.log" | head -20
  tail -4 "/tmp/kc-shard-$n.log"
done
for n in $(seq 1 "$i"); do echo "######## shard $n"; cat "/tmp/kc-shard-$n.log"; done >"$OUT/shards.log"
exit $status
