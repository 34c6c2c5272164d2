"""The software and hardware stack a reproducer was made on, and the one running now.

`extract` records it in reproducer.json ("provenance": kerncap, Python, torch and Triton
versions, the NVIDIA driver, the CUDA driver API version, the GPU with its UUID and
clocks, the environment the run changed); `info` shows it; `check` compares it with
the stack of the machine that replays (`differences`) and warns where they differ,
because a timing or a verdict from another driver, GPU or compiler is not the same
measurement.

Package versions come from the installed distributions' metadata (nothing is
imported: importing torch costs seconds). GPU facts come from NVML (kerncap.core.nvml: `pynvml`, from the
nvidia-ml-py wheel) when it is importable, else from `nvidia-smi`; without either they
are None, never guessed.
"""

from __future__ import annotations

import copy
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from importlib import metadata
from typing import Any

from kerncap import __version__
from kerncap.core import nvml

# Distributions whose versions change what a kernel computes or how fast it runs.
PACKAGES = ("torch", "triton", "numpy")
# Environment variables of the app's run worth keeping: they change code generation,
# the allocator's layout, library kernel choice or which GPU ran.
ENV_PREFIXES = ("CUDA_", "TORCH", "PYTORCH_", "TRITON_", "NCCL_", "CUBLAS", "CUDNN_", "NVIDIA_", "OMP_NUM_THREADS",
                "KERNCAP_")
# What `differences` compares: (label, path into the stack dict).
COMPARED = (
    ("kerncap", ("kerncap",)),
    ("NVIDIA driver", ("driver",)),
    ("CUDA driver API", ("cuda_driver",)),
    ("GPU", ("gpu", "name")),
    ("torch", ("packages", "torch")),
    ("triton", ("packages", "triton")),
)
_SMI_TIMEOUT = 20.0


def package_versions(python: str | None = None, names: Sequence[str] = PACKAGES) -> dict[str, str | None]:
    """Installed versions of `names` in this interpreter, or in the interpreter `python`
    (an app's own Python: asked in a subprocess that reads metadata only)."""
    if python is None or os.path.realpath(python) == os.path.realpath(sys.executable):
        return {n: _version(n) for n in names}
    probe = ("import json, sys\nfrom importlib import metadata\nout = {}\nfor n in sys.argv[1:]:\n"
             "    try: out[n] = metadata.version(n)\n    except Exception: out[n] = None\nprint(json.dumps(out))\n")
    try:
        done = subprocess.run([python, "-c", probe, *names], capture_output=True, text=True, timeout=30)
        got = json.loads(done.stdout.strip().splitlines()[-1])
        return {n: got.get(n) for n in names}
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return {n: None for n in names}


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def app_python(command: Sequence[str]) -> str | None:
    """The Python interpreter an app command runs under, if it is one (`python app.py`,
    `/venv/bin/python3 -m x`); None for native executables and wrappers."""
    if not command:
        return None
    exe = os.path.basename(command[0])
    if exe.startswith("python") and all(c.isdigit() or c in ".m" for c in exe[len("python"):]):
        return shutil.which(command[0]) or command[0]
    return None


def selected_env(env: Mapping[str, str]) -> dict[str, str]:
    """The variables of `env` that ENV_PREFIXES keep (KERNCAP_OUT and the like included)."""
    return {k: v for k, v in sorted(env.items()) if k.startswith(ENV_PREFIXES)}


# -- the GPU ---------------------------------------------------------------------------------


def gpu_facts(uuid: str | None = None, index: int | None = None) -> dict[str, Any]:
    """Name, UUID, driver and clocks of one GPU (by UUID, else by NVML index, else the
    first one CUDA_VISIBLE_DEVICES leaves visible). Keys are None where unknown."""
    facts = _nvml_facts(uuid, index)
    if facts is None:
        facts = _smi_facts(uuid, index)
    return facts or {"name": None, "uuid": uuid, "driver": None, "cuda_driver": None, "clocks": {}, "source": None}


