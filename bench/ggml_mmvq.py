"""ggml's real `mul_mat_vec_q` end to end (issues 43 and 46), on a GPU machine:

    python3 bench/ggml_mmvq.py --ggml /work/main/.ggml [--work DIR] [--runs 5] [--json FILE]

GGML is a ggml source tree (src/, include/, tests/) built as docs/sources.md says ("ggml")
into GGML/build, with compile_commands.json there: test-backend-ops is the application,
run in perf mode on one q4_0 mat-vec (4096 x 14336, one column), so that every launch
of interest is ggml's own `mul_mat_vec_q`. Steps, each printed with its figures:

1. the app alone;
2. `kerncap extract mul_mat_vec_q --source-dir GGML/src --build-dir GGML/build`;
3. `kerncap validate` of the capture (byte-exact);
4. `kerncap recompile` with no flags (issue 43: no --trust, the reduced compile, its
   seconds) and `validate --cubin` of that build;
5. `kerncap pack`, `unpack` under another path, GGML's source tree moved away, then
   `recompile` there with no flags and `validate --cubin` (the reproducer names no path
   outside itself);
6. an edit of the kernel (`#pragma unroll 2` on the k-loop: the sums keep their order)
   built with `kerncap build` (its History row: speedup and validation);
7. `kerncap apply --variant N --check --runs R` in the unmodified app (issue 46): the
   app seeds its tensors from std::random_device, so --check must give no verdict;
8. the same apply, timed only, with GGML_CUDA_PDL=0 (no programmatic dependent launch:
   the kernel's GPU time is its own).

Exit status 0 when every step did what it should."""

from __future__ import annotations

import argparse
import glob
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

CASE = "type_a=q4_0,type_b=f32,m=4096,n=1,k=14336,"
EDIT_AT = "    for (int kbx = tid / (qi/vdr); kbx < blocks_per_row_x; kbx += blocks_per_iter) {"


def cublas_dir() -> str | None:
    """Where libcublas.so.13 is on this machine (the app links it; the toolkit's lib64 or
    the nvidia-cublas wheel PyTorch brought)."""
    for pattern in ("/usr/local/cuda/lib64/libcublas.so.13", "/usr/local/cuda*/lib64/libcublas.so.13",
                    "/usr/local/cuda*/targets/*/lib/libcublas.so.13",
                    "/usr/**/site-packages/nvidia/cu13/lib/libcublas.so.13",
                    "/opt/**/site-packages/nvidia/cu13/lib/libcublas.so.13",
                    "/usr/**/site-packages/nvidia/cublas/lib/libcublas.so.13",
                    "/opt/**/site-packages/nvidia/cublas/lib/libcublas.so.13"):
        found = glob.glob(pattern, recursive=True)
        if found:
            return str(Path(found[0]).parent)
    return None


def run(cmd: list[str], timeout: int = 900) -> tuple[int, str, str, float]:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    return proc.returncode, proc.stdout, proc.stderr, time.perf_counter() - t0


def kerncap(*args: str, want_json: bool = True) -> tuple[int, dict | str, float]:
    rc, out, err, seconds = run([sys.executable, "-m", "kerncap", *args])
    if not want_json:
        return rc, out + err, seconds
    try:
        return rc, json.loads(out), seconds
    except ValueError:
        print(f"kerncap {' '.join(args[:2])}: no JSON (status {rc}):\n{out[-3000:]}\n{err[-3000:]}")
        return rc, {}, seconds


def tail(text: str, n: int = 8) -> str:
    return "\n".join("    " + line for line in text.strip().splitlines()[-n:])


def interval(d: dict | None) -> str:
    if not d or d.get("speedup") is None:
        return "n/a"
    lo, hi = d.get("low"), d.get("high")
    return f"{d['speedup']:.3f}x" + (f" [{lo:.3f}-{hi:.3f}]" if lo is not None else "")


