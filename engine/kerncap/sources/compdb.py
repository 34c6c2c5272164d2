"""compile_commands.json: finding it and reading its CUDA entries."""

from __future__ import annotations

import json
import os
import shlex
from dataclasses import dataclass
from pathlib import Path

from kerncap.errors import KerncapError

CUDA_SUFFIXES = {".cu"}
_INCLUDE_FLAGS = ("-I", "-isystem", "-iquote", "--include-path")


@dataclass(frozen=True)
class CompileEntry:
    file: Path  # absolute
    directory: Path  # the compile's working directory
    argv: list[str]
    output: Path | None  # the object file, absolute

    @property
    def compiler(self) -> str:
        return self.argv[0] if self.argv else ""

    @property
    def is_cuda(self) -> bool:
        return self.file.suffix in CUDA_SUFFIXES or "nvcc" in Path(self.compiler).name or _has_x_cu(self.argv)

    def include_dirs(self) -> list[Path]:
        """-I / -isystem / -iquote directories, absolute, in command order."""
        dirs = []
        for flag, value in iter_flag_values(self.argv, _INCLUDE_FLAGS):
            del flag
            dirs.append(Path(os.path.normpath(self.directory / value)))
        return dirs


def _has_x_cu(argv: list[str]) -> bool:
    return any(a == "-x" and i + 1 < len(argv) and argv[i + 1] == "cu" for i, a in enumerate(argv))


def iter_flag_values(argv: list[str], flags: tuple[str, ...]):
    """(flag, value) for `-Ivalue`, `-I value`, `--flag=value`, `--flag value`."""
    i = 0
    while i < len(argv):
        arg = argv[i]
        for flag in flags:
            if arg == flag and i + 1 < len(argv):
                yield flag, argv[i + 1]
                i += 1
                break
            if flag.startswith("--") and arg.startswith(flag + "="):
                yield flag, arg[len(flag) + 1 :]
                break
            if not flag.startswith("--") and arg.startswith(flag) and len(arg) > len(flag):
                # nvcc's own spelling `-isystem=/dir` (CMake writes it for CUDA) names /dir
                yield flag, arg[len(flag) + 1 :] if arg[len(flag)] == "=" else arg[len(flag) :]
                break
        i += 1


def output_of(argv: list[str], directory: Path) -> Path | None:
    for i, arg in enumerate(argv):
        if arg == "-o" and i + 1 < len(argv):
            return Path(os.path.normpath(directory / argv[i + 1]))
        if arg.startswith("--output-file="):
            return Path(os.path.normpath(directory / arg.split("=", 1)[1]))
    return None


def find_compdb(source_dir: Path, build_dir: Path | None) -> Path | None:
    """compile_commands.json in --build-dir, else in the source tree or its build*/ dirs."""
    candidates: list[Path] = []
    if build_dir is not None:
        candidates.append(build_dir / "compile_commands.json")
    candidates.append(source_dir / "compile_commands.json")
    if source_dir.is_dir():
        for child in sorted(source_dir.iterdir()):
            if child.is_dir() and child.name.lower().startswith(("build", "cmake-build", "out")):
                candidates.append(child / "compile_commands.json")
                candidates.extend(sorted(child.glob("*/compile_commands.json")))  # build/Release/...
    for path in candidates:
        if path.is_file():
            return path
    return None


def load_compdb(path: Path) -> list[CompileEntry]:
    try:
        raw = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise KerncapError(f"cannot read {path} ({exc})", "regenerate it (CMAKE_EXPORT_COMPILE_COMMANDS=ON, or bear -- make)") from None
    if not isinstance(raw, list):
        raise KerncapError(f"{path} is not a compilation database (expected a JSON list)")
    entries = []
    for item in raw:
        try:
            directory = Path(item["directory"])
            argv = list(item["arguments"]) if "arguments" in item else shlex.split(item["command"])
            file = Path(os.path.normpath(directory / item["file"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise KerncapError(f"{path} has a malformed entry ({type(exc).__name__}: {exc})") from None
        output = Path(os.path.normpath(directory / item["output"])) if item.get("output") else output_of(argv, directory)
        entries.append(CompileEntry(file=file, directory=directory, argv=argv, output=output))
    return entries
