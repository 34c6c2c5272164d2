"""Which source files define a kernel, and how they were compiled.

Three routes, tried in order, each recorded as `method` with a `confidence`:

* "nm+compile_commands": compile_commands.json lists the CUDA compiles; the object
  of each (its -o) holds the device cubin(s); the one whose symbol table DEFINES the
  exact mangled kernel is the translation unit (a template instantiated in several
  TUs is defined only by the objects that instantiate it). "exact" when one object
  (or the captured cubin's bytes) decides, "likely" when several tie.
* "dwarf": no database, but built objects: the cubin defining the kernel and its
  line table (-lineinfo / -G) name the files. "likely": the flags are unknown.
* "grep": the `__global__` definition of the base name in the tree. "likely" for a
  single hit in a .cu file, "guess" when the TU has to be inferred from includes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from kerncap.errors import KerncapError
from kerncap.sources import cubin as cubinfo
from kerncap.sources.compdb import CompileEntry, find_compdb, load_compdb
from kerncap.sources.fatbin import DeviceImage, device_images, read_file
from kerncap.sources.grep import TU_SUFFIXES, find_definitions, iter_source_files
from kerncap.sources.includes import includers, trace_includes, within
from kerncap.sources.names import base_name, demangle_all, is_mangled, library_reason

OBJECT_SUFFIXES = (".o", ".obj", ".cubin")


class SourcesNotFound(KerncapError):
    """No source trail for the kernel; `message` says why."""


@dataclass
class Discovery:
    kernel: str
    source_root: Path
    translation_unit: Path
    files: list[Path]
    compile_command: list[str]
    compile_command_origin: str  # "compile_commands.json" | "synthesized"
    cwd: Path
    include_dirs: list[Path]  # -I dirs inside the source tree, absolute
    method: str
    confidence: str
    notes: list[str] = field(default_factory=list)
    object: Path | None = None
    line_files: list[Path] = field(default_factory=list)  # files the kernel's line table names

    def rel(self, path: Path) -> str:
        return str(path.relative_to(self.source_root))

    def report(self) -> dict:
        return {
            "kind": "cuda",
            "kernel": self.kernel,
            "translation_unit": self.rel(self.translation_unit),
            "files": [self.rel(f) for f in self.files],
            "compile_command": list(self.compile_command),
            "compile_command_origin": self.compile_command_origin,
            "cwd": str(self.cwd),
            "object": str(self.object) if self.object else None,
            "line_table_files": [self.rel(f) for f in self.line_files],
            "method": self.method,
            "confidence": self.confidence,
            "notes": list(self.notes),
        }


@dataclass(frozen=True)
class _Candidate:
    image: DeviceImage
    entry: CompileEntry | None


class ObjectIndex:
    """Kernels defined by the device code of a set of objects (read once each)."""

    def __init__(self, objects: list[tuple[Path, CompileEntry | None]], needle: str | None = None):
        self.kernels: dict[str, list[_Candidate]] = {}
        self.unreadable: list[str] = []
        for path, entry in objects:
            try:
                raw = read_file(path)
                # nvcc's host object defines the kernel's name too (the launch stub), so an
                # object without those bytes cannot define it: skip parsing its device code
                if needle is not None and needle.encode() not in raw:
                    continue
                images = device_images(path, raw)
            except KerncapError as exc:
                self.unreadable.append(exc.message)
                continue
            for image in images:
                elf = cubinfo.open_elf(image.data, str(path))
                for name in cubinfo.kernel_names(elf):
                    self.kernels.setdefault(name, []).append(_Candidate(image, entry))

    def resolve(self, query: str) -> str:
        """The mangled kernel a query names: exact, or by base / demangled substring."""
        if query in self.kernels or not self.kernels:
            return query
        names = sorted(self.kernels)
        demangled = demangle_all(names)
        exact_base = [n for n in names if base_name(n) == query or demangled[n] == query]
        matches = exact_base or [n for n in names if query in demangled[n] or query in n]
        if len(matches) == 1:
            return matches[0]
        if len(matches) > 1:
            listing = "\n".join(f"    {n}  ({demangled[n]})" for n in matches)
            raise KerncapError(
                f"kernel name '{query}' is ambiguous; it matches {len(matches)} kernels:\n{listing}",
                "pass the exact mangled name of one of them",
            )
        return query


def _cuda_entries(compdb: Path) -> list[CompileEntry]:
    return [e for e in load_compdb(compdb) if e.is_cuda]


def _scan_objects(root: Path) -> list[Path]:
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d != "CompilerIdCUDA")
        found.extend(Path(dirpath) / f for f in sorted(filenames) if f.endswith(OBJECT_SUFFIXES))
    return found


def build_index(source_dir: Path, build_dir: Path | None, kernel: str) -> tuple[ObjectIndex, Path | None, list[CompileEntry]]:
    """Index the objects of the build. For an exact (mangled) name only the objects that
    mention it are parsed; any other query needs every kernel to resolve against."""
    compdb = find_compdb(source_dir, build_dir)
    if compdb is not None:
        entries = _cuda_entries(compdb)
        objects = [(e.output, e) for e in entries if e.output is not None and e.output.is_file()]
    else:
        entries = []
        objects = [(p, None) for p in _scan_objects(build_dir or source_dir)]
    index = ObjectIndex(objects, needle=kernel)
    if kernel not in index.kernels:
        index = ObjectIndex(objects)
    return index, compdb, entries


def _default_include_dirs(root: Path) -> list[Path]:
    """Without a compile command: the tree's root and its include/ directories."""
    dirs = [root]
    for dirpath, dirnames, _ in os.walk(root):
        dirnames[:] = [d for d in dirnames if not d.startswith(".") and not (Path(dirpath) / d / "CMakeCache.txt").exists()]
        if Path(dirpath).name == "include":
            dirs.append(Path(dirpath))
    return dirs


