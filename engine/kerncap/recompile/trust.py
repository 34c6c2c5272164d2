"""Recompiling a reproducer someone else made (docs/cli.md, "Untrusted reproducers").

source/build.json records the app's compile command, and a shared reproducer can
record anything. So `kerncap recompile` runs only the local CUDA toolkit's nvcc (never
a program the reproducer names), and reviews the recorded flags against an allow-list:
flags that load or run other programs (host-compiler plugins, a host compiler outside
the system's directories), read further options from a file (response files), or
write outside the reproducer (output and keep directories, dependency files through
the host compiler) are refused unless the user passes --trust after reading them.
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
  | -extra-device-vectorization | --extra-device-vectorization | -noeh | --no-exceptions | -Xfatbin
  | --fatbin-options | -compress-mode | --compress-mode | -compress-all | --compress-all | -jump-table-density
  | -lto | -dlto | --dlink-time-opt | -Xnvlink | --nvlink-options | -Xarchive | --archive-options
""", re.X)

# Host compiler options (through -Xcompiler, or forwarded as unknown options) that only
# shape code generation and diagnostics. Not: -fplugin (loads code), -B / -wrapper /
# -specs (pick other programs), -o / -M* / -Wp,... / -save-temps / -fdump* / -fprofile*
# (write files elsewhere), @file (reads options from a file).
_HOST_SAFE = re.compile(r"""
    -W(?![lpa],)[\w=+,.-]* | -O[0-3sgz]? | -O | -g[\w=-]* | -D.* | -U.* | -I.* | -isystem.* | -std=[\w+]+
  | -m[\w=.,+-]+ | -pthread | -fPIC | -fpic | -fPIE | -fpie | -w | -pedantic | -pedantic-errors | -ansi | -pipe
  | -f(?!plugin|profile|dump|auto-profile|coverage|save-|stack-usage|callgraph|record|debug-prefix|
        file-prefix|macro-prefix|opt-info|lto|ltrans|sanitize-coverage|instrument|diagnostics-format)[\w=.,+-]*
""", re.X)

_NVCC_OUTPUTS = {"-odir", "--output-directory", "-keep-dir", "--keep-dir", "-keep", "--keep", "-save-temps",
                 "--save-temps", "-o", "--output-file", "-MF", "--dependency-output"}
_RESPONSE_FILES = {"-optf", "--options-file"}
_CCBIN = {"-ccbin", "--compiler-bindir"}
_HOST_OPTION_FLAGS = {"-Xcompiler", "--compiler-options"}
_PTXAS_FLAGS = {"-Xptxas", "--ptxas-options"}
_PTXAS_UNSAFE = re.compile(r"-o|--output-file|--options-file|-optf|@.*")
_CUDAFE_SAFE = re.compile(r"--?(diag_\w+|display_error_number|no_display_error_number)(=[\w,]+)?")
# Where a system installs compilers: owned by root, outside any user's reach.
SYSTEM_PREFIXES = ("/usr/", "/bin/", "/opt/", "/sbin/")


class UntrustedCommand(KerncapError):
    """A recorded compile command with flags outside the allow-list (needs --trust)."""


def split(flags: list[str]) -> list[tuple[str, str | None, str]]:
    """(name, value, as written) per option: "-Ifoo", "-I foo", "-I=foo" -> ("-I", "foo", ...)."""
    out, i = [], 0
    while i < len(flags):
        arg = flags[i]
        name, eq, value = arg.partition("=")
        if eq:
            out.append((name, value, arg))
        elif arg in VALUE_FLAGS and i + 1 < len(flags):
            out.append((arg, flags[i + 1], f"{arg} {flags[i + 1]}"))
            i += 1
        elif len(arg) > 2 and arg[:2] in ("-I", "-D", "-U") and arg[1].isupper():
            out.append((arg[:2], arg[2:], arg))
        else:
            out.append((arg, None, arg))
        i += 1
    return out


def review(flags: list[str], reproducer: Path) -> list[str]:
    """Why each recorded flag outside the allow-list needs --trust; [] when none does.
    `flags` are the recorded ones kerncap keeps (kerncap.recompile.cuda.device_flags)."""
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
            bad = [opt for opt in _host_options(value or "") if not _HOST_SAFE.fullmatch(opt)]
            if bad:
                problems.append(f"{text}: host compiler option(s) {' '.join(bad)} may load or run other programs "
                                "or write files")
        elif name in _PTXAS_FLAGS:
            bad = [opt for opt in (value or "").split(",") if _PTXAS_UNSAFE.fullmatch(opt.strip())]
            if bad:
                problems.append(f"{text}: ptxas option(s) {' '.join(bad)} read or write other files")
        elif name == "-Xcudafe":
            if not all(_CUDAFE_SAFE.fullmatch(opt) for opt in (value or "").split(",")):
                problems.append(f"{text}: front-end options outside the allow-list")
        elif not name.startswith("-"):
            problems.append(f"{text}: an input other than the kernel's translation unit")
        elif not (_NVCC_SAFE.fullmatch(name) or _HOST_SAFE.fullmatch(text)):
            problems.append(f"{text}: not an option kerncap knows to be harmless")
    return problems


