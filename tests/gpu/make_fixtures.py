"""Re-capture the CPU tests' committed capture fixtures on the GPU machine, through the
default interception path (entry points), with the stack recorded:

    python3 tests/gpu/make_fixtures.py --out DIR [--build BUILD_DIR_OF_TESTAPPS]

For every fixture under tests/fixtures/captures/ whose app is a CUDA test app of
testapps/ (the command's executable name), it builds the apps (unless --build names a
build), extracts the same kernel, dispatch and options again (keep-running and sources
as the fixture had them), checks the new capture (entry-point interception, the NVIDIA
driver version in reproducer.json's provenance, a byte-exact validation) and writes ONE
tarball, DIR/fixtures.tgz (< 16 MiB), holding captures/<name>/ for each. Fixtures of
other apps are named and left as they are. On the development machine:

    rm -rf tests/fixtures/captures/<name> ...   # the names the script printed
    tar -xzf fixtures.tgz -C tests/fixtures/

(the old directories must go first: their payload files are named by hash). Tests that
need an address read it from the manifest, so the new addresses change nothing there.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TESTAPPS = REPO / "testapps"
FIXTURES = REPO / "tests" / "fixtures" / "captures"
LIMIT = 16 << 20
LEFT_OUT = (".git", "__pycache__")


def build(build_dir: Path) -> Path:
    for step in (["cmake", "-S", str(TESTAPPS), "-B", str(build_dir), "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release"],
                 ["ninja", "-C", str(build_dir)]):
        proc = subprocess.run(step, capture_output=True, text=True)
        if proc.returncode != 0:
            sys.exit(f"building the test apps failed: {' '.join(step)}\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    return build_dir


def recipe(fixture: Path) -> dict:
    """What the fixture was made of: its reproducer.json and manifest provenance."""
    record = json.loads((fixture / "reproducer.json").read_text())
    prov = json.loads((fixture / "capture" / "manifest.json").read_text())["provenance"]
    command = record.get("command") or prov["command"]
    match = record.get("match") or prov["match"]
    return {"app": Path(command[0]).name, "args": list(command[1:]), "pattern": match["pattern"],
            "match": match["mode"], "dispatch": int(record.get("dispatch", prov.get("dispatch_index", 0))),
            "keep_running": prov.get("env", {}).get("KERNCAP_KEEP_RUNNING") == "1",
            "sources": bool(record.get("sources"))}


def recapture(name: str, r: dict, build_dir: Path, stage: Path) -> Path:
    from kerncap.capture.extract import extract
    from kerncap.replay.client import ReplayClient

    out = stage / "captures" / name
    res = extract(r["pattern"], [str(build_dir / r["app"]), *r["args"]], output=out, match=r["match"],
                  dispatch=r["dispatch"], keep_running=r["keep_running"], timeout=180,
                  source_dir=TESTAPPS / "cuda" if r["sources"] else None,
                  build_dir=build_dir if r["sources"] else None)
    out = Path(res.reproducer_dir)
    manifest = json.loads((out / "capture" / "manifest.json").read_text())
    record = json.loads((out / "reproducer.json").read_text())
    prov, stack = manifest["provenance"], record.get("provenance") or {}
    problems = []
    if prov.get("interception") != "entry points":  # native/capture/inject.cpp interception_name
        problems.append(f"captured through {prov.get('interception')!r}, not the entry points")
    if not stack.get("driver"):
        problems.append("reproducer.json records no NVIDIA driver version (no NVML, no nvidia-smi?)")
    if r["sources"] and not record.get("sources"):
        problems.append(f"the sources were not found again ({record.get('notes')})")
    with ReplayClient(out) as rc:
        v = rc.validate()
    if not v.passed:
        problems.append("the new capture does not validate byte-exact: "
                        + ", ".join(f"{c.name} {c.mismatched_bytes} B" for c in v.regions if c.mismatched_bytes))
    if problems:
        sys.exit(f"{name}: " + "; ".join(problems))
    print(f"{name}: {manifest['kernel']['name']} dispatch {prov['dispatch_index']}, {len(manifest['regions'])} "
          f"regions, interception {prov['interception']}, NVIDIA driver {stack['driver']} "
          f"(CUDA {stack.get('cuda_driver')}), {stack.get('gpu', {}).get('name')}; validates byte-exact")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="where fixtures.tgz is written")
    ap.add_argument("--build", type=Path, help="a build of testapps/ to use (default: build one)")
    args = ap.parse_args()
    stage = Path(tempfile.mkdtemp(prefix="kc-fixtures-"))
    try:
        build_dir = args.build or build(stage / "testapps")
        made, skipped = [], []
        for fixture in sorted(p for p in FIXTURES.iterdir() if (p / "capture" / "manifest.json").is_file()):
            r = recipe(fixture)
            if not (build_dir / r["app"]).is_file():
                skipped.append(f"{fixture.name} ({r['app']} is not a test app of testapps/)")
                continue
            recapture(fixture.name, r, build_dir, stage)
            made.append(fixture.name)
        if not made:
            sys.exit("no fixture to re-capture")
        args.out.mkdir(parents=True, exist_ok=True)
        tgz = args.out / "fixtures.tgz"
        with tarfile.open(tgz, "w:gz") as tar:
            for name in made:
                tar.add(stage / "captures" / name, arcname=f"captures/{name}",
                        filter=lambda t: None if any(part in LEFT_OUT for part in Path(t.name).parts) else t)
        size = tgz.stat().st_size
        if size >= LIMIT:
            sys.exit(f"{tgz} is {size} bytes, over {LIMIT}: the fixtures grew")
        print(f"wrote {tgz} ({size} bytes): {' '.join(made)}")
        print("on the development machine: rm -rf " + " ".join(f"tests/fixtures/captures/{n}" for n in made)
              + f" && tar -xzf fixtures.tgz -C tests/fixtures/")
        for s in skipped:
            print(f"left as it is: {s}")
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
