"""nvcc's device-only compile (`-cubin`) as the three steps it runs, so that kerncap can
change what goes between them and time each one.

`nvcc -dryrun` prints the steps without running them: the host compiler's preprocessor
(`gcc -E`, device macros defined) writes the translation unit as one `.ii` file, `cicc`
(the CUDA C++ front end and NVVM) turns it into PTX, `ptxas` assembles the cubin. Running
them ourselves lets the recompile (1) compile a reduced `.ii` (kerncap.recompile.devcompile.reduce)
instead of the whole one, (2) hand cicc the captured module id
(kerncap.recompile.devcompile.module_id) and (3) report where the time went; `--device-time-trace`
splits cicc's time into the front end and NVVM (optimizer + PTX code generation).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from kerncap.errors import KerncapError

_ASSIGN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$")
_VAR = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")
# What nvcc appends to a step it would run in a thread of its own (`--threads N`, `-t N`):
# `> /tmp/tmpxft_…_stdout 2>/tmp/tmpxft_…_stderr`, a shell's redirections, not arguments.
_REDIRECTIONS = re.compile(r'(?:\s+\d?>>?\s*(?:"[^"]*"|\S+))+\s*$')
_HOST_CC = re.compile(r"(^|[-/])(gcc|g\+\+|cc|c\+\+|clang|clang\+\+|icpx|icpc|nvc\+\+)(-[\d.]+)?$")


class PlanError(Exception):
    """`nvcc -dryrun` did not show the three steps expected of a device-only compile."""


@dataclass
class Step:
    kind: str  # "preprocess" | "cicc" | "ptxas"
    argv: list[str]

    def option(self, name: str) -> str | None:
        """The value following `name` (as a separate word), if any."""
        try:
            return self.argv[self.argv.index(name) + 1]
        except (ValueError, IndexError):
            return None


@dataclass
class Plan:
    """The steps of one `nvcc -cubin` run, in a private work directory."""

    preprocess: Step
    cicc: Step
    ptxas: Step
    env: dict[str, str]
    cwd: Path
    ii: Path  # what the preprocessor writes and cicc reads
    ptx: Path
    cubin: Path


@dataclass
class Timing:
    """Seconds per phase of one compile, in the order they ran."""

    phases: list[tuple[str, float]] = field(default_factory=list)

    def add(self, name: str, seconds: float) -> None:
        self.phases.append((name, seconds))

    def seconds(self) -> float:
        return sum(s for _, s in self.phases)

    def as_dict(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for name, s in self.phases:
            out[name] = round(out.get(name, 0.0) + s, 4)
        return out


def _expand(word: str, env: dict[str, str]) -> str:
    return _VAR.sub(lambda m: env.get(m.group(1) or m.group(2), ""), word)


def plan(nvcc_argv: list[str], cwd: Path, work: Path, env: dict[str, str] | None = None) -> Plan:
    """The steps nvcc would run for `nvcc_argv` (a `-cubin -o OUT` compile), with its
    intermediate files in `work` (`-keep-dir`). `env`: the environment nvcc runs in (the
    dry run itself runs the host compiler once, to learn its version)."""
    argv = [*nvcc_argv, "-dryrun", "-keep", "-keep-dir", str(work)]
    try:
        proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, errors="surrogateescape",
                              check=False)
    except OSError as exc:
        raise KerncapError(f"cannot run {argv[0]}: {exc.strerror}", "check the CUDA toolkit installation") from None
    if proc.returncode != 0:
        raise KerncapError(f"nvcc -dryrun failed (exit status {proc.returncode}):\n{(proc.stdout + proc.stderr).rstrip()}",
                           "check the compile command in source/build.json")
    env = dict(os.environ if env is None else env)
    steps: list[Step] = []
    for raw in (proc.stderr + proc.stdout).splitlines():
        if not raw.startswith("#$ "):
            continue
        line = _REDIRECTIONS.sub("", raw[3:].strip())  # kerncap captures each step's output itself
        m = _ASSIGN.match(line)
        if m and " " not in line.split("=", 1)[0]:
            env[m.group(1)] = " ".join(_expand(w, env) for w in shlex.split(m.group(2)))
            continue
        words = [_expand(w, env) for w in shlex.split(line)]
        if not words:
            continue
        exe = Path(words[0]).name
        if exe == "cicc":
            steps.append(Step("cicc", words))
        elif exe == "ptxas":
            steps.append(Step("ptxas", words))
        elif "-E" in words and _HOST_CC.search(exe):
            steps.append(Step("preprocess", words))
        else:
            raise PlanError(f"unexpected step {exe}")
    kinds = [s.kind for s in steps]
    if kinds != ["preprocess", "cicc", "ptxas"]:
        raise PlanError(f"steps {kinds}")
    pre, cicc, ptxas = steps
    ii, ptx, cubin = pre.option("-o"), cicc.option("-o"), ptxas.option("-o")
    if not (ii and ptx and cubin) or ii not in cicc.argv or ptx not in ptxas.argv:
        raise PlanError("the steps do not hand their files on as expected")
    return Plan(pre, cicc, ptxas, env, cwd, Path(ii), Path(ptx), Path(cubin))


def cicc_argv(p: Plan, ii: Path, module_id_file: Path | None, extra: list[str], trace: Path | None) -> list[str]:
    """cicc's command with `ii` as input, the module id read from `module_id_file` (when
    given) instead of generated, and `extra` options."""
    argv: list[str] = []
    words = p.cicc.argv
    i = 0
    while i < len(words):
        w = words[i]
        if module_id_file is not None and w == "--gen_module_id_file":
            i += 1
            continue
        if module_id_file is not None and w == "--module_id_file_name":
            argv += [w, str(module_id_file)]
            i += 2
            continue
        argv.append(str(ii) if w == str(p.ii) else w)
        i += 1
    if module_id_file is not None and "--module_id_file_name" not in argv:
        argv[1:1] = ["--module_id_file_name", str(module_id_file)]
    if trace is not None:
        argv[1:1] = ["--device-time-trace", str(trace)]
    argv[1:1] = extra
    return argv


class StepFailed(Exception):
    def __init__(self, kind: str, returncode: int, log: str, seconds: float = 0.0):
        super().__init__(f"{kind} failed ({returncode})")
        self.kind, self.returncode, self.log, self.seconds = kind, returncode, log, seconds


def run_step(kind: str, argv: list[str], p: Plan) -> tuple[float, str]:
    """Runs one step; returns (seconds, its output). Raises StepFailed."""
    start = time.perf_counter()
    try:
        proc = subprocess.run(argv, cwd=p.cwd, env=p.env, capture_output=True, text=True, errors="surrogateescape",
                              check=False)
    except OSError as exc:
        raise KerncapError(f"cannot run {argv[0]}: {exc.strerror}", "check the CUDA toolkit installation") from None
    seconds = time.perf_counter() - start
    log = proc.stdout + proc.stderr
    if proc.returncode != 0:
        raise StepFailed(kind, proc.returncode, log, seconds)
    return seconds, log


# Top-level spans of cicc's --device-time-trace (Chrome trace JSON). Read with a regex:
# the file has an event per template instantiation (megabytes for a thrust TU), and
# only these few are needed.
_TRACE_EVENT = re.compile(r'\{(?:"args":\{[^{}]*\},)?[^{}]*"name"\s*:\s*"(CUDA C\+\+ Front-End|LibNVVM)"[^{}]*\}')
_DUR = re.compile(r'"dur"\s*:\s*(\d+)')


def cicc_split(trace: Path) -> dict[str, float] | None:
    """{"front end": s, "NVVM": s} from a cicc time trace, or None when unreadable."""
    try:
        text = trace.read_text(errors="replace")
    except OSError:
        return None
    out: dict[str, float] = {}
    for m in _TRACE_EVENT.finditer(text):
        d = _DUR.search(m.group(0))
        if d:
            key = "front end" if m.group(1).startswith("CUDA") else "NVVM"
            out[key] = out.get(key, 0.0) + int(d.group(1)) / 1e6
    return out if "front end" in out else None