def _synthesized_command(tu: Path, include_dirs: list[Path]) -> list[str]:
    return ["nvcc", *(f"-I{d}" for d in include_dirs), "-x", "cu", "-c", str(tu), "-o", f"{tu.stem}.o"]


def _collect_files(tu: Path, root: Path, include_dirs: list[Path], line_files: list[Path]) -> list[Path]:
    files = [tu]
    for f in [*trace_includes(tu, root, include_dirs), *line_files]:
        if f not in files:
            files.append(f)
    return files


def _line_files(image: DeviceImage, kernel: str, root: Path, cwd: Path) -> list[Path] | None:
    names = cubinfo.line_table_files(cubinfo.open_elf(image.data, str(image.source)), kernel)
    if names is None:
        return None
    paths = [Path(os.path.normpath(cwd / n)).resolve() for n in names]
    return [p for p in paths if within(p, root) and p.is_file()]


def _pick(cands: list[_Candidate], kernel: str, arch: int | None, captured_cubin: bytes | None, notes: list[str]) -> tuple[_Candidate, str]:
    if arch is not None:
        same_arch = [c for c in cands if c.image.arch == arch]
        if same_arch:
            cands = same_arch
        else:
            built = ", ".join(sorted({f"sm_{c.image.arch}" for c in cands}))
            notes.append(f"the objects hold device code for {built}, the capture ran on sm_{arch}")
    objects = {c.image.source for c in cands}
    if len(objects) == 1:
        return cands[0], "exact"
    if captured_cubin is not None:
        same = [c for c in cands if c.image.data == captured_cubin]
        if not same:
            text = _text_of(captured_cubin, kernel)
            same = [c for c in cands if text is not None and _text_of(c.image.data, kernel) == text]
        if len({c.image.source for c in same}) == 1:
            notes.append(f"{len(objects)} objects define {kernel}; the captured cubin matches {same[0].image.source}")
            return same[0], "exact"
    notes.append(f"{len(objects)} objects define {kernel} ({', '.join(sorted(str(o) for o in objects))}); took the first")
    return cands[0], "likely"


def _text_of(data: bytes, kernel: str) -> bytes | None:
    try:
        section = cubinfo.open_elf(data, "cubin").get_section_by_name(f".text.{kernel}")
    except KerncapError:
        return None
    return section.data() if section is not None else None


