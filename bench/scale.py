"""Robustness at scale (issue 7): capture an MoE-style PyTorch app holding >= 20 GB of
expert weights (testapps/python/moe_scale.py) on the H200 and measure

  overhead  extract wall minus the app's own time, in a plain run of the same process,
            from its start to the target dispatch (goal <= 15 s)
  size      the reproducer: du, apparent bytes, and the manifest's logical and stored
            bytes (provenance.bytes)
  prune     kerncap.prune.pruner on it: what was kept, stored full / stored pruned (goal >= 10x),
            and a replay of what is kept validates byte-exact
  store     bytes a second capture of another kernel of the same app (the last layer's
            silu) adds to a chunk store that holds the first (goal <= 5 % of what the
            first added)

The steps run in an order that keeps the disk's peak at about one capture plus one
store (about 42 GB with the defaults; the H200 machine has a 64 GiB disk):
  1. a warm-up run (--layers 1: fills Triton's cache), then a plain run (timestamps)
  2. extract the last layer's up projection (moe_scale_expert_ffn; the app is stopped
     after the capture)
  3. add it to a fresh store   4. prune it in place, validate, delete it
  5. extract the last layer's silu   6. add it to the store, delete it and the store
Free space is checked first (the run refuses to start without enough) and printed after
every step; everything is deleted at the end, also on failure.

  python3 bench/scale.py [--layers 24] [--experts 8] [--d-model 4096] [--d-ff 7168]
                         [--tokens 256] [--dir DIR] [--json F] [--ignore-disk-check]
A small version first: python3 bench/scale.py --layers 2
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import PYAPPS, print_table, verdict, write_json

GB = 1e9
APP = PYAPPS / "moe_scale.py"

GOAL_WEIGHTS_GB = 20.0
GOAL_OVERHEAD_S = 15.0
GOAL_PRUNE_RATIO = 10.0
GOAL_SECOND_FRACTION = 0.05
GOAL_PEAK_GB = 45.0

# Disk planning. A capture holds the weights plus the app's other allocations (caching
# allocator segments, cuBLAS workspace: well under a GB here). The store keeps each
# chunk zstd-compressed: bf16 normal values shrink to roughly 0.8 of their size, so
# 0.85 leaves room; incompressible data would need 1.0.
CAPTURE_SLACK = 1.0 * GB
STORE_FRACTION = 0.85
MARGIN = 2.0 * GB


class StepFailed(Exception):
    """A step could not be measured: the bench reports what it has and stops."""


# -- planning and measuring the disk ---------------------------------------------------------


def weight_bytes(layers: int, experts: int, d_model: int, d_ff: int) -> int:
    """Expert weights of moe_scale.py: W_up and W_down per layer, bf16."""
    return 2 * layers * experts * d_model * d_ff * 2


def disk_plan(weights: int) -> dict[str, float]:
    """Bytes the bench expects to hold: one capture, then capture + store at the peak."""
    capture = weights * 1.02 + CAPTURE_SLACK
    store = capture * STORE_FRACTION
    return {"capture": capture, "store": store, "peak": capture + store, "need": capture + store + MARGIN}


def refusal(free: int, plan: dict[str, float], where: Path) -> str | None:
    """Why the bench must not start with `free` bytes under `where`, or None."""
    if free >= plan["need"]:
        return None
    return (f"scale: only {free / GB:.1f} GB free under {where}, this run needs about {plan['need'] / GB:.1f} GB "
            f"(one capture {plan['capture'] / GB:.1f} GB + its store copy {plan['store'] / GB:.1f} GB + "
            f"{MARGIN / GB:.0f} GB margin).\n"
            "Free space, pass --dir on a larger file system, run a smaller model (--layers N), "
            "or pass --ignore-disk-check to try anyway.")


def dir_sizes(path: Path) -> dict[str, int]:
    """du (allocated blocks) and apparent bytes of a tree; a hard-linked file counts once."""
    seen: set[tuple[int, int]] = set()
    du = apparent = files = 0
    for root, dirs, names in os.walk(path):
        du += os.lstat(root).st_blocks * 512
        for name in names:
            st = os.lstat(os.path.join(root, name))
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                du += st.st_blocks * 512
                apparent += st.st_size
                files += 1
    return {"du": du, "apparent": apparent, "files": files}


class Disk:
    """Free space printed at each step, and the most this bench held at any of them."""

    def __init__(self, path: Path):
        self.path = path
        self.start_used = shutil.disk_usage(path).used
        self.peak = 0
        self.log: list[dict] = []

    def note(self, step: str) -> int:
        usage = shutil.disk_usage(self.path)
        held = max(0, usage.used - self.start_used)
        self.peak = max(self.peak, held)
        self.log.append({"step": step, "free": usage.free, "held": held})
        print(f"[disk] {step}: {usage.free / GB:.1f} GB free of {usage.total / GB:.1f} GB, "
              f"this bench holds {held / GB:.1f} GB", flush=True)
        return usage.free


# -- the steps ---------------------------------------------------------------------------------


def app_command(args, layers: int | None = None) -> list[str]:
    return [sys.executable, str(APP), "--layers", str(layers or args.layers), "--experts", str(args.experts),
            "--d-model", str(args.d_model), "--d-ff", str(args.d_ff), "--tokens", str(args.tokens)]


def run_plain(command: list[str], workdir: Path, label: str, timeout: float) -> dict:
    """One run without kerncap; times from process start (the app's time.time() stamps)."""
    report = workdir / f"report-{label}.json"
    env = {**os.environ, "KC_TESTAPP_REPORT": str(report)}
    t0 = time.time()
    try:
        proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise StepFailed(f"the {label} run of moe_scale.py did not finish within {timeout:g} s") from None
    wall = time.time() - t0
    if proc.returncode != 0:
        raise StepFailed(f"the {label} run of moe_scale.py exited with status {proc.returncode}:\n"
                         + proc.stderr[-3000:])
    rep = json.loads(report.read_text())
    return {"wall_s": wall, "to_weights_s": rep["t_weights"] - t0, "to_dispatch_s": rep["t_target"] - t0,
            "to_forward_s": rep["t_forward"] - t0, "report": {k: v for k, v in rep.items() if not k.endswith("_last")}}


def run_extract(kernel: str, dispatch: int, command: list[str], output: Path, workdir: Path, label: str,
                timeout: float) -> dict:
    from kerncap.errors import KerncapError
    from kerncap.capture.extract import extract

    report = workdir / f"report-{label}.json"
    t0 = time.time()
    try:
        result = extract(kernel, command, output=output, dispatch=dispatch, timeout=timeout,
                         env={"KC_TESTAPP_REPORT": str(report)}, output_sink=lambda *_: None)
    except KerncapError as exc:
        raise StepFailed(f"extract {kernel} --dispatch {dispatch}: {exc}") from None
    wall = time.time() - t0
    rep = json.loads(report.read_text()) if report.exists() else {}
    cap = result.capture
    prov = cap.provenance
    return {
        "kernel": cap.kernel.get("demangled") or cap.kernel.get("name"), "pattern": kernel, "dispatch": dispatch,
        "wall_s": wall, "to_dispatch_s": rep["t_target"] - t0 if "t_target" in rep else None,
        "capture_seconds": prov.get("capture_seconds"), "bytes": prov.get("bytes"), "regions": len(cap.regions),
        "manifest_bytes": (cap.root / "manifest.json").stat().st_size, "disk": dir_sizes(output),
        "warnings": list(result.warnings),
    }


def add_to_store(store, reproducer: Path) -> dict:
    from kerncap.errors import KerncapError
    from kerncap.reproducer.stored import add_capture

    t0 = time.monotonic()
    try:
        objects, added = add_capture(store, reproducer)
    except KerncapError as exc:
        raise StepFailed(f"adding {reproducer} to the store: {exc}") from None
    return {"objects": objects, "bytes": added, "seconds": time.monotonic() - t0}


def run_prune(reproducer: Path) -> dict:
    """kerncap.prune.pruner in place (it swaps in the pruned reproducer when that validates),
    then an independent byte-exact validation of whatever is in place."""
    try:
        from kerncap.prune.pruner import prune_reproducer
    except ModuleNotFoundError as exc:
        if exc.name not in ("kerncap", "kerncap.prune.pruner"):
            raise
        return {"error": "kerncap.prune.pruner is not part of this kerncap build"}
    from kerncap.errors import KerncapError
    from kerncap.replay.client import ReplayClient

    t0 = time.monotonic()
    try:
        r = prune_reproducer(reproducer, validate=True)
    except KerncapError as exc:
        return {"error": f"prune_reproducer: {exc}", "seconds_total": time.monotonic() - t0}
    except Exception as exc:  # noqa: BLE001 - a bug there must not cost the store figures
        return {"error": f"prune_reproducer failed ({type(exc).__name__}: {exc})",
                "seconds_total": time.monotonic() - t0}
    out = {
        "seconds_total": time.monotonic() - t0, "kept": r.kept, "reason": r.reason,
        "ratio": r.ratio if math.isfinite(r.ratio) else "inf",  # inf: nothing left to store
        "regions_full": r.regions_full, "regions_pruned": r.regions_pruned, "logical_full": r.logical_full,
        "logical_pruned": r.logical_pruned, "stored_full": r.stored_full, "stored_pruned": r.stored_pruned,
        "seconds": dict(r.seconds or {}), "summary": r.summary(), "disk_after": dir_sizes(reproducer),
        "prune_validated": getattr(r, "validated", None),
    }
    print(f"[scale] prune: {out['summary']}", flush=True)
    t0 = time.monotonic()
    try:
        with ReplayClient(reproducer) as rc:
            v = rc.validate()
    except KerncapError as exc:
        out.update(validated=False, validate_error=str(exc))
    else:
        out.update(validated=v.passed, mismatched_regions=[c.name for c in v.regions if c.mismatched_bytes])
    out["validate_s"] = time.monotonic() - t0
    return out


def run_steps(args, base: Path, disk: Disk, results: dict) -> None:
    disk.note("start")
    results["warmup"] = {"wall_s": run_plain(app_command(args, layers=1), base, "warmup", args.timeout)["wall_s"]}
    plain = results["plain"] = run_plain(app_command(args), base, "plain", args.timeout)
    print(f"[scale] plain run: {plain['wall_s']:.1f} s wall, weights ready at {plain['to_weights_s']:.1f} s, "
          f"target dispatch at {plain['to_dispatch_s']:.1f} s", flush=True)
    app = plain["report"]
    target = (args.target_kernel or app["target_kernel"], app["target_dispatch"])
    second = (args.second_kernel or app["second_kernel"],
              app["second_dispatch"] if args.second_dispatch is None else args.second_dispatch)

    first_dir = base / "first"
    first = results["first"] = run_extract(*target, app_command(args), first_dir, base, "first", args.timeout)
    print(f"[scale] extract {first['pattern']} #{first['dispatch']}: {first['wall_s']:.1f} s, "
          f"{first['disk']['du'] / GB:.2f} GB on disk", flush=True)
    disk.note("first capture written")

    from kerncap.reproducer.store import Store

    store = Store(base / "store")
    results["store_first"] = add_to_store(store, first_dir)
    disk.note("first capture added to the store")
    results["prune"] = run_prune(first_dir)
    disk.note("first capture pruned")
    shutil.rmtree(first_dir)
    free = disk.note("first capture deleted")

    need = results["disk_plan"]["capture"] + MARGIN
    if free < need and not args.ignore_disk_check:
        raise StepFailed(f"only {free / GB:.1f} GB free for the second capture, which needs about {need / GB:.1f} GB")
    second_dir = base / "second"
    got = results["second"] = run_extract(*second, app_command(args), second_dir, base, "second", args.timeout)
    print(f"[scale] extract {got['pattern']} #{got['dispatch']}: {got['wall_s']:.1f} s", flush=True)
    disk.note("second capture written")
    results["store_second"] = add_to_store(store, second_dir)
    results["store_bytes"] = store.size()
    disk.note("second capture added to the store")
    shutil.rmtree(second_dir)


# -- the table -----------------------------------------------------------------------------------


def _get(d: dict, *path):
    for key in path:
        if not isinstance(d, dict) or d.get(key) is None:
            return None
        d = d[key]
    return d


def _gb(v) -> str:
    return "n/a" if v is None else f"{v / GB:.2f} GB"


def _s(v) -> str:
    return "n/a" if v is None else f"{v:.1f} s"


def figures(results: dict) -> list[list[str]]:
    """[figure, value, goal, ok|MISSED|''] rows; a goal whose figure is missing is MISSED."""
    rows: list[list[str]] = []

    def row(name: str, value: str, goal: str = "", ok: bool | None = None) -> None:
        rows.append([name, value, goal, verdict(bool(ok)) if goal else ""])

    weights = results.get("weights_bytes")
    row("expert weights", _gb(weights), f">= {GOAL_WEIGHTS_GB:g} GB",
        weights is not None and weights >= GOAL_WEIGHTS_GB * GB)
    row("plain run, wall", _s(_get(results, "plain", "wall_s")))
    plain_to = _get(results, "plain", "to_dispatch_s")
    row("plain run, start to target dispatch", _s(plain_to))
    first_wall = _get(results, "first", "wall_s")
    row("extract, wall", _s(first_wall))
    row("extract, start to target dispatch", _s(_get(results, "first", "to_dispatch_s")))
    overhead = first_wall - plain_to if first_wall is not None and plain_to is not None else None
    row("extract overhead (wall - plain to dispatch)", _s(overhead), f"<= {GOAL_OVERHEAD_S:g} s",
        overhead is not None and overhead <= GOAL_OVERHEAD_S)
    secs = _get(results, "first", "capture_seconds")
    row("capture seconds pre / post / total",
        "n/a" if not secs else f"{secs.get('pre', 0):.1f} / {secs.get('post', 0):.1f} / {secs.get('total', 0):.1f} s")
    row("reproducer on disk (du)", _gb(_get(results, "first", "disk", "du")))
    row("reproducer apparent size", _gb(_get(results, "first", "disk", "apparent")))
    row("reproducer logical (manifest)", _gb(_get(results, "first", "bytes", "logical")))
    row("reproducer stored (manifest)", _gb(_get(results, "first", "bytes", "stored")))
    regions = _get(results, "first", "regions")
    row("regions", "n/a" if regions is None else str(regions))

    prune = results.get("prune") or {}
    if prune.get("error"):
        row("prune", prune["error"], f">= {GOAL_PRUNE_RATIO:g}x", False)
    else:
        ratio, kept = prune.get("ratio"), prune.get("kept")
        ratio = math.inf if ratio == "inf" else ratio
        reason = (prune.get("reason") or "no reason given")[:100]
        row("prune kept", "n/a" if kept is None else kept if kept != "full" else f"full: {reason}")
        row("prune: stored full / pruned", "n/a" if ratio is None else
            f"{ratio:.1f}x ({_gb(prune.get('stored_full'))} -> {_gb(prune.get('stored_pruned'))})",
            f">= {GOAL_PRUNE_RATIO:g}x", kept == "pruned" and ratio is not None and ratio >= GOAL_PRUNE_RATIO)
        validated = prune.get("validated")
        row("pruned reproducer validates byte-exact", "n/a" if validated is None else ("yes" if validated else "no"),
            "yes", kept == "pruned" and validated is True)
        s = prune.get("seconds") or {}
        row("prune seconds closure / write / validate",
            "n/a" if not s else " / ".join(f"{s.get(k, 0):.1f}" for k in ("closure", "write", "validate")) + " s")

    first_added = _get(results, "store_first", "bytes")
    second_added = _get(results, "store_second", "bytes")
    row("store: first capture added", _gb(first_added))
    row("second extract (another kernel), wall", _s(_get(results, "second", "wall_s")))
    row("store: second capture added", _gb(second_added))
    fraction = second_added / first_added if first_added and second_added is not None else None
    row("store: second / first", "n/a" if fraction is None else f"{100 * fraction:.2f} %",
        f"<= {100 * GOAL_SECOND_FRACTION:g} %", fraction is not None and fraction <= GOAL_SECOND_FRACTION)
    peak = _get(results, "disk", "peak_bytes")
    row("disk held by the bench at its peak", _gb(peak), f"<= {GOAL_PEAK_GB:g} GB",
        peak is not None and peak <= GOAL_PEAK_GB * GB)
    return rows


# -- main ------------------------------------------------------------------------------------------


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, default=24)
    parser.add_argument("--experts", type=int, default=8)
    parser.add_argument("--d-model", type=int, default=4096)
    parser.add_argument("--d-ff", type=int, default=7168)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--dir", type=Path, default=None, help="where captures and the store go (default: a temp dir)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds for one run of the app (default 600)")
    parser.add_argument("--target-kernel", help="pattern of the first capture (default: the app's target_kernel)")
    parser.add_argument("--second-kernel", help="pattern of the second capture (default: the app's second_kernel)")
    parser.add_argument("--second-dispatch", type=int, help="dispatch of the second capture (default: the app's)")
    parser.add_argument("--ignore-disk-check", action="store_true", help="start even if free space looks too small")
    parser.add_argument("--json", metavar="FILE")
    return parser.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    weights = weight_bytes(args.layers, args.experts, args.d_model, args.d_ff)
    plan = disk_plan(weights)
    if args.dir is not None:
        args.dir.mkdir(parents=True, exist_ok=True)
    base = Path(tempfile.mkdtemp(prefix="kerncap-scale-", dir=args.dir))
    why = refusal(shutil.disk_usage(base).free, plan, base.parent)
    if why and not args.ignore_disk_check:
        base.rmdir()
        sys.exit(why)

    results: dict = {"weights_bytes": weights, "disk_plan": plan}
    disk = Disk(base.parent)  # same file system, and still there after the clean-up
    error = None
    try:
        run_steps(args, base, disk, results)
    except StepFailed as exc:
        error = results["error"] = str(exc)
    finally:
        shutil.rmtree(base, ignore_errors=True)
        disk.note("cleaned up")
        results["disk"] = {"peak_bytes": disk.peak, "log": disk.log}

    print_table(["figure", "value", "goal", ""], figures(results))
    write_json(args.json, {"bench": "scale", "args": {k: str(v) if isinstance(v, Path) else v
                                                      for k, v in vars(args).items()}, "results": results})
    if error:
        sys.exit(f"scale: stopped early: {error}")


if __name__ == "__main__":
    main()