def _host_options(value: str) -> list[str]:
    """-Xcompiler's value: comma-separated options ("-Wall,-fPIC"), or one quoted string."""
    return [o for part in value.split(",") for o in part.split() if o]


def _host_compiler_problem(value: str, reproducer: Path) -> str | None:
    if not os.path.isabs(value):
        return "a host compiler given by a relative path (it could be a program inside the reproducer)"
    real = os.path.realpath(value)
    if Path(real).is_relative_to(reproducer.resolve()):
        return "a host compiler inside the reproducer"
    if not real.startswith(SYSTEM_PREFIXES):
        return f"a host compiler outside the system's directories ({', '.join(SYSTEM_PREFIXES)})"
    try:
        if os.stat(real).st_uid != 0:
            return f"a host compiler not owned by root ({real})"
    except OSError:
        return None  # missing: device_flags drops it and nvcc uses the one on PATH
    return None


def local_nvcc(recorded: str) -> str:
    """The nvcc of this machine's CUDA toolkit. The recorded path is used only when it is
    a toolkit's nvcc installed in the system's directories or the local toolkit's own;
    otherwise KERNCAP_NVCC, $CUDA_HOME/bin/nvcc, $CUDA_PATH/bin/nvcc, or nvcc on PATH."""
    override = os.environ.get("KERNCAP_NVCC")
    if override:  # the user's own environment: trusted
        if not Path(override).is_file():
            raise KerncapError(f"KERNCAP_NVCC={override} does not exist", "point it at the CUDA toolkit's bin/nvcc")
        return override
    if Path(recorded).name != "nvcc":
        raise KerncapError(
            f"the kernel was compiled by {recorded}; kernel-only recompile drives nvcc",
            "set KERNCAP_NVCC to an nvcc of the same CUDA version",
        )
    local = [str(Path(os.environ[v]) / "bin" / "nvcc") for v in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(v)]
    local = [p for p in local if Path(p).is_file()]
    on_path = shutil.which("nvcc")
    if on_path:
        local.append(on_path)
    if os.path.isabs(recorded) and Path(recorded).is_file():
        real = os.path.realpath(recorded)
        if real in {os.path.realpath(p) for p in local} or (real.startswith(SYSTEM_PREFIXES) and _root_owned(real)):
            return recorded  # the same toolkit the app was built with
    if local:
        return local[0]
    raise KerncapError(
        f"nvcc not found: the original compiler {recorded} is not there and there is no nvcc on PATH",
        "put the CUDA toolkit's bin directory on PATH (e.g. export PATH=/usr/local/cuda/bin:$PATH) or set KERNCAP_NVCC",
    )


def directs_files(flags: list[str]) -> bool:
    """Whether the flags tell nvcc where to keep or write files (allowed only with
    --trust): nvcc then runs as one step, as recorded, instead of kerncap running its
    steps in a private directory (kerncap.recompile.devcompile.build)."""
    return any(name in _NVCC_OUTPUTS for name, _, _ in split(flags))


def review_steps(nvcc: str, programs: dict[str, str], reproducer: Path) -> list[str]:
    """Why a program the local nvcc's dry run names for a step needs --trust (kerncap runs
    nvcc's steps itself, kerncap.recompile.devcompile.phases): cicc and ptxas must be
    those of the toolkit `nvcc` belongs to; the host compiler that preprocesses must not
    lie inside the reproducer (nvcc picks it as it would for its own run: -ccbin, already
    reviewed, or PATH). `programs`: step kind -> the program's path as nvcc finds it."""
    root = Path(os.path.realpath(nvcc)).parent.parent  # <toolkit>/bin/nvcc
    problems = []
    for kind, exe in programs.items():
        real = os.path.realpath(exe)
        if kind in ("cicc", "ptxas"):
            if not Path(real).is_relative_to(root):
                problems.append(f"{kind} {exe}: not part of the CUDA toolkit of {nvcc} ({root})")
        elif Path(real).is_relative_to(reproducer.resolve()):
            problems.append(f"{kind} step {exe}: a program inside the reproducer")
    return problems


def _root_owned(path: str) -> bool:
    try:
        return os.stat(path).st_uid == 0
    except OSError:
        return False


def require_trust(problems: list[str], command: list[str], build_json: Path) -> None:
    """Refuse, naming every flag, unless the caller was given --trust."""
    if problems:
        listing = "\n".join(f"  {p}" for p in problems)
        raise UntrustedCommand(
            f"the compile command recorded in {build_json} has flags outside kerncap's allow-list:\n{listing}\n"
            f"command: {' '.join(command)}",
            "read them; if you trust this reproducer, run `kerncap recompile DIR --trust` (or edit source/build.json)",
        )
