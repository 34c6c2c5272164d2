"""Recompiling a reproducer someone else made (docs/cli.md, "Untrusted reproducers").

source/build.json records the app's compile command, and a shared reproducer can
record anything. So `kerncap recompile` runs only the local CUDA toolkit's nvcc (never
a program the reproducer names), and reviews the recorded flags against an allow-list:
flags that load or run other programs (host-compiler plugins, a host compiler outside
the system's directories), read further options from a file (response files), or
write outside the reproducer (output and keep directories, dependency files through
the host compiler) are refused unless the user passes --trust after reading them.

Programs are found by absolute path only: nvcc is the local toolkit's, and every
program nvcc or kerncap starts (the host compiler `nvcc -dryrun` already runs to learn
its version, cicc, ptxas) is looked up on `search_path()`, the user's PATH without
relative entries (".": the recorded working directory would pick the program) and
without directories inside the reproducer. Flags naming files the compiler reads
(include directories, forced includes) pass only when those lie inside the reproducer,
the toolkit or the system's include directories.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from kerncap.errors import KerncapError

# nvcc options whose value may be the next word ("-I dir"), besides "-I=dir"/"-Idir".
VALUE_FLAGS = {
    "-I", "--include-path", "-isystem", "--system-include", "-include", "--pre-include", "-D", "--define-macro",
    "-U", "--undefine-macro", "-x", "--x", "-Xcompiler", "--compiler-options", "-Xptxas", "--ptxas-options",
    "-Xcudafe", "-Xfatbin", "--fatbin-options", "-ccbin", "--compiler-bindir", "-maxrregcount", "--maxrregcount",
    "-std", "--std", "-t", "--threads", "-default-stream", "--default-stream", "-split-compile", "--split-compile",
    "-split-compile-extended", "--split-compile-extended",
    "-diag-suppress", "--diag-suppress", "-diag-error", "--diag-error", "-diag-warn", "--diag-warn",
    "-odir", "--output-directory", "-keep-dir", "--keep-dir", "-optf", "--options-file", "-Xnvlink",
    "--nvlink-options", "-Xarchive", "--archive-options", "-ftz", "-prec-div", "-prec-sqrt", "-fmad",
}

# nvcc's own options that only shape the device code or the diagnostics.
_NVCC_SAFE = re.compile(r"""
    -D.* | -U.* | -I.* | --define-macro | --undefine-macro | --include-path | -isystem | --system-include
  | -include | --pre-include | -x | --x | -std | --std | -O[0-3s]? | --optimize | -dopt | --dopt
  | -g | --debug | -G | --device-debug | -lineinfo | --generate-line-info | -src-in-ptx | --source-in-ptx
  | -w | --disable-warnings | -W(?![lpa],).* | --Werror | -Werror | --display-error-number | -diag-\w+ | --diag-\w+
  | --expt-relaxed-constexpr | -expt-relaxed-constexpr | --expt-extended-lambda | -expt-extended-lambda
  | --extended-lambda | -extended-lambda | -use_fast_math | --use_fast_math | -ftz | --ftz | -prec-div
  | --prec-div | -prec-sqrt | --prec-sqrt | -fmad | --fmad | -maxrregcount | --maxrregcount
  | -forward-unknown-to-host-compiler | --forward-unknown-to-host-compiler
  | -forward-unknown-to-host-linker | --forward-unknown-to-host-linker | -restrict | --restrict
  | -default-stream | --default-stream | -t | --threads | -split-compile | --split-compile | -m64 | --machine
  | -res-usage | --resource-usage | -static-global-template-stub | --static-global-template-stub
  | -allow-unsupported-compiler | --allow-unsupported-compiler | -keep-device-functions | --keep-device-functions
  | -extra-device-vectorization | --extra-device-vectorization | -noeh | --no-exceptions
  | -compress-mode | --compress-mode | -compress-all | --compress-all | -jump-table-density
  | -lto | -dlto | --dlink-time-opt
  | -v | --verbose | -jobserver | --jobserver | -err-no | -no-err-no | --no-display-error-number
  | -split-compile-extended | --split-compile-extended
