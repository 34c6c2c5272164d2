"""A stand-in for the replay server (kerncap.replay.server) that speaks its protocol but
does no CUDA work, for CPU tests of the front ends that keep replay servers resident
(MCP server, check, sweep). The GPU suite runs the real one. Run as a script; its
behaviour comes from the environment:

  FAKE_PIDS=DIR          write DIR/<pid> while running (tests look for orphans)
  FAKE_MEDIANS=JSON      {"substring of the cubin path" | "captured": median ms}; default 0.01
  FAKE_FAIL=S            validation fails for cubins whose path contains S (validate, and check:
                         the session's validation, after `reference` found the captured kernel
                         deterministic)
  FAKE_HANG=S            replay of a cubin whose path contains S sleeps 120 s
  FAKE_SLOW=SECONDS      every replay, validate and time_compare takes this long
  FAKE_NO_GPU=1          open fails as without a GPU
"""

import json
import os
import sys
import time
from pathlib import Path

out = sys.stdout
pids = os.environ.get("FAKE_PIDS")
if pids:
    Path(pids, str(os.getpid())).write_text("fake replay server")
medians = json.loads(os.environ.get("FAKE_MEDIANS") or "{}")
slow = float(os.environ.get("FAKE_SLOW") or 0)


def send(obj):
    out.write(json.dumps(obj) + "\n")
    out.flush()


def median_of(cubin):
    for key, value in medians.items():
        if (cubin is None and key == "captured") or (cubin and key != "captured" and key in cubin):
            return float(value)
    return 0.01


for line in sys.stdin:
    req = json.loads(line)
    rid, op, cubin = req["id"], req["op"], req.get("cubin")
    if op == "open":
        if os.environ.get("FAKE_NO_GPU"):
            send({"id": rid, "ok": False, "error": "cuInit failed: CUDA_ERROR_NO_DEVICE (100)", "kind": "no_gpu",
                  "fatal": True, "hint": "run on a machine with an NVIDIA GPU"})
            sys.exit(3)
        send({"id": rid, "ok": True, "result": {"capture": req["capture"], "pid": os.getpid()}})
    elif op == "replay":
        if os.environ.get("FAKE_HANG") and cubin and os.environ["FAKE_HANG"] in cubin:
            time.sleep(120)
        time.sleep(slow)
        m = median_of(cubin)
        n = req["iterations"]
        times = [m] * n
        send({"id": rid, "ok": True, "result": {
            "times_ms": times, "median_ms": m, "min_ms": m, "max_ms": m, "spread_pct": 0.0, "iterations": n,
            "warmup": req["warmup"], "flush_l2": req["flush_l2"], "cubin": cubin, "notes": [f"pid {os.getpid()}"]}})
    elif op == "validate":
        time.sleep(slow)
        fail = bool(os.environ.get("FAKE_FAIL") and cubin and os.environ["FAKE_FAIL"] in cubin)
        exact = req.get("atol") is None and req.get("rtol") is None and req.get("dtype") is None
        region = {"kind": "region", "id": 0, "name": "region 0", "base": 0x7F0000000000, "size": 4096,
                  "dtype": None if exact else (req.get("dtype") or "float32"),
                  "mismatched_bytes": 16 if fail else 0, "mismatched_elements": None if exact else (4 if fail else 0),
                  "max_abs_err": None, "max_rel_err": None, "first_mismatches": [[0, 1, 2]] if fail else [],
                  "unexpected_write": False}
        send({"id": rid, "ok": True, "result": {
            "passed": not fail, "mode": "exact" if exact else "tolerance", "atol": req.get("atol"),
            "rtol": req.get("rtol"), "cubin": cubin, "notes": [], "regions": [region]}})
    elif op == "reference":  # kerncap.replay.session_ops.op_reference: replay matches the capture, every run alike
        time.sleep(slow)
        send({"id": rid, "ok": True, "result": {"first": [], "spread": [[] for _ in range(int(req.get("runs", 1)) - 1)],
                                                "references": [], "perturbed_items": []}})
    elif op == "check":  # kerncap.replay.session_ops.op_check
        time.sleep(slow)
        fail = bool(os.environ.get("FAKE_FAIL") and cubin and os.environ["FAKE_FAIL"] in cubin)
        t = (req.get("tolerances") or {}).get("0")
        region = {"kind": "region", "id": 0, "name": "region 0", "base": 0x7F0000000000, "size": 4096,
                  "dtype": t[0] if t else None, "mismatched_bytes": 16 if fail else 0,
                  "mismatched_elements": (4 if fail else 0) if t else None, "max_abs_err": None, "max_rel_err": None,
                  "first_mismatches": [[0, 1, 2]] if fail else [], "unexpected_write": False}
        checks = [region] if (fail or not req.get("failures_only")) else []
        send({"id": rid, "ok": True, "result": {"checks": checks, "notes": []}})
    elif op == "time_compare":  # kerncap.replay.session_ops.op_time_compare's answer
        time.sleep(slow)
        cubins = [None] + list(req.get("cubins") or [])
        n, rounds = req["iterations"], req["rounds"]
        send({"id": rid, "ok": True, "result": {
            "programs": [{"label": c or "captured cubin", "cubin": c,
                          "rounds": [[median_of(c) * (1 + 0.01 * ((r + i) % 3)) for i in range(n)]
                                     for r in range(rounds)]} for c in cubins],
            "iterations": n, "warmup": req["warmup"], "flush_l2": req["flush_l2"], "floor_ms": 0.002,
            "clock": {"available": False, "unavailable_reason": "fake replay server"}, "seconds": 0.0,
            "notes": [f"pid {os.getpid()}"]}})
    elif op == "shutdown":
        send({"id": rid, "ok": True, "result": {}})
        break
    else:
        send({"id": rid, "ok": False, "error": f"unknown op {op}", "kind": "input", "fatal": False})
if pids:
    Path(pids, str(os.getpid())).unlink(missing_ok=True)