def discover(
    kernel: str,
    source_dir: Path,
    build_dir: Path | None = None,
    *,
    arch: int | None = None,
    captured_cubin: bytes | None = None,
) -> Discovery:
    """Find the sources of `kernel` (mangled, or a name to resolve) under `source_dir`."""
    root = Path(source_dir).resolve()
    if not root.is_dir():
        raise SourcesNotFound(f"source directory {source_dir} does not exist", "pass the root of the application's source tree")
    if build_dir is not None and not Path(build_dir).is_dir():
        raise SourcesNotFound(f"build directory {build_dir} does not exist", "pass the directory holding compile_commands.json / the objects")
    build = Path(build_dir).resolve() if build_dir else None
    index, compdb, entries = build_index(root, build, kernel)
    kernel = index.resolve(kernel)
    notes = [f"could not read: {m}" for m in index.unreadable]

    cands = index.kernels.get(kernel, [])
    if cands:
        chosen, confidence = _pick(cands, kernel, arch, captured_cubin, notes)
        entry = chosen.entry
        if entry is not None:
            tu, cwd = entry.file.resolve(), entry.directory
            include_dirs = [d.resolve() for d in entry.include_dirs() if within(d.resolve(), root)]
            command, origin, method = entry.argv, "compile_commands.json", "nm+compile_commands"
            if entry.output is not None and tu.is_file() and tu.stat().st_mtime > entry.output.stat().st_mtime:
                notes.append(f"{tu} is newer than its object {entry.output}: the tree changed since the build")
                confidence = "likely"
        else:
            line = _line_files(chosen.image, kernel, root, root) or []
            tus = [f for f in line if f.suffix in TU_SUFFIXES]
            if not tus:
                raise SourcesNotFound(
                    f"{chosen.image.source} defines {kernel} but its device code has no line table naming a .cu file under {root}",
                    "rebuild with -lineinfo, or pass --build-dir with a compile_commands.json",
                )
            tu, cwd = tus[0], root
            include_dirs = _default_include_dirs(root)
            command, origin, method = _synthesized_command(tu, include_dirs), "synthesized", "dwarf"
            confidence = "likely"
            notes.append("no compile_commands.json: flags unknown, recompile uses nvcc defaults plus the tree's include dirs")
        if not within(tu, root):
            raise SourcesNotFound(f"{kernel} is defined by {tu}, outside the source directory {root}", f"pass --source-dir {tu.parent} or a directory above it")
        line_files = _line_files(chosen.image, kernel, root, cwd)
        if line_files is None:
            notes.append("no line table in the device code (build with -lineinfo to record the exact files)")
        return Discovery(
            kernel=kernel, source_root=root, translation_unit=tu,
            files=_collect_files(tu, root, include_dirs, line_files or []),
            compile_command=list(command), compile_command_origin=origin, cwd=cwd,
            include_dirs=include_dirs, method=method, confidence=confidence, notes=notes, object=chosen.image.source,
            line_files=line_files or [],
        )

    if compdb is not None:
        built = sum(1 for e in entries if e.output is not None and e.output.is_file())
        notes.append(f"{compdb}: no object of its {len(entries)} CUDA entries ({built} built) defines {kernel}")
    return _discover_by_grep(kernel, root, entries, notes)


def _discover_by_grep(kernel: str, root: Path, entries: list[CompileEntry], notes: list[str]) -> Discovery:
    name = base_name(kernel)
    hits = find_definitions(root, name)
    if not hits:
        why = library_reason(kernel)
        if why:
            raise SourcesNotFound(f"{kernel} is not a CUDA C++ kernel of this tree: {why}")
        raise SourcesNotFound(
            f"no __global__ definition of '{name}' under {root}" + (f" ({notes[-1]})" if notes else ""),
            "check --source-dir (it must be the application's tree), or build it with compile_commands.json and -lineinfo",
        )
    by_file = {e.file.resolve(): e for e in entries}
    confidence = "likely" if len(hits) == 1 else "guess"
    if len(hits) > 1:
        notes.append("several definitions of " + name + ": " + ", ".join(f"{h.file}:{h.line}" for h in hits))
    hit = next((h for h in hits if h.file.suffix in TU_SUFFIXES), hits[0])
    if hit.file.suffix in TU_SUFFIXES:
        tu = hit.file.resolve()
    else:
        units = [p.resolve() for p in iter_source_files(root) if p.suffix in TU_SUFFIXES]
        dirs = sorted({d.resolve() for e in entries for d in e.include_dirs() if within(d.resolve(), root)}) or _default_include_dirs(root)
        users = includers(hit.file, root, units, dirs)
        if not users:
            raise SourcesNotFound(
                f"'{name}' is defined in the header {hit.file}, which no .cu file under {root} includes",
                "pass the tree that compiles it as --source-dir",
            )
        users.sort(key=lambda u: u not in by_file)
        tu = users[0]
        confidence = "guess"
        notes.append(f"{hit.file} is a header; {len(users)} translation unit(s) include it, took {tu}")
    if hit.via_macro:
        notes.append(f"declared through the macro {hit.via_macro}")
    entry = by_file.get(tu)
    if entry is not None:
        include_dirs = [d.resolve() for d in entry.include_dirs() if within(d.resolve(), root)]
        command, origin, cwd = entry.argv, "compile_commands.json", entry.directory
    else:
        include_dirs = _default_include_dirs(root)
        command, origin, cwd = _synthesized_command(tu, include_dirs), "synthesized", root
        notes.append("no compile command for the TU: flags unknown, recompile uses nvcc defaults plus the tree's include dirs")
    if not is_mangled(kernel) and confidence == "likely":
        notes.append("matched by name only: overloads and template instances are not told apart")
    return Discovery(
        kernel=kernel, source_root=root, translation_unit=tu, files=_collect_files(tu, root, include_dirs, []),
        compile_command=list(command), compile_command_origin=origin, cwd=cwd, include_dirs=include_dirs,
        method="grep", confidence=confidence, notes=notes,
    )