""", re.X)

# Host compiler options (through -Xcompiler, or forwarded as unknown options) that only
# shape code generation and diagnostics. Not: -fplugin (loads code), -B / -wrapper /
# -specs (pick other programs), -o / -M* / -Wp,... / -save-temps / -fdump* / -fprofile*
# (write files elsewhere), @file (reads options from a file).
_HOST_SAFE = re.compile(r"""
    -W(?![lpa],)[\w=+,.-]* | -O[0-3sgz]? | -O | -g[\w=-]* | -D.* | -U.* | -I.* | -isystem.* | -std=[\w+]+
  | -m[\w=.,+-]+ | -pthread | -fPIC | -fpic | -fPIE | -fpie | -w | -pedantic | -pedantic-errors | -ansi | -pipe
  | -f(?!plugin|profile|dump|auto-profile|coverage|save-|stack-usage|callgraph|record|debug-prefix|
        file-prefix|macro-prefix|opt-info|lto|ltrans|sanitize-|instrument|diagnostics-|deps|time-trace|
        crash|module|pch|prebuilt|pass-plugin|embed|compare-debug|opt-record|xray|profile)[\w=.,+-]*
""", re.X)

_NVCC_OUTPUTS = {"-odir", "--output-directory", "-keep-dir", "--keep-dir", "-keep", "--keep", "-save-temps",
                 "--save-temps", "-o", "--output-file", "-MF", "--dependency-output"}
_RESPONSE_FILES = {"-optf", "--options-file"}
_CCBIN = {"-ccbin", "--compiler-bindir"}
_HOST_OPTION_FLAGS = {"-Xcompiler", "--compiler-options"}
_PTXAS_FLAGS = {"-Xptxas", "--ptxas-options"}
# ptxas options that only shape code generation and diagnostics (anything else, e.g.
# --output-file=, --options-file=, --fdevice-time-trace=, -knob, needs --trust).
_PTXAS_SAFE = re.compile(r"""
    -v | --verbose | -w | --disable-warnings | -Werror | --Werror | -O[0-3] | --opt-level(=[0-3])?
  | -warn-spills | --warn-on-spills | -warn-lmem-usage | --warn-on-local-memory-usage
  | -warn-double-usage | --warn-on-double-precision-use | -lineinfo | --generate-line-info | -g | --device-debug
  | -dlcm=\w+ | --def-load-cache(=\w+)? | -dscm=\w+ | --def-store-cache(=\w+)? | -maxrregcount=\d+
  | --maxrregcount(=\d+)? | -allow-expensive-optimizations(=\w+)? | --allow-expensive-optimizations(=\w+)?
  | -disable-optimizer-consts | --disable-optimizer-constants | -sp-bounds-check | --sp-bounds-check
  | -suppress-stack-size-warning | --suppress-stack-size-warning | -suppress-async-bulk-multicast-advisory-warning
  | --suppress-async-bulk-multicast-advisory-warning | -suppress-double-demote-warning
  | --suppress-double-demote-warning | -fmad=\w+ | --fmad(=\w+)? | -preserve-relocs | --preserve-relocs
  | -c | --compile-only | -ewp | --extensible-whole-program | -pic | --position-independent-code(=\w+)?
  | -regUsageLevel=\d+ | --register-usage-level(=\d+)? | -arch=\w+ | --gpu-name(=\w+)? | -m64 | --machine(=64)?
  | \d+ | true | false