def _visible_index() -> int:
    first = (os.environ.get("CUDA_VISIBLE_DEVICES") or "0").split(",")[0].strip()
    return int(first) if first.isdigit() else 0


def _nvml_facts(uuid: str | None, index: int | None) -> dict[str, Any] | None:
    try:
        device = nvml.open_device(uuid=uuid, index=None if uuid else (_visible_index() if index is None else index))
    except nvml.NvmlUnavailable:
        return None
    with device:
        sm, mem = device.constant("NVML_CLOCK_SM"), device.constant("NVML_CLOCK_MEM")
        clocks = {"sm_mhz": device.ask("GetClockInfo", sm), "mem_mhz": device.ask("GetClockInfo", mem),
                  "max_sm_mhz": device.ask("GetMaxClockInfo", sm), "max_mem_mhz": device.ask("GetMaxClockInfo", mem),
                  "app_sm_mhz": device.ask("GetApplicationsClock", sm)}
        return {"name": device.ask("GetName"), "uuid": device.ask("GetUUID"),
                "driver": device.system("GetDriverVersion"), "cuda_driver": device.system("GetCudaDriverVersion"),
                "clocks": clocks, "source": "nvml"}


def _smi_facts(uuid: str | None, index: int | None) -> dict[str, Any] | None:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    fields = ["name", "uuid", "driver_version", "clocks.sm", "clocks.mem", "clocks.max.sm", "clocks.max.mem",
              "clocks.applications.graphics"]
    target = uuid if uuid else str(_visible_index() if index is None else index)
    try:
        done = subprocess.run([smi, f"--id={target}", f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"],
                              capture_output=True, text=True, timeout=_SMI_TIMEOUT)
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0 or not done.stdout.strip():
        return None
    values = [v.strip() for v in done.stdout.strip().splitlines()[0].split(",")]
    if len(values) != len(fields):
        return None
    num = lambda s: int(s) if s.isdigit() else None
    name, gpu_uuid, driver, sm, mem, max_sm, max_mem, app_sm = values
    return {"name": name, "uuid": gpu_uuid, "driver": driver, "cuda_driver": None,
            "clocks": {"sm_mhz": num(sm), "mem_mhz": num(mem), "max_sm_mhz": num(max_sm), "max_mem_mhz": num(max_mem),
                       "app_sm_mhz": num(app_sm)},
            "source": "nvidia-smi"}


# -- whole stacks ----------------------------------------------------------------------------


# A set's members are assembled one after another from one run: they share one look at
# the stack (NVML and the package scan cost ~45 ms a time).
_STACK_TTL_S = 5.0
_recent_stacks: dict[tuple, tuple[float, dict[str, Any]]] = {}


def running_stack(*, uuid: str | None = None, index: int | None = None, python: str | None = None) -> dict[str, Any]:
    """The stack of this machine now: versions, driver and the GPU (see gpu_facts).
    Answers from a look taken less than _STACK_TTL_S ago for the same GPU and Python."""
    key = (uuid, index, python)
    seen = _recent_stacks.get(key)
    if seen and time.monotonic() - seen[0] < _STACK_TTL_S:
        return copy.deepcopy(seen[1])
    stack = _look_at_stack(uuid, index, python)
    _recent_stacks[key] = (time.monotonic(), copy.deepcopy(stack))
    return stack


def _look_at_stack(uuid: str | None, index: int | None, python: str | None) -> dict[str, Any]:
    gpu = gpu_facts(uuid, index)
    return {
        "kerncap": __version__,
        "python": platform.python_version() if python is None else None,
        "packages": package_versions(python),
        "driver": gpu.pop("driver", None),
        "cuda_driver": gpu.pop("cuda_driver", None),
        "gpu": gpu,
        "host": platform.node(),
    }


def capture_provenance(command: Sequence[str], manifest_gpu: Mapping[str, Any],
                       env_changes: Mapping[str, str] | None) -> dict[str, Any]:
    """What `extract` writes into reproducer.json's "provenance": the stack of the run (the
    app's own Python's packages when the app is a Python command), the GPU the capture
    was made on (by the UUID the capture recorded) with its clocks right after the run,
    the environment variables the front end changed for the app, and the ones of the
    run's environment that matter (ENV_PREFIXES)."""
    python = app_python(command)
    stack = running_stack(uuid=manifest_gpu.get("uuid") or None, index=manifest_gpu.get("ordinal"), python=python)
    if python is not None:
        stack["python_executable"] = python
    if not stack["cuda_driver"] and isinstance(manifest_gpu.get("driver_version"), int):
        stack["cuda_driver"] = manifest_gpu["driver_version"]
    if not stack["gpu"].get("name"):
        stack["gpu"]["name"] = manifest_gpu.get("name")
    stack["env_changes"] = dict(sorted((env_changes or {}).items()))
    stack["env"] = selected_env({**os.environ, **(env_changes or {})})
    return stack


def recorded_stack(reproducer_json: Mapping[str, Any] | None, manifest_provenance: Mapping[str, Any]) -> dict[str, Any]:
    """The stack a reproducer recorded, in running_stack's shape: reproducer.json's
    provenance where present (newer reproducers), the capture manifest's facts otherwise."""
    prov = dict((reproducer_json or {}).get("provenance") or {})
    gpu = dict(manifest_provenance.get("gpu") or {})
    out = {
        "kerncap": prov.get("kerncap") or manifest_provenance.get("tool_version"),
        "packages": dict(prov.get("packages") or {}),
        "driver": prov.get("driver"),
        "cuda_driver": prov.get("cuda_driver") or gpu.get("driver_version"),
        "gpu": {"name": gpu.get("name"), "uuid": gpu.get("uuid"), **(prov.get("gpu") or {})},
    }
    return out


def differences(recorded: Mapping[str, Any], running: Mapping[str, Any]) -> list[str]:
    """One line per fact of COMPARED that both stacks know and that differs, e.g.
    "NVIDIA driver: recorded 580.159, running 575.51". Unknown facts are not compared."""
    out = []
    for label, path in COMPARED:
        a, b = _dig(recorded, path), _dig(running, path)
        if a not in (None, "") and b not in (None, "") and str(a) != str(b):
            out.append(f"{label}: recorded {a}, running {b}")
    return out


def _dig(d: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(d, Mapping):
            return None
        d = d.get(key)
    return d


def stack_lines(prov: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    """(label, text) lines of reproducer.json's provenance for `kerncap info`."""
    if not prov:
        return []
    pkgs = prov.get("packages") or {}
    versions = [f"kerncap {prov.get('kerncap') or '?'}"] + [f"{k} {v}" for k, v in pkgs.items() if v]
    if prov.get("python"):
        versions.append(f"python {prov['python']}")
    cuda = prov.get("cuda_driver")
    cuda_text = f"{cuda // 1000}.{(cuda % 1000) // 10}" if isinstance(cuda, int) else "?"
    out = [("stack", ", ".join(versions) + f"; NVIDIA driver {prov.get('driver') or '?'} (CUDA {cuda_text})")]
    gpu = prov.get("gpu") or {}
    clocks = gpu.get("clocks") or {}
    if gpu.get("uuid") or clocks:
        mhz = lambda k: f"{clocks[k]} MHz" if clocks.get(k) is not None else "?"
        out.append(("gpu uuid", f"{gpu.get('uuid') or '?'}; clocks after the run: SM {mhz('sm_mhz')} "
                                f"(max {mhz('max_sm_mhz')}), memory {mhz('mem_mhz')} (max {mhz('max_mem_mhz')})"))
    changes = prov.get("env_changes") or {}
    if changes:
        out.append(("env set", " ".join(f"{k}={v}" for k, v in changes.items())))
    return out
