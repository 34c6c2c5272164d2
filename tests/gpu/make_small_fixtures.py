"""Make the CPU tests' small real captures of the paths issue 44 names (a sequence, host
memory, a texture, a Triton kernel) on the GPU machine, each validated byte-exact:

    python3 tests/gpu/make_small_fixtures.py --out DIR [--build BUILD_DIR_OF_TESTAPPS]

Run from the repository root with kerncap installed (pip install -e . and the native parts
built, as for the GPU suite). --build defaults to $KERNCAP_TESTAPPS_BUILD (batch.sh builds
into /tmp/kc-testapps), else a fresh build in a temporary directory; either way the three
CUDA apps are (re)built there with ninja (incremental), since their size arguments are
recent. The four captures, each as small as its app allows:

    seq_small      testapps/cuda/seq_pipeline.cu pipeline 4096: the NVTX range "pipeline",
                   instance 1 (--sequence nvtx), 5 launches on 2 streams, a copy, a fill
                   and a host-to-device copy, with the kernels' sources
    hostmem_small  testapps/cuda/hostmem/zero_copy_gather.cu 4096 1024: gather_table,
                   dispatch 1, reading a table in mapped pinned host memory, with sources
    texture_small  testapps/cuda/textures/tex_bilinear.cu 64 60: tex_bilinear, dispatch 1,
                   a texture object over a 64 x 60 float cudaArray, with sources
    triton_small   testapps/python/triton_autotune.py 4096: kc_autotune_add, dispatch 1
                   (after autotuning), keep-running, pruned (PyTorch's allocator segment)

Each is extracted with `kerncap extract`, then `kerncap validate --json` must pass
byte-exact (the script stops on the first failure, printing kerncap's words). It writes
DIR/small_fixtures.tgz (captures/<name>/..., no .git or __pycache__, < 16 MiB) and
DIR/small_fixtures.txt (sizes, validation summaries, the stack). On the development
machine:

    rm -rf tests/fixtures/captures/{seq_small,hostmem_small,texture_small,triton_small}
    tar -xzf small_fixtures.tgz -C tests/fixtures/

tests/test_small_fixtures.py runs once they are there (it skips itself while one is absent).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TESTAPPS = REPO / "testapps"
PYAPPS = TESTAPPS / "python"
LIMIT = 16 << 20  # the tarball
AIM = 4 << 20  # each fixture, stored (a warning above it)
LEFT_OUT = (".git", "__pycache__")
CUDA_APPS = ("seq_pipeline", "zero_copy_gather", "tex_bilinear")


@dataclass(frozen=True)
class Small:
    name: str
    app: str
    args: tuple[str, ...]
    kernel: str = ""
    options: tuple[str, ...] = ()
    python: bool = False
    sources: bool = True
    env: dict[str, str] = field(default_factory=dict)
    timeout: float = 300.0

    def command(self, build_dir: Path) -> list[str]:
        if self.python:
            return [sys.executable, str(PYAPPS / f"{self.app}.py"), *self.args]
        return [str(build_dir / self.app), *self.args]


SMALL = (
    Small("seq_small", "seq_pipeline", ("pipeline", "4096"),
          options=("--sequence", "nvtx", "--nvtx", "pipeline", "--dispatch", "1")),
    Small("hostmem_small", "zero_copy_gather", ("4096", "1024"), kernel="gather_table", options=("--dispatch", "1")),
    Small("texture_small", "tex_bilinear", ("64", "60"), kernel="tex_bilinear", options=("--dispatch", "1")),
    Small("triton_small", "triton_autotune", ("4096",), kernel="kc_autotune_add", python=True, sources=False,
          options=("--dispatch", "1", "--keep-running", "--prune")),
)


def kerncap(*args: str, timeout: float = 600, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kerncap", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


def build(build_dir: Path) -> Path:
    build_dir.mkdir(parents=True, exist_ok=True)
    steps = []
    if not (build_dir / "build.ninja").is_file():
        steps.append(["cmake", "-S", str(TESTAPPS), "-B", str(build_dir), "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release"])
    steps.append(["ninja", "-C", str(build_dir), *CUDA_APPS])
    for step in steps:
        proc = subprocess.run(step, capture_output=True, text=True)
        if proc.returncode != 0:
            sys.exit(f"building the test apps failed: {' '.join(step)}\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    return build_dir


def stored_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*")
               if p.is_file() and not p.is_symlink() and not any(x in LEFT_OUT for x in p.relative_to(path).parts))


def make(s: Small, build_dir: Path, stage: Path) -> dict:
    out = stage / "captures" / s.name
    work = stage / "work" / s.name
    work.mkdir(parents=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env.update(s.env)
    env["KC_TESTAPP_REPORT"] = str(work / "report.json")
    env["KC_TESTAPP_DONE"] = str(work / "done")
    args = ["extract", *([s.kernel] if s.kernel else []), "--output", str(out), "--timeout", str(int(s.timeout)),
            *s.options]
    if s.sources:
        args += ["--source-dir", str(TESTAPPS / "cuda"), "--build-dir", str(build_dir)]
    args += ["--", *s.command(build_dir)]
    t0 = time.monotonic()
    proc = kerncap(*args, timeout=s.timeout + 120, env=env)
    print(f"[{s.name}] kerncap {' '.join(args)}\n{proc.stdout}{proc.stderr}", flush=True)
    if proc.returncode != 0 or not (out / "reproducer.json").is_file():
        sys.exit(f"{s.name}: kerncap extract failed (exit {proc.returncode})")
    extract_s = time.monotonic() - t0
    v = kerncap("validate", "--json", str(out), timeout=600)
    print(f"[{s.name}] kerncap validate --json\n{v.stdout[-6000:]}{v.stderr[-3000:]}", flush=True)
    try:
        report = json.loads(v.stdout)
    except ValueError:
        report = None
    if v.returncode != 0 or report is None:
        sys.exit(f"{s.name}: does not validate byte-exact (kerncap validate exit {v.returncode})")
    info = kerncap("info", "--json", str(out))
    if info.returncode != 0:
        sys.exit(f"{s.name}: kerncap info failed (exit {info.returncode}): {info.stdout[-2000:]}{info.stderr[-2000:]}")
    text = kerncap("info", str(out))
    record = json.loads((out / "reproducer.json").read_text())
    stack = record.get("provenance") or {}
    size = stored_bytes(out)
    if size > AIM:
        print(f"WARNING: {s.name} stores {size} bytes, over the {AIM} aimed at", flush=True)
    return {"name": s.name, "command": " ".join([s.app, *s.args]), "options": " ".join(s.options),
            "bytes": size, "extract_s": round(extract_s, 1), "validate": report, "info": text.stdout,
            "driver": stack.get("driver"), "cuda_driver": stack.get("cuda_driver"),
            "gpu": (stack.get("gpu") or {}).get("name"), "prune": record.get("prune")}


def summary(made: list[dict], tgz: Path) -> str:
    lines = [f"kerncap small fixtures, made {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} "
             f"by tests/gpu/make_small_fixtures.py; {tgz.name}: {tgz.stat().st_size} bytes", ""]
    for m in made:
        lines += [f"== {m['name']}: {m['command']}  [{m['options']}]",
                  f"stored {m['bytes']} bytes; extract {m['extract_s']} s; GPU {m['gpu']}, NVIDIA driver {m['driver']} "
                  f"(CUDA {m['cuda_driver']})",
                  f"prune: {json.dumps(m['prune'])[:600]}" if m["prune"] else "prune: not asked",
                  "validate: " + json.dumps(m["validate"])[:3000], "", m["info"], ""]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="where small_fixtures.tgz and small_fixtures.txt go")
    ap.add_argument("--build", type=Path, default=(Path(os.environ["KERNCAP_TESTAPPS_BUILD"])
                                                   if os.environ.get("KERNCAP_TESTAPPS_BUILD") else None),
                    help="a build directory of testapps/ (default: $KERNCAP_TESTAPPS_BUILD, else a fresh one)")
    ap.add_argument("--only", action="append", choices=[s.name for s in SMALL], help="make only these (repeatable)")
    args = ap.parse_args()
    stage = Path(tempfile.mkdtemp(prefix="kc-small-fixtures-"))
    try:
        build_dir = build((args.build or stage / "testapps").resolve())
        made = [make(s, build_dir, stage) for s in SMALL if not args.only or s.name in args.only]
        args.out.mkdir(parents=True, exist_ok=True)
        tgz = args.out / "small_fixtures.tgz"
        with tarfile.open(tgz, "w:gz") as tar:
            for m in made:
                tar.add(stage / "captures" / m["name"], arcname=f"captures/{m['name']}",
                        filter=lambda t: None if any(part in LEFT_OUT for part in Path(t.name).parts) else t)
        size = tgz.stat().st_size
        (args.out / "small_fixtures.txt").write_text(summary(made, tgz))
        if size >= LIMIT:
            sys.exit(f"{tgz} is {size} bytes, over {LIMIT}")
        for m in made:
            print(f"{m['name']}: {m['bytes']} bytes stored, validates byte-exact")
        print(f"wrote {tgz} ({size} bytes) and {args.out / 'small_fixtures.txt'}")
        names = " ".join(f"tests/fixtures/captures/{m['name']}" for m in made)
        print(f"on the development machine: rm -rf {names} && tar -xzf small_fixtures.tgz -C tests/fixtures/")
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