""", re.X)
_CUDAFE_SAFE = re.compile(r"--?(diag_\w+|display_error_number|no_display_error_number)(=[\w,]+)?")
# Where a system installs compilers: owned by root, outside any user's reach.
SYSTEM_PREFIXES = ("/usr/", "/bin/", "/opt/", "/sbin/")
DEFAULT_NVCC = "/usr/local/cuda/bin/nvcc"  # where the toolkit installs by default


class UntrustedCommand(KerncapError):
    """A recorded compile command with flags outside the allow-list (needs --trust)."""


def split(flags: list[str]) -> list[tuple[str, str | None, str]]:
    """(name, value, as written) per option: "-Ifoo", "-I foo", "-I=foo" -> ("-I", "foo", ...)."""
    out, i = [], 0
    while i < len(flags):
        arg = flags[i]
        name, eq, value = arg.partition("=")
        if len(arg) > 2 and arg[:2] in ("-I", "-D", "-U"):  # "-I/x=y" is the directory "/x=y"
            out.append((arg[:2], arg[3:] if arg[:3] == "-I=" else arg[2:], arg))
        elif eq:
            out.append((name, value, arg))
        elif arg in VALUE_FLAGS and i + 1 < len(flags):
            out.append((arg, flags[i + 1], f"{arg} {flags[i + 1]}"))
            i += 1
        else:
            out.append((arg, None, arg))
        i += 1
    return out


# Options naming a directory searched for headers, or a file read whole, by nvcc and by
# the host compiler (joined "-Idir", "-I=dir" or as the next word).
_INCLUDE_DIR_FLAGS = {"-I", "--include-path", "-isystem", "--system-include", "-iquote", "-idirafter", "-isysroot",
                      "--sysroot", "-iprefix", "-iwithprefix", "-iwithprefixbefore", "-cxx-isystem"}
_INCLUDE_FILE_FLAGS = {"-include", "--pre-include", "-imacros"}
_JOINED_DIR = re.compile(r"(-I|-isystem|-iquote|-idirafter|-isysroot|--sysroot=|-iprefix|-iwithprefixbefore"
                         r"|-iwithprefix|-cxx-isystem)(.+)")
# Where a system keeps the headers every compile may read.
SYSTEM_INCLUDE_DIRS = ("/usr/include", "/usr/local/include", "/usr/lib/gcc", "/usr/lib64/gcc", "/usr/libexec/gcc",
                       "/usr/lib/clang", "/usr/lib64/clang", "/usr/local/cuda", "/opt/nvidia", "/opt/cuda")


def include_dirs(flags: list[str], cwd: Path) -> list[Path]:
    """The directories `flags` make the compiler search for headers (relative ones from `cwd`)."""
    out = []
    for name, value, _ in split(flags):
        if name in _INCLUDE_DIR_FLAGS and value:
            out.append(Path(value) if os.path.isabs(value) else Path(cwd) / value)
    return out


def without_options(argv: list[str], texts: set[str]) -> list[str]:
    """`argv` less the options whose text as split() gives it (`-I/x`, or `-I /x` as two
    words) is in `texts`."""
    out, i = [], 0
    while i < len(argv):
        if argv[i] in texts:
            i += 1
            continue
        if i + 1 < len(argv) and f"{argv[i]} {argv[i + 1]}" in texts:
            i += 2
            continue
        out.append(argv[i])
        i += 1
    return out


def shadowed_include_dirs(flags: list[str], cwd: Path, source_root: str | None, copied: list[str]) -> set[str]:
    """The include options of `flags` (as split() writes them) that name an in-tree
    directory the reproducer holds a copy of (`copied`: build.json's include_dirs, relative
    to `source_root`): the copy stands first on the command line, so the original would be
    read only for a header the copy lacks, outside the reproducer."""
    if not source_root or not os.path.isabs(source_root):
        return set()
    root = os.path.normpath(source_root)
    mapped = {os.path.normpath(os.path.join(root, d)) for d in copied if not os.path.isabs(d)}
    out = set()
    for name, value, text in split(flags):
        if name in _INCLUDE_DIR_FLAGS and value:
            path = os.path.normpath(value if os.path.isabs(value) else os.path.join(cwd, value))
            if path in mapped:
                out.add(text)
    return out


def _within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


class ReadPlaces:
    """Where recorded flags may point the compiler for reading: the reproducer, the local
    toolkit, the system's include directories and `extra` (the original in-tree include
    directories the reproducer holds copies of). Relative paths are taken from `cwd`, the
    directory the compile runs in."""

    def __init__(self, reproducer: Path, cwd: Path | None = None, toolkit: Path | None = None,
                 extra: tuple[Path, ...] | list[Path] = ()):
        self.reproducer = os.path.realpath(reproducer)
        self.cwd = Path(cwd) if cwd is not None else Path(reproducer)
        roots = [self.reproducer, *SYSTEM_INCLUDE_DIRS, *(os.path.realpath(p) for p in extra)]
        if toolkit is not None:
            roots.append(os.path.realpath(toolkit))
        self.roots = roots

    def add(self, directories: list[Path]) -> None:
        """Let the compiler also read `directories` (the include directories recorded by this
        user's own extraction, kerncap.recompile.provenance)."""
        self.roots += [os.path.realpath(d) for d in directories]

    def outside(self, value: str) -> str | None:
        """The real path `value` names when it lies outside every allowed place (a path that
        does not exist reads nothing and passes)."""
        if not value or "\x00" in value:
            return value or "(empty)"
        path = value if os.path.isabs(value) else str(self.cwd / value)
        if not os.path.lexists(path):
            return None
        real = os.path.realpath(path)
        if any(_within(real, r) for r in self.roots) or real.startswith("/usr/lib/llvm-"):
            return None
        return real


def review(flags: list[str], reproducer: Path, places: ReadPlaces | None = None) -> list[str]:
    """Why each recorded flag outside the allow-list needs --trust; [] when none does.
    `flags` are the recorded ones kerncap keeps (kerncap.recompile.cuda.device_flags);
    `places` says where they may make the compiler read (default: the reproducer and the
    system's include directories)."""
    places = places or ReadPlaces(reproducer)
    problems = []
    for name, value, text in split(flags):
        if name.startswith("@"):
            problems.append(f"{text}: reads further options from a file (response file)")
        elif name in _RESPONSE_FILES:
            problems.append(f"{text}: reads further options from a file")
        elif name in _NVCC_OUTPUTS:
            problems.append(f"{text}: writes files outside the reproducer")
        elif name in _CCBIN:
            why = _host_compiler_problem(value or "", reproducer)
            if why:
                problems.append(f"{text}: {why}")
        elif name in _HOST_OPTION_FLAGS:
            bad, reads = _host_review(_host_options(value or ""), places)
            if bad:
                problems.append(f"{text}: host compiler option(s) {' '.join(bad)} may load or run other programs "
                                "or write files")
            problems += [f"{text}: {why}" for why in reads]
        elif name in _PTXAS_FLAGS:
            bad = [opt for opt in _host_options(value or "") if not _PTXAS_SAFE.fullmatch(opt)]
            if bad:
                problems.append(f"{text}: ptxas option(s) {' '.join(bad)} may read or write other files "
                                "(not an option kerncap knows to be harmless)")
        elif name == "-Xcudafe":
            if not all(_CUDAFE_SAFE.fullmatch(opt) for opt in (value or "").split(",")):
                problems.append(f"{text}: front-end options outside the allow-list")
        elif name in _INCLUDE_FILE_FLAGS or name in _INCLUDE_DIR_FLAGS:
            why = _read_problem(name, value, places)
            if why:
                problems.append(f"{text}: {why}")
        elif not name.startswith("-"):
            problems.append(f"{text}: an input other than the kernel's translation unit")
        elif not (_NVCC_SAFE.fullmatch(name) or _HOST_SAFE.fullmatch(text)):
            problems.append(f"{text}: not an option kerncap knows to be harmless")
        else:
            problems += [f"{text}: {why}" for why in _host_review([text], places)[1]]
    return problems


def _read_problem(name: str, value: str | None, places: ReadPlaces) -> str | None:
    if value is None:
        return "an include option without its path"
    real = places.outside(value)
    if real is None:
        return None
    what = "includes the file" if name in _INCLUDE_FILE_FLAGS else "searches headers in"
    return (f"{what} {real}, outside the reproducer, the CUDA toolkit and the system's include directories "
            "(the compiler would read it)")


def _host_review(options: list[str], places: ReadPlaces) -> tuple[list[str], list[str]]:
    """(options outside the allow-list, why include paths among them read outside):
    "-I/x", "-isystem/x", or "-include", "/x" as two options."""
    bad, reads = [], []
    i = 0
    while i < len(options):
        opt = options[i]
        if opt in _INCLUDE_FILE_FLAGS or opt in _INCLUDE_DIR_FLAGS:
            why = _read_problem(opt, options[i + 1] if i + 1 < len(options) else None, places)
            i += 1
        elif m := _JOINED_DIR.fullmatch(opt):
            why = _read_problem(m.group(1).rstrip("="), m.group(2).lstrip("="), places)
        else:
            why = None
            if not _HOST_SAFE.fullmatch(opt):
                bad.append(opt)
        if why:
            reads.append(why)
        i += 1
    return bad, reads


def _host_options(value: str) -> list[str]:
    """-Xcompiler's value: comma-separated options ("-Wall,-fPIC"), or one quoted string."""
    return [o for part in value.split(",") for o in part.split() if o]


def _host_compiler_problem(value: str, reproducer: Path) -> str | None:
    if not os.path.isabs(value):
        return "a host compiler given by a relative path (it could be a program inside the reproducer)"
    real = os.path.realpath(value)
    if _within(real, os.path.realpath(reproducer)):
        return "a host compiler inside the reproducer"
    if not real.startswith(SYSTEM_PREFIXES):
        return f"a host compiler outside the system's directories ({', '.join(SYSTEM_PREFIXES)})"
    holder = _inside_a_reproducer(real)
    if holder:  # e.g. another reproducer unpacked by root under /opt
        return f"a host compiler inside the kerncap reproducer {holder}"
    try:
        if os.stat(real).st_uid != 0:
            return f"a host compiler not owned by root ({real})"
    except OSError:
        return None  # missing: device_flags drops it and nvcc uses the one on PATH
    return None


def _inside_a_reproducer(path: str) -> str | None:
    """The kerncap reproducer (or unpack staging directory) a path lies in, if any."""
    for parent in Path(path).parents:
        if (parent / "capture" / "manifest.json").exists() or (parent / "reproducer.json").exists() \
                or ".partial-" in parent.name:
            return str(parent)
    return None


def search_path(reproducer: str | os.PathLike | None = None) -> str:
    """The user's PATH with only absolute directories outside the reproducer: which
    program a bare name means never depends on the working directory (a recorded cwd, an
    entry "." or "") or on what the reproducer holds."""
    root = os.path.realpath(reproducer) if reproducer is not None else None
    keep = [d for d in os.environ.get("PATH", os.defpath).split(os.pathsep)
            if d and os.path.isabs(d) and not (root and _within(os.path.realpath(d), root))]
    return os.pathsep.join(keep)


def tool_env(reproducer: str | os.PathLike | None = None, scratch: str | os.PathLike | None = None) -> dict[str, str]:
    """The environment kerncap runs nvcc and its steps in: the user's, PATH as
    `search_path`, and TMPDIR `scratch` (a directory kerncap removes afterwards,
    kerncap.core.fsio.scratch: nvcc's and cicc's temporary files land there, not in /tmp)."""
    env = {**os.environ, "PATH": search_path(reproducer)}
    if scratch is not None:
        env["TMPDIR"] = str(scratch)
    return env


def local_nvcc(recorded: str, reproducer: str | os.PathLike | None = None) -> str:
    """The absolute path of this machine's CUDA toolkit's nvcc: KERNCAP_NVCC,
    $CUDA_HOME/bin/nvcc, $CUDA_PATH/bin/nvcc, nvcc on `search_path` or
    /usr/local/cuda/bin/nvcc. The recorded path only picks among those (the same toolkit
    the app was built with); it is never run itself, wherever it lies or whoever owns it."""
    override = os.environ.get("KERNCAP_NVCC")
    if override:  # the user's own environment: trusted
        if not Path(override).is_file():
            raise KerncapError(f"KERNCAP_NVCC={override} does not exist", "point it at the CUDA toolkit's bin/nvcc")
        return os.path.abspath(override)
    if Path(recorded).name != "nvcc":
        raise KerncapError(
            f"the kernel was compiled by {recorded}; kernel-only recompile drives nvcc",
            "set KERNCAP_NVCC to an nvcc of the same CUDA version",
        )
    local = [os.path.join(os.environ[v], "bin", "nvcc") for v in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(v)]
    local.append(shutil.which("nvcc", path=search_path(reproducer)) or "")
    local.append(DEFAULT_NVCC)
    local = [p for p in local if p and os.path.isabs(p) and os.path.isfile(p) and os.access(p, os.X_OK)]
    if os.path.isabs(recorded):
        same = [p for p in local if os.path.realpath(p) == os.path.realpath(recorded)]
        if same:
            return same[0]
    if local:
        return local[0]
    raise KerncapError(
        f"nvcc not found: no CUDA toolkit here (KERNCAP_NVCC, CUDA_HOME, CUDA_PATH, PATH, /usr/local/cuda); "
        f"the recorded compiler {recorded} is never run",
        "put the CUDA toolkit's bin directory on PATH (e.g. export PATH=/usr/local/cuda/bin:$PATH) or set KERNCAP_NVCC",
    )


def resolve_program(name: str, path: str | None) -> str | None:
    """The absolute path of the program `name` (a path, or a bare name looked up on
    `path` with its relative entries ignored), or None."""
    if os.path.isabs(name):
        return name if os.path.isfile(name) else None
    if "/" in name:
        return None  # relative to whichever directory it runs in: never
    absolute = os.pathsep.join(d for d in (path or "").split(os.pathsep) if d and os.path.isabs(d))
    return shutil.which(name, path=absolute)


def directs_files(flags: list[str]) -> bool:
    """Whether the flags tell nvcc where to keep or write files (allowed only with
    --trust): nvcc then runs as one step, as recorded, instead of kerncap running its
    steps in a private directory (kerncap.recompile.devcompile.build)."""
    return any(name in _NVCC_OUTPUTS for name, _, _ in split(flags))


def review_steps(nvcc: str, programs: dict[str, str | None], reproducer: Path) -> list[str]:
    """Why a program the local nvcc's dry run names for a step needs --trust (kerncap runs
    nvcc's steps itself, kerncap.recompile.devcompile.phases): cicc and ptxas must be
    those of the toolkit `nvcc` belongs to; the host compiler that preprocesses must not
    lie inside the reproducer or another one (nvcc picks it as it would for its own run:
    -ccbin, already reviewed, or `search_path`). `programs`: step kind -> the program's
    absolute path as `resolve_program` found it (None: not found by absolute path)."""
    root = os.path.realpath(os.path.dirname(os.path.dirname(os.path.realpath(nvcc))))  # <toolkit>/bin/nvcc
    problems = []
    for kind, exe in programs.items():
        if exe is None or not os.path.isabs(exe):
            problems.append(f"{kind} step: its program is not found by an absolute path")
            continue
        real = os.path.realpath(exe)
        if kind in ("cicc", "ptxas"):
            if not _within(real, root):
                problems.append(f"{kind} {exe}: not part of the CUDA toolkit of {nvcc} ({root})")
        elif _within(real, os.path.realpath(reproducer)):
            problems.append(f"{kind} step {exe}: a program inside the reproducer")
        elif holder := _inside_a_reproducer(real):
            problems.append(f"{kind} step {exe}: a program inside the kerncap reproducer {holder}")
    return problems


def require_trusted_sources(problems: list[str], source: Path) -> None:
    """Refuse sources whose #include directives read outside (kerncap.recompile.inputs),
    naming each, unless the caller was given --trust."""
    if problems:
        listing = "\n".join(f"  {p}" for p in problems)
        raise UntrustedCommand(
            f"the sources in {source} include files kerncap cannot confine to the reproducer:\n{listing}",
            "read them; if you trust this reproducer, run `kerncap recompile DIR --trust` (or edit the source)",
        )


def require_trust(problems: list[str], command: list[str], build_json: Path) -> None:
    """Refuse, naming every flag, unless the caller was given --trust."""
    if problems:
        listing = "\n".join(f"  {p}" for p in problems)
        raise UntrustedCommand(
            f"the compile command recorded in {build_json} has flags outside kerncap's allow-list:\n{listing}\n"
            f"command: {' '.join(command)}",
            "read them; if you trust this reproducer, run `kerncap recompile DIR --trust` (or edit source/build.json)",
        )
