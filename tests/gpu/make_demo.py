"""Make the workbench's bundled demo and the CPU tests' capture fixtures on the GPU
machine (real H200 captures, small):

    python3 tests/gpu/make_demo.py --build BUILD_DIR_OF_TESTAPPS --out DIR [--inspect]

Writes DIR/demo.tgz holding reproducer/ (the smooth kernel with its source, a profile
and three recorded variants; its git history and ignore file shipped as dot-git/ and dot-gitignore) and
fixtures/axpy_small/ (an in-place axpy reproducer). Unpack into kerncap_tui/demo/ and
tests/fixtures/captures/ respectively. The reproducer now carries launches.json (extract
writes it); --inspect adds each variant's ncu metrics and memcheck verdict (needs ncu and
compute-sanitizer; the TUI snapshots then need --snapshot-update).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tarfile
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from smooth_edits import SMOOTH_MANGLED, edit, kernel_header  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
DEMO_N = str(1 << 16)


def record(history, session, repro: Path, cubin: Path | None, note: str, build_seconds: float | None = None):
    """As every build records one (kerncap.session): a variant is timed interleaved with the
    captured cubin (speedup with its interval) and validated on perturbed inputs too."""
    from kerncap.api import BuildRequest

    fields = {**session.measure(cubin, BuildRequest()).fields(), "note": note, "build_seconds": build_seconds}
    if cubin is None:
        return history.record(baseline=True, **fields)
    return history.record(cubin=str(cubin.relative_to(repro)), **fields)


def inspect_variants(repro: Path, history) -> None:
    """ncu metrics and a memcheck verdict per variant, stored as the workbench reads them."""
    from kerncap.replay import ncu, sanitize

    for v in history.variants:
        cubin = None if v.id == 0 else repro / v.cubin
        r = ncu.profile(repro, cubin, timeout=300)
        print(v.label, "ncu", {k: round(x, 2) if x is not None else None for k, x in r.metrics.items()})
        s = sanitize.sanitize(repro, cubin, timeout=300)
        print(v.label, "memcheck", "clean" if s.clean else f"{len(s.errors)} errors")
    for leftover in (*repro.glob("variants/*.ncu-rep"), *repro.glob("variants/*.log")):
        leftover.unlink()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--inspect", action="store_true",
                    help="also store Nsight Compute metrics and a memcheck verdict for each variant (the History "
                         "columns; the .ncu-rep reports and logs are left out to keep the demo small)")
    args = ap.parse_args()
    from kerncap.capture.extract import extract
    from kerncap.capture.profile import run_profile
    from kerncap.recompile.cuda import recompile
    from kerncap.api import History, Session

    stage = Path(tempfile.mkdtemp(prefix="kc-demo-"))
    smooth = [str(args.build / "smooth"), DEMO_N]
    repro = stage / "reproducer"
    extract(SMOOTH_MANGLED, smooth, output=repro, match="exact", source_dir=REPO / "testapps" / "cuda",
            build_dir=args.build, timeout=120)
    run_profile(smooth, timeout=120).save(repro / "profile.json")

    history = History.load(repro)
    header = kernel_header(repro)
    original = header.read_text()
    rc = Session(repro, compile_worker=False)
    try:
        print("baseline", record(history, rc, repro, None, "captured cubin"))
        t0 = time.perf_counter(); cubin = recompile(repro).cubin
        print("v1", record(history, rc, repro, cubin, "unmodified source", time.perf_counter() - t0))
        edit(header, "fast")
        t0 = time.perf_counter(); cubin = recompile(repro).cubin
        fast = record(history, rc, repro, cubin, "bounds check hoisted, 64 taps unrolled", time.perf_counter() - t0)
        print("v2", fast)
        header.write_text(original)
        edit(header, "wrong")
        t0 = time.perf_counter(); cubin = recompile(repro).cubin
        print("v3", record(history, rc, repro, cubin, "window off by one", time.perf_counter() - t0))
    finally:
        rc.close()
    history.restore(fast)
    if args.inspect:
        inspect_variants(repro, history)
    (repro / ".git").rename(repro / "dot-git")  # kerncap_tui.demo.materialize() renames both back
    (repro / ".gitignore").rename(repro / "dot-gitignore")

    fixture = stage / "fixtures" / "axpy_small"
    extract("axpy_inplace", [str(args.build / "axpy_inplace"), "4096"], output=fixture, timeout=120)

    args.out.mkdir(parents=True, exist_ok=True)
    with tarfile.open(args.out / "demo.tgz", "w:gz") as tar:
        tar.add(repro, arcname="reproducer")
        tar.add(fixture, arcname="fixtures/axpy_small")
    shutil.rmtree(stage)
    print("wrote", args.out / "demo.tgz", (args.out / "demo.tgz").stat().st_size, "bytes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
