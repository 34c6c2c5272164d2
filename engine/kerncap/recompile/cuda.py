"""Kernel-only recompile: the reproducer's edited source -> a cubin for the captured GPU.

Compiles like `nvcc -cubin -arch=sm_XX` with the original compile flags (minus -c/-o/
-M*/-gencode/... ) in the original working directory, with `-I<reproducer>/source/<dir>`
for each in-tree include directory placed first so the edited copies shadow the
originals. nvcc's steps are run one by one (kerncap.recompile.devcompile): the translation unit is
reduced to what the captured kernel needs when it can be, and the front end gets the
captured module id so internal-linkage names come out as captured. The result lands in
`<reproducer>/variants/<n>.cubin` only after it is checked: it must define the captured
(mangled) kernel with the captured parameter layout (offsets and sizes from
`.nv.info.<kernel>` EIATTR_KPARAM_INFO).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from kerncap.core.fsio import fs_error, remove_dead_temps, remove_quietly, temp_name
from kerncap.core.schema import check
from kerncap.errors import KerncapError
from kerncap.recompile.devcompile.build import Request, compile_cubin
from kerncap.recompile import provenance
from kerncap.recompile.devcompile.module_id import compiler_constant, object_names
from kerncap.recompile.inputs import check_tree, include_problems
from kerncap.recompile.trust import (ReadPlaces, include_dirs, local_nvcc, require_trust, require_trusted_sources,
                                     review, shadowed_include_dirs, without_options)
from kerncap.reproducer.editable import RECORDS
from kerncap.reproducer.format import Capture, read_json
from kerncap.reproducer.schemas import BUILD_JSON as BUILD_JSON_SCHEMA
from kerncap.reproducer.variants import VARIANTS, RecompileResult, publish_variant, record_reach, variants_dir
from kerncap.sources import cubin as cubinfo
from kerncap.sources.attach import BUILD_JSON, capture_arch
from kerncap.sources.names import demangle_all

_LAUNCHERS = {"ccache", "sccache", "distcc", "icecc"}
# flags dropped, with how many values follow them when spelled as separate words
_DROP_WITH_VALUE = {"-o", "--output-file", "-MF", "-MT", "-MQ", "--dependency-output", "-gencode", "--generate-code",
                    "-arch", "--gpu-architecture", "-code", "--gpu-code", "-rdc", "--relocatable-device-code",
                    "-Xlinker", "--linker-options", "-l", "--library", "-L", "--library-path",
                    # options of the steps a -cubin compile never runs (device link, archiver, fatbinary)
                    "-Xnvlink", "--nvlink-options", "-Xarchive", "--archive-options", "-Xfatbin", "--fatbin-options"}
_DROP = {"-c", "--compile", "-M", "-MM", "-MD", "-MMD", "-MP", "-dc", "--device-c", "-dw", "--device-w", "-dlink",
         "--device-link", "-link", "-lib", "-cubin", "--cubin", "-ptx", "--ptx", "-fatbin", "--fatbin",
         "-E", "--preprocess", "-generate-dependencies", "--generate-dependencies",
         "--generate-nonsystem-dependencies", "--generate-dependencies-with-compile",
         "--generate-nonsystem-dependencies-with-compile",
         # make's jobserver is not there when kerncap compiles: ptxas warns, and -Werror fails the build
         "-jobserver", "--jobserver"}


def _load_build(repro: Path) -> dict:
    path = repro / "source" / BUILD_JSON
    if not os.path.lexists(path):  # anything else there (a FIFO, a directory) is named by read_json
        raise KerncapError(
            f"{repro} has no editable CUDA source ({path} is missing)",
            "extract with `kerncap extract ... --source-dir <app tree>` to get one",
        )
    build = read_json(path, 16 << 20, "", "restore source/build.json from a copy of the reproducer, or extract again")
    check(build, BUILD_JSON_SCHEMA, path, "restore source/build.json from a copy of the reproducer, or extract again")
    return build


def arch_flag(build: dict, capture: Capture, argv: list[str]) -> str:
    """sm_XX of the captured GPU, keeping an `a`/`f` suffix the original build used."""
    cc = capture_arch(capture)
    if cc is None:
        recorded = build.get("arch")
        if not recorded:
            raise KerncapError("the capture does not record the GPU's compute capability, nor does source/build.json",
                               "extract again with a current kerncap")
        return recorded
    text = " ".join(argv)
    for suffix in ("a", "f"):
        if f"sm_{cc}{suffix}" in text or f"compute_{cc}{suffix}" in text:
            return f"sm_{cc}{suffix}"
    return f"sm_{cc}"


def device_flags(argv: list[str], tu_original: Path, cwd: Path) -> list[str]:
    """The original flags without the compiler, the source, outputs, deps and arch/mode flags."""
    kept: list[str] = []
    i = 1
    while i < len(argv):
        arg = argv[i]
        name = arg.split("=", 1)[0]
        if arg in _DROP or name in _DROP:
            i += 1
            continue
        if arg in _DROP_WITH_VALUE:
            i += 2
            continue
        if name in _DROP_WITH_VALUE or _is_joined_drop(arg):
            i += 1
            continue
        if not arg.startswith("-") and Path(os.path.normpath(cwd / arg)) == tu_original:
            i += 1
            continue
        kept.append(arg)
        i += 1
    return _drop_missing_host_compiler(kept)


_CCBIN = ("-ccbin", "--compiler-bindir")


def _drop_missing_host_compiler(flags: list[str]) -> list[str]:
    """A reproducer moved to another machine (the bundled demo, a shipped capture) names a
    host compiler that is not there; nvcc then uses the one on PATH instead."""
    out: list[str] = []
    i = 0
    while i < len(flags):
        arg = flags[i]
        name, eq, value = arg.partition("=")
        if name in _CCBIN:
            if not eq:  # "-ccbin PATH"
                value = flags[i + 1] if i + 1 < len(flags) else ""
                step = 2
            else:
                step = 1
            if value and not Path(value).exists():
                i += step
                continue
            out.extend(flags[i:i + step])
            i += step
            continue
        out.append(arg)
        i += 1
    return out


def read_places(build: dict, repro: Path, cwd: Path, compiler: str) -> ReadPlaces:
    """Where the recorded flags may make the compiler read: the reproducer, the local
    toolkit, the system's headers, and the app's in-tree include directories (build.json's
    `include_dirs` under `source_root`: the reproducer's copies of what the kernel includes
    from there come first on the command line; searching a directory reads only what the
    source itself names)."""
    root = Path(build.get("source_root") or "/nonexistent")
    extra = [root / d for d in build.get("include_dirs", [])
             if root.is_absolute() and not Path(d).is_absolute() and ".." not in Path(d).parts]
    return ReadPlaces(repro, cwd=cwd, toolkit=Path(os.path.realpath(compiler)).parent.parent, extra=extra)


def _is_joined_drop(arg: str) -> bool:
    """-MFdeps.d, -Lpath, -lfoo (but not nvcc's own -lineinfo / -lto)."""
    if arg.startswith(("-MF", "-MT", "-MQ", "-L")):
        return True
    return arg.startswith("-l") and arg not in ("-lineinfo", "-lto", "-l")


def _require_globals(capture, data: bytes) -> None:
    """A reduced cubin holds every module global the replay restores (the compiler's own
    constants aside: a variant keeps its own, module_id.compiler_constant)."""
    missing = sorted({g.name for g in capture.globals if not compiler_constant(g.name)} - (object_names(data) or set()))
    if missing:
        raise KerncapError(f"it lacks module global {missing[0]}"
                           + (f" and {len(missing) - 1} more" if len(missing) > 1 else ""))


def recompile(reproducer_dir: str | Path, *, trust: bool = False, mode: str = "auto", split: bool = False) -> RecompileResult:
    """Rebuild the CUDA C++ kernel of the reproducer into variants/<n>.cubin with the local
    toolkit's nvcc: `mode` "auto" compiles the translation unit reduced to what the
    captured kernel needs (kerncap.recompile.devcompile), else the whole unit; "reduced"
    never falls back; "full" compiles the whole unit. Recorded flags outside the
    allow-list (kerncap.recompile.trust) are refused unless `trust`; so are compile steps
    nvcc would run outside the local toolkit. `split`: build.Request.split."""
    repro = Path(reproducer_dir).resolve()
    build = _load_build(repro)
    capture = Capture.open(repro)
    kernel = capture.kernel["name"]
    argv = list(build["compile_command"])
    while argv and Path(argv[0]).name in _LAUNCHERS:
        argv = argv[1:]
    if not argv:
        raise KerncapError(f"{repro / 'source' / BUILD_JSON} holds an empty compile command", "extract again")
    source = repro / "source"
    files = check_tree(source, repro)  # no link out, FIFO or device reaches the compiler
    tu_copy = source / build["tu"]
    if not tu_copy.is_file():
        raise KerncapError(f"the translation unit {tu_copy} is missing", "restore it (the original is under " + build.get("source_root", "?") + ")")
    cwd = Path(build["cwd"])
    tu_original = Path(build.get("source_root", "")) / build["tu"]
    compiler = local_nvcc(argv[0], repro)
    if not cwd.is_absolute() or not cwd.is_dir():
        cwd = source  # the original build dir is gone: in-tree -I dirs are remapped below anyway
    flags = device_flags(argv, tu_original, Path(build["cwd"]))
    # the app's in-tree include directories the reproducer holds copies of: only the copies
    flags = without_options(flags, shadowed_include_dirs(flags, Path(build["cwd"]), build.get("source_root"),
                                                         build.get("include_dirs", [])))
    variants = repro / VARIANTS
    tmp = temp_name(variants / "variant.cubin")  # numbered only once it is checked (publish_variant)
    shadow = [f"-I{source / d}" for d in build.get("include_dirs", [])]
    nvcc = [compiler, *shadow, *flags, f"-arch={arch_flag(build, capture, argv)}"]
    command = [*nvcc, "-cubin", "-o", str(tmp), str(tu_copy)]
    if not trust:  # before anything runs or is written
        places = read_places(build, repro, cwd, compiler)
        if provenance.verify(repro, build) is None:  # this user's own extraction: its app's include directories
            places.add(include_dirs(flags, cwd))
        require_trust(review(flags, repro, places), command, source / BUILD_JSON)
        sources = [f for f in files if f.name not in RECORDS]
        require_trusted_sources(include_problems(sources, places, include_dirs(shadow + flags, cwd)), source)
    variants_dir(repro)  # a real directory, not a link out of the reproducer
    cleaned = [left.removed() for left in remove_dead_temps(variants)]  # what a killed recompile left
    try:  # fail on a read-only or full location now, not after a long compile
        tmp.write_bytes(b"")
    except OSError as exc:
        remove_quietly(tmp)
        raise fs_error(exc, f"write into {variants}") from None

    def accept(data: bytes, how: str) -> None:
        if not data:
            raise KerncapError(f"{compiler} exited with status 0 but wrote no cubin for {tu_copy}",
                               "check the toolkit (KERNCAP_NVCC, CUDA_HOME, PATH)")
        check_cubin(data, kernel, capture, str(tu_copy))
        if how == "reduced":  # the reduction must not lose a module global the replay restores
            _require_globals(capture, data)

    start = time.perf_counter()
    captured = _captured_cubin(capture)  # read once: its symbols now, its machine code after
    try:
        built = compile_cubin(Request(nvcc=nvcc, tu=tu_copy, cwd=cwd, user_root=source, kernel=kernel,
                                      captured_names=_captured_symbols(capture, captured), accept=accept, mode=mode,
                                      trust=trust, reproducer=repro, split=split))
        seconds = time.perf_counter() - start
        tmp.write_bytes(built.cubin)
        final = publish_variant(tmp, variants)
        record_reach(final, built.cubin, kernel, built.reach)
    except OSError as exc:
        remove_quietly(tmp)
        raise fs_error(exc, f"write a variant into {variants}") from None
    except BaseException:  # a compile error, Ctrl-C: no temp cubin stays in variants/
        remove_quietly(tmp)
        raise
    summary = built.summary
    if _same_machine_code(built.cubin, captured, kernel):
        summary = (summary + "; " if summary else "") + "the kernel's machine code is identical to the captured one"
    return RecompileResult(cubin=final, seconds=seconds, command=command, log=built.log, mode=built.mode,
                           phases=built.timing.as_dict(), notes=[*cleaned, *built.notes], summary=summary)

def _captured_cubin(capture: Capture) -> bytes | None:
    try:
        return capture.cubin_path.read_bytes()
    except OSError:
        return None


def _same_machine_code(data: bytes, captured: bytes | None, kernel: str) -> bool:
    """The kernel's `.text` equals the captured cubin's (an unmodified or reverted source
    compiled as the app's build did)."""
    if captured is None:
        return False
    try:
        ours = cubinfo.section_data(data, f".text.{kernel}", "the variant")
        return ours is not None and ours == cubinfo.section_data(captured, f".text.{kernel}", "the captured cubin")
    except KerncapError:
        return False


def _captured_symbols(capture: Capture, captured: bytes | None) -> list[str]:
    """Symbol names of the captured cubin (they carry the TU's module id), or the
    capture's global names when the cubin cannot be read."""
    names = [g.name for g in capture.globals]
    if captured is not None:
        try:
            names += cubinfo.symbol_names(captured, str(capture.cubin_path))
        except KerncapError:
            pass
    return names


def check_cubin(data: bytes, kernel: str, capture: Capture, source: str) -> None:
    """The cubin defines `kernel` with the captured parameter offsets and sizes."""
    elf = cubinfo.open_elf(data, f"the cubin built from {source}")
    defined = cubinfo.kernel_names(elf)
    if kernel not in defined:
        shown = demangle_all(sorted(defined))
        listing = ", ".join(f"{n} ({shown[n]})" if shown[n] != n else n for n in sorted(defined)) or "none"
        raise KerncapError(
            f"the edited source no longer defines {kernel}: did the signature change? ({source} now defines: {listing})",
            "keep the kernel's name and parameter list as captured; the replay passes the captured arguments",
        )
    built = [(s.offset, s.size) for s in cubinfo.param_layout(elf, kernel) or []]
    captured = [(p.offset, p.size) for p in sorted(capture.params, key=lambda p: p.index)]
    if captured and built != captured:
        raise KerncapError(
            f"the parameters of {kernel} in the recompiled cubin no longer match the capture: "
            f"captured (offset, size) {captured}, built {built}",
            "the replay passes the captured argument bytes; restore the captured parameter list",
        )
