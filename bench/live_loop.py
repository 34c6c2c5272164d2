"""The live loop before and after issue 28 (the edit loop moved from the workbench into
kerncap.session), in one run: save → History row in the real workbench, on a CUDA C++
reproducer (testapps' smooth kernel, with its sources) and a Triton one (the
FlashAttention-style kernel), with the old code (main at 21b6496: the loop in
kerncap_tui/app.py over kerncap_tui/engine.py) and the new code (this checkout,
installed) interleaved round by round, each run on a fresh copy of the reproducer.
Prints per app the medians of save → row and of the loop's overhead (save → row less
the compile time the row records), and the ratio new/old with a 90 % bootstrap
interval. Goal: new/old ≤ 1 (no slower), within noise.

    # on a machine with git (the CPU one), once: the old code, carried to the GPU machine
    python3 bench/live_loop.py --prepare-old bench/old-21b6496
    # any other commit (e.g. before issue 42's checked timing): its whole tree, whose native
    # parts --old builds (pip --target DIR/site) on the GPU machine before the runs
    python3 bench/live_loop.py --prepare-old bench/old-bb2e9ad --old-commit bb2e9ad
    # on the GPU machine, after `pip install --no-build-isolation .` (tests/gpu/run.sh does it)
    python3 bench/live_loop.py --old bench/old-21b6496 [--rounds 3] [--saves 3] [--apps smooth,flash]

Each run is a child process (the two kerncaps cannot share an interpreter) that opens
the workbench headless (Textual's run_test), times the baseline (B), waits for a Triton
reproducer's compile worker to be warm (as a user who edits after the workbench opened),
then saves the kernel source `--saves` times, each save a new source (a comment line
appended: nothing cached), and measures write → a new row in the History table.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
OLD_COMMIT = "21b6496"
WAIT_S = 180.0


# -- the child: one workbench, one reproducer, N saves ----------------------------------------------


def child(args: argparse.Namespace) -> int:
    import asyncio

    repro = Path(args.repro)
    source = Path(args.source)
    marker = "//" if source.suffix in (".cu", ".cuh", ".h", ".hpp") else "#"

    async def drive() -> dict:
        from textual.widgets import DataTable

        from kerncap_tui.app import KerncapApp

        app = KerncapApp(repro)
        result: dict = {"side": args.child, "saves": [], "error": None}
        async with app.run_test(size=(140, 40)) as pilot:
            table = app.query_one("#history-table", DataTable)

            async def wait_for(cond, what: str) -> float:
                deadline = time.monotonic() + WAIT_S
                while not cond():
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"no {what} within {WAIT_S:g} s")
                    await pilot.pause(0.02)
                return time.monotonic()

            await pilot.pause(1.0)
            app.action_tab("log")
            await pilot.press("B")
            await wait_for(lambda: app.history is not None and app.history.baseline is not None
                           and table.row_count >= 1, "baseline row")
            if args.kind == "triton":  # the resident compile worker is warm before the first save
                session = getattr(app, "session", None)
                wait = session.wait_warm if session is not None else app.compiler._worker.wait_ready
                warm = await asyncio.to_thread(wait)
                result["warmup"] = warm
            for k in range(args.saves):
                await pilot.pause(0.5)  # the previous build's workers are done
                rows = table.row_count
                text = source.read_text()
                t0 = time.monotonic()
                source.write_text(text + f"\n{marker} kerncap bench/live_loop.py save {k}\n")
                t1 = await wait_for(lambda: table.row_count > rows, f"History row after save {k}")
                v = app.history.variants[-1]
                result["saves"].append({"seconds": t1 - t0, "build_seconds": v.build_seconds,
                                        "validation": v.validation, "id": v.id})
            app.exit()
        return result

    try:
        out = asyncio.run(drive())
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which prints it
        out = {"side": args.child, "saves": [], "error": f"{type(exc).__name__}: {exc}"}
    Path(args.result).write_text(json.dumps(out))
    return 0 if out["error"] is None else 1


# -- the parent ------------------------------------------------------------------------------------------


def prepare_old(dest: Path, commit: str = OLD_COMMIT) -> int:
    """The old code (engine/kerncap, kerncap_tui without the demo, and the themes its
    stylesheet loads from the checkout's top) from git, here; for another commit than
    21b6496 its whole tree (the native parts are built from it: see built_old)."""
    dest = dest.resolve()
    if dest.exists():
        sys.exit(f"{dest} exists; remove it first")
    dest.mkdir(parents=True)
    paths = ["engine/kerncap", "kerncap_tui", "themes"] if commit == OLD_COMMIT else ["."]
    archive = subprocess.run(["git", "-C", str(REPO), "archive", commit, *paths], capture_output=True)
    if archive.returncode != 0:
        sys.exit(f"git archive {commit} failed: {archive.stderr.decode(errors='replace')}")
    untar = subprocess.run(["tar", "-x", "-C", str(dest), "--exclude", "kerncap_tui/demo/reproducer"],
                           input=archive.stdout, capture_output=True)
    if untar.returncode != 0:
        sys.exit(f"tar failed: {untar.stderr.decode(errors='replace')}")
    (dest / "REVISION").write_text(commit + "\n")
    print(f"old code ({commit}) in {dest}: {sum(1 for _ in dest.rglob('*.py'))} Python files")
    return 0


def built_old(old: Path) -> Path | None:
    """A whole old tree (pyproject.toml): installed with its own native parts into
    old/site (once), which the old side's PYTHONPATH then names. None for 21b6496's."""
    if not (old / "pyproject.toml").is_file():
        return None
    site = old / "site"
    if not (site / "kerncap").is_dir():
        t0 = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-build-isolation", "--no-deps",
                               "--target", str(site), str(old)], capture_output=True, text=True)
        if proc.returncode != 0:
            sys.exit(f"building the old code in {old} failed:\n{proc.stderr[-3000:]}")
        print(f"old code built into {site} in {time.monotonic() - t0:.0f} s", flush=True)
    return site


def link_native(old: Path) -> None:
    """The old package gets this install's native parts (the replay core is unchanged
    since 21b6496: issue 28 moved Python only)."""
    import kerncap

    installed = Path(kerncap.__file__).resolve().parent
    target = old / "engine" / "kerncap"
    found = [*installed.glob("_replay*.so"), installed / "_native"]
    if not any(p.exists() for p in found[:-1]):
        sys.exit(f"no replay core (_replay*.so) in {installed}: install kerncap with its native parts first "
                 "(pip install --no-build-isolation .)")
    for p in found:
        if p.exists() and not (target / p.name).exists():
            (target / p.name).symlink_to(p)


def make_reproducers(build: Path, work: Path, apps: list[str]) -> dict[str, tuple[Path, Path, str]]:
    """app -> (reproducer, the source file a save edits, kind), extracted with the new code."""
    sys.path.insert(0, str(REPO / "tests" / "gpu"))
    from kerncap.capture.extract import extract

    out = {}
    if "smooth" in apps:
        from smooth_edits import SMOOTH_MANGLED, kernel_header

        repro = work / "smooth"
        extract(SMOOTH_MANGLED, [str(build / "smooth"), str(1 << 20)], output=repro, match="exact",
                source_dir=REPO / "testapps" / "cuda", build_dir=build, timeout=120)
        out["smooth"] = (repro, kernel_header(repro), "cuda")
    if "flash" in apps:
        app = REPO / "testapps" / "python" / "triton_flash_attn.py"
        env = dict(os.environ, KC_TESTAPP_REPORT=str(work / "flash-report.json"),
                   KC_TESTAPP_DONE=str(work / "flash-done"))
        repro = work / "flash"
        extract("kc_flash_attn_fwd", [sys.executable, str(app)], output=repro, dispatch=1, keep_running=True,
                timeout=300, env=env)
        record = json.loads((repro / "reproducer.json").read_text())
        if (record.get("sources") or {}).get("kind") != "triton":
            sys.exit(f"the flash attention reproducer has no Triton source: {record.get('sources')}")
        out["flash"] = (repro, repro / "source" / "kernel.py", "triton")
    return out


def run_side(side: str, old: Path, repro: Path, source: Path, kind: str, saves: int, work: Path) -> dict:
    copy = Path(tempfile.mkdtemp(prefix=f"live-{side}-", dir=work)) / "reproducer"
    shutil.copytree(repro, copy)
    env = dict(os.environ, XDG_CONFIG_HOME=str(copy.parent / "config"), TRITON_CACHE_DIR=str(copy.parent / "triton"))
    env.pop("KERNCAP_THEME", None)
    if side == "old":
        site = old / "site"
        roots = [str(site)] if (site / "kerncap").is_dir() else [str(old / "engine"), str(old)]
        env["PYTHONPATH"] = os.pathsep.join([*roots, env.get("PYTHONPATH", "")])
    result = copy.parent / "result.json"
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", side, "--repro", str(copy),
           "--source", str(copy / source.relative_to(repro)), "--kind", kind, "--saves", str(saves),
           "--result", str(result)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=WAIT_S * (saves + 2))
    got = json.loads(result.read_text()) if result.is_file() else {"side": side, "saves": [], "error": "no result"}
    if got["error"]:
        got["error"] += f"\n--- child stderr (tail) ---\n{proc.stderr[-3000:]}"
    shutil.rmtree(copy.parent, ignore_errors=True)
    return got


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--old", type=Path, help="the old code, made by --prepare-old")
    ap.add_argument("--prepare-old", type=Path, metavar="DIR", help="write the old code into DIR (needs git)")
    ap.add_argument("--old-commit", default=OLD_COMMIT, help=f"the old code's commit ({OLD_COMMIT})")
    ap.add_argument("--build", type=Path, help="testapps build directory (default: a temporary one, built now)")
    ap.add_argument("--apps", default="smooth,flash", help="smooth, flash or both (smooth,flash)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds per app (each: old and new)")
    ap.add_argument("--saves", type=int, default=3, help="saves per run")
    ap.add_argument("--json", type=Path, help="write every measurement here")
    ap.add_argument("--child", choices=("old", "new"), help=argparse.SUPPRESS)
    for hidden in ("--repro", "--source", "--kind", "--result"):
        ap.add_argument(hidden, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args)
    if args.prepare_old:
        return prepare_old(args.prepare_old, args.old_commit)
    whole = args.old is not None and (args.old / "pyproject.toml").is_file()
    if args.old is None or not (args.old / "engine" / "kerncap" / "api.py").is_file() \
            or not (whole or (args.old / "kerncap_tui" / "engine.py").is_file()):
        sys.exit("--old DIR must hold the old code (engine/kerncap, kerncap_tui/engine.py): make it with "
                 f"--prepare-old DIR on a machine with git (commit {OLD_COMMIT})")
    old = args.old.resolve()
    sys.path.insert(0, str(HERE))
    from common import build_testapps, median, ratio_interval

    if built_old(old) is None:
        link_native(old)
    work = Path(tempfile.mkdtemp(prefix="kerncap-live-loop-"))
    apps = [a.strip() for a in args.apps.split(",") if a.strip()]
    build = args.build or build_testapps(work / "testapps")
    t0 = time.monotonic()
    reproducers = make_reproducers(build, work, apps)
    print(f"reproducers ready in {time.monotonic() - t0:.1f} s: {', '.join(reproducers)}", flush=True)
    everything: dict = {}
    failed = False
    for name, (repro, source, kind) in reproducers.items():
        runs = {"old": [], "new": []}
        for r in range(args.rounds):
            for side in (("old", "new") if r % 2 == 0 else ("new", "old")):  # alternate who goes first
                got = run_side(side, old, repro, source, kind, args.saves, work)
                if got["error"]:
                    print(f"{name} round {r} {side}: FAILED\n{got['error']}", flush=True)
                    failed = True
                    continue
                runs[side].append(got)
                print(f"{name} round {r} {side}: " + ", ".join(
                    f"{s['seconds']:.3f} s (compile {s['build_seconds'] or 0:.3f}, {s['validation']})"
                    for s in got["saves"]), flush=True)
        everything[name] = runs
        e2e = {side: [s["seconds"] for g in gs for s in g["saves"]] for side, gs in runs.items()}
        over = {side: [s["seconds"] - (s["build_seconds"] or 0.0) for g in gs for s in g["saves"]]
                for side, gs in runs.items()}
        bad = [s for gs in runs.values() for g in gs for s in g["saves"] if s["validation"] != "pass"]
        if bad:
            print(f"{name}: {len(bad)} row(s) did not validate 'pass': {bad[:3]}")
            failed = True
        if not e2e["old"] or not e2e["new"]:
            print(f"{name}: no ratio (a side has no measurement)")
            failed = True
            continue
        for label, values in (("save -> History row", e2e), ("loop overhead (less compile)", over)):
            lo, hi = ratio_interval(values["new"], values["old"])
            print(f"{name} {label}: old median {median(values['old']):.3f} s (n={len(values['old'])}), new median "
                  f"{median(values['new']):.3f} s (n={len(values['new'])}); new/old "
                  f"{median(values['new']) / median(values['old']):.3f} [{lo:.3f}–{hi:.3f}] (90 % bootstrap)")
    if args.json:
        args.json.write_text(json.dumps(everything, indent=1))
    shutil.rmtree(work, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