class Round:
    """The steps' shared state: the ggml tree, the app's command, the figures so far."""

    def __init__(self, ggml: Path, work: Path, runs: int):
        self.ggml, self.work, self.runs = ggml, work, runs
        self.repro = work / "mmvq"
        self.app = [str(ggml / "build" / "bin" / "test-backend-ops"), "perf", "-o", "MUL_MAT", "-b", "CUDA0",
                    "-p", CASE]
        self.facts: dict = {"case": CASE}

    def app_alone(self) -> bool:
        rc, out, err, s = run(self.app)
        print(f"1. the app alone: status {rc}, {s:.1f} s\n{tail(out + err, 4)}")
        return rc == 0

    def extract(self) -> bool:
        rc, text, s = kerncap("extract", "mul_mat_vec_q", "--source-dir", str(self.ggml / "src"), "--build-dir",
                              str(self.ggml / "build"), "-o", str(self.repro), "--cmd", shlex.join(self.app),
                              want_json=False)
        print(f"2. extract: status {rc}, {s:.1f} s\n{tail(text, 12)}")
        self.facts["extract"] = {"status": rc, "seconds": round(s, 1)}
        if rc != 0:
            return False
        rc, doc, s = kerncap("validate", str(self.repro), "--json")
        print(f"3. validate the capture: status {rc}, passed {doc.get('passed')}, {s:.1f} s")
        return rc == 0

    def recompile(self, where: Path, label: str) -> bool:
        """`recompile` with no flags, then `validate --cubin` of what it built."""
        rc, doc, s = kerncap("recompile", str(where), "--json")
        phases = ", ".join(f"{k} {v:.2f} s" for k, v in (doc.get("phases") or {}).items())
        print(f"{label} recompile (no flags): status {rc}, mode {doc.get('mode')}, compile {doc.get('seconds')} s "
              f"({phases}), command wall {s:.1f} s")
        for note in doc.get("notes") or []:
            print("    note: " + note)
        outside = [a for a in doc.get("command") or [] if str(self.ggml) in a]
        print(f"    arguments naming {self.ggml}: {outside or 'none'}")
        self.facts[label] = {"status": rc, "mode": doc.get("mode"), "seconds": doc.get("seconds"),
                             "phases": doc.get("phases"), "outside": outside}
        if rc != 0 or not doc.get("cubin"):
            return False
        vrc, vdoc, _ = kerncap("validate", str(where), "--cubin", doc["cubin"], "--json")
        print(f"    validate --cubin: status {vrc}, passed {vdoc.get('passed')}")
        self.facts[label]["validate"] = vrc
        return vrc == 0 and not outside

    def elsewhere(self) -> bool:
        """Packed, unpacked under another path, the ggml tree moved away: recompiled there."""
        pack = self.work / "mmvq.kcap"
        rc, _, _ = kerncap("pack", str(self.repro), "-o", str(pack), want_json=False)
        there = self.work / "elsewhere" / "deeper" / "mmvq"
        rc2, _, _ = kerncap("unpack", str(pack), "-o", str(there), want_json=False)
        print(f"5. pack: status {rc}, {pack.stat().st_size if pack.exists() else 0} bytes; "
              f"unpack elsewhere: status {rc2}")
        hidden = self.ggml / "src.hidden"
        (self.ggml / "src").rename(hidden)  # the tree it came from is gone: the copy needs nothing of it
        try:
            return rc == 0 and rc2 == 0 and self.recompile(there, "5.")
        finally:
            hidden.rename(self.ggml / "src")

    def edit_and_build(self) -> int | None:
        """The edit, built by `kerncap build`: its History row's number."""
        sources = sorted(self.repro.glob("source/**/mmvq.cu"))
        text = sources[0].read_text() if sources else ""
        if EDIT_AT not in text:
            print(f"6. no source/**/mmvq.cu with the k-loop in {self.repro}")
            return None
        sources[0].write_text(text.replace(EDIT_AT, "#pragma unroll 2\n" + EDIT_AT, 1))
        rc, doc, s = kerncap("build", str(self.repro), "--json")
        print(f"6. build of the edit: status {rc}, {s:.1f} s; {json.dumps(doc)[:1500]}")
        self.facts["build"] = {"status": rc, "doc": doc}
        if rc != 0:
            return None
        history = json.loads((self.repro / "history.json").read_text())
        rows = history.get("variants", []) if isinstance(history, dict) else history
        return max((r["id"] for r in rows if isinstance(r, dict) and isinstance(r.get("id"), int)), default=None)

    def apply(self, number: int, label: str, *extra: str, env: dict | None = None) -> bool:
        """`kerncap apply --variant N` in the unmodified app; `extra` its options. A check with
        no verdict (the app's own runs differ: test-backend-ops seeds from random_device)
        is what this app should give, not a failure."""
        saved = dict(os.environ)
        os.environ.update(env or {})
        try:
            rc, doc, s = kerncap("apply", str(self.repro), "--variant", str(number), *extra, "--runs",
                                 str(self.runs), "--quiet", "--json", "--cmd", shlex.join(self.app))
        finally:
            os.environ.clear()
            os.environ.update(saved)
        check, timing = doc.get("check") or {}, doc.get("timing") or {}
        print(f"{label} apply --variant {number} {' '.join(extra)} --runs {self.runs}"
              f"{' with ' + str(env) if env else ''}: status {rc}, {s:.1f} s")
        print(f"    {doc.get('substituted')} of {doc.get('launches')} launches substituted; check: "
              f"{check.get('verdict')} ({check.get('compared')} compared; mismatch {check.get('mismatch')}; "
              f"unsteady {check.get('unsteady')})" if check else "    no check")
        print(f"    module globals copied before each launch: all but {len(doc.get('unreached_globals') or [])} "
              f"the variant does not reach; the variant lacks {doc.get('skipped_globals') or 'none'}")
        kernel_ms = timing.get("kernel_ms") or [[], []]
        calls = timing.get("kernel_calls") or [[], []]
        # per execution (the activity records count each): test-backend-ops runs for a set
        # time, so the two ways run the kernel a different number of times
        per = [round(1e3 * sum(k) / sum(c), 2) if k and sum(c) else None for k, c in zip(kernel_ms, calls)]
        print(f"    kernel executions per run as is / variant: {[sorted(c)[len(c) // 2] if c else None for c in calls]}; "
              f"GPU time per execution: {per} us; kernel speedup "
              f"{interval(timing.get('kernel_speedup'))}, app {interval(timing.get('app_speedup'))}; "
              f"replay {interval(doc.get('replay_speedup'))}")
        for note in timing.get("notes") or []:
            print("    note: " + note)
        self.facts[label] = {"status": rc, "seconds": round(s, 1), "doc": doc}
        return rc == 0 or (rc == 3 and check.get("verdict") == "unsteady")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ggml", type=Path, required=True, help="the ggml tree, built into GGML/build")
    ap.add_argument("--work", type=Path, default=Path("/tmp/kc-ggml"))
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    libs = cublas_dir()
    if libs:
        os.environ["LD_LIBRARY_PATH"] = libs + (":" + os.environ["LD_LIBRARY_PATH"]
                                                if os.environ.get("LD_LIBRARY_PATH") else "")
    subprocess.run(["rm", "-rf", str(args.work)], check=False)
    args.work.mkdir(parents=True)
    r = Round(args.ggml.resolve(), args.work, args.runs)
    r.facts["cublas"] = libs
    ok = r.app_alone() and r.extract()
    if ok:
        ok = r.recompile(r.repro, "4.") & r.elsewhere()
        number = r.edit_and_build()
        applied = number is not None and r.apply(number, "7.", "--check")
        # the kernel itself: ggml's own switch turns programmatic dependent launch off
        plain = number is not None and r.apply(number, "8.", env={"GGML_CUDA_PDL": "0"})
        ok = ok and applied and plain
    if args.json:
        args.json.write_text(json.dumps(r.facts, indent=2))
    print("ggml_mmvq: " + ("every step as it should" if ok else "a step FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
