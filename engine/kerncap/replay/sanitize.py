"""compute-sanitizer on one replayed launch: `kerncap validate DIR [--cubin V] --sanitize [TOOL]`.

A fresh replay server runs under `compute-sanitizer --tool TOOL`; its `validate` request
restores the pre-state, launches the kernel once and compares on the GPU (kerncap's
compare kernels run under the tool too). The tool's report is read back and every error
attributed: to the kernel that was replayed (with file:line when the cubin has line
info), to kerncap's own kernels, or to a host API call of the replay process. A host
API error that follows a kernel's fault (the failed synchronize) belongs to that fault;
any other is an error of kerncap's host path, which must have none.
"""

from __future__ import annotations

import os
import re
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from kerncap.core.option import Option, check_fields
from kerncap.reproducer.format import Capture, reproducer_dir
from kerncap.reproducer.variants import variants_dir
from kerncap.sources.names import base_name
from kerncap.errors import AddressUnavailable, KerncapError
from kerncap.replay.tools import (
    Cancellation,
    load_result,
    save_result,
    Cancelled,
    ToolTimeout,
    ToolRun,
    artifact_stem,
    cubin_label,
    find_tool,
)

SANITIZE_FORMAT = "kerncap-sanitize"
TOOLS = ("memcheck", "racecheck", "initcheck", "synccheck")
DEFAULT_TIMEOUT = 600.0
OWN_KERNEL_PREFIX = "kc_cmp_"  # kerncap's compare kernels (native/replay/compare_kernels.cu)
# Driver errors a faulting kernel leaves behind (see kerncap.replay.server.STICKY_CUDA_ERRORS).
FAULT_CODES = {700, 702, 709, 710, 714, 715, 716, 717, 718, 719, 999}

SANITIZE_CUBIN = Option("cubin", "--cubin", str, None, "a variant cubin (none: the captured one)", metavar="V",
                        nullable=True)
SANITIZE_TOOL = Option("tool", "--tool", str, "memcheck", "compute-sanitizer's tool", choices=TOOLS)
SANITIZE_TIMEOUT = Option("timeout", "--timeout", float, DEFAULT_TIMEOUT, "kill the sanitizer and the replay after S "
                          "seconds", above=0.0, metavar="S", mcp_name="timeout_s")


@dataclass(frozen=True)
class SanitizeRequest:
    """One validation launch of the captured kernel (or the `cubin` variant) under
    compute-sanitizer's `tool`: `kerncap sanitize` and MCP's `sanitize` (kerncap.frontends.verbs)."""

    cubin: str | None = SANITIZE_CUBIN.field()
    tool: str = SANITIZE_TOOL.field()
    timeout: float = SANITIZE_TIMEOUT.field()

    def checked(self) -> SanitizeRequest:
        check_fields(self)
        return self


_PREFIX = re.compile(r"^=========(?: |$)")
_SUMMARY = re.compile(r"ERROR SUMMARY: ([\d,]+) errors?")
_RACE_SUMMARY = re.compile(r"RACECHECK SUMMARY: ([\d,]+) hazards? displayed \(([\d,]+) errors?")
_API = re.compile(r'Program hit (\w+) \(error (\d+)\) due to "([^"]*)" on CUDA API call to (\w+)')
# "at kernel(args)+0x1b0 in /path/file.cu:12" (compute-sanitizer) or
# "at 0x1b0 in /path/file.cu:12:kernel(args)" (older cuda-memcheck layout)
_AT_NEW = re.compile(r"\bat (.+?)\+0x[0-9a-fA-F]+(?: in (.+?):(\d+))?\s*$")
_AT_OLD = re.compile(r"\bat 0x[0-9a-fA-F]+ in (?:(.+?):(\d+):)?(.+?)\s*$")
_SKIP_HEADS = ("COMPUTE-SANITIZER", "LEAK SUMMARY", "Target application returned an error")


@dataclass
class SanitizerError:
    message: str                 # the tool's head line: "Invalid __global__ write of size 4 bytes"
    where: str                   # kernel | kerncap-kernel | host | fault-followup
    function: str | None = None  # the device function as the tool names it
    file: str | None = None
    line: int | None = None
    api_call: str | None = None  # host errors: the driver call
    code: int | None = None
    details: list[str] = field(default_factory=list)

    @property
    def location(self) -> str:
        if self.file:
            return f"{self.file}:{self.line}" if self.line else self.file
        return ""


@dataclass
class SanitizeResult:
    tool: str
    kernel: str                  # mangled
    cubin: str | None
    label: str
    captured: bool               # the captured cubin (errors are the app's own kernel's)
    errors: list[SanitizerError]
    reported_count: int | None   # the tool's own ERROR SUMMARY count
    log: str
    validation: str | None = None     # pass | fail | None (the launch failed)
    launch_error: str | None = None
    seconds: float = 0.0
    created: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def kernel_errors(self) -> list[SanitizerError]:
        return [e for e in self.errors if e.where == "kernel"]

    @property
    def host_errors(self) -> list[SanitizerError]:
        """Errors of kerncap's own replay path: host API calls and its compare kernels."""
        return [e for e in self.errors if e.where in ("host", "kerncap-kernel")]

    @property
    def clean(self) -> bool:
        return not self.errors and not (self.reported_count or 0)

    def to_dict(self) -> dict[str, Any]:
        return {"format": SANITIZE_FORMAT, **asdict(self)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "SanitizeResult":
        d = {k: v for k, v in d.items() if k != "format"}
        d["errors"] = [SanitizerError(**e) for e in d.get("errors", [])]
        return cls(**d)


# -- parsing the tool's report ---------------------------------------------------------------


def _blocks(text: str) -> list[list[str]]:
    """The report's messages: a head line and its indented detail lines."""
    blocks: list[list[str]] = []
    for raw in text.splitlines():
        if not _PREFIX.match(raw):
            continue
        body = raw[10:] if len(raw) > 10 else ""
        if not body.strip():
            continue
        if body.startswith("    ") and blocks:
            blocks[-1].append(body.strip())
        else:
            blocks.append([body.strip()])
    return blocks


def _locate(lines: list[str]) -> tuple[str | None, str | None, int | None]:
    for line in lines:
        if "Host Frame" in line:
            continue
        m = _AT_NEW.search(line)
        if m and not m.group(1).startswith("0x"):
            return m.group(1).strip(), m.group(2), int(m.group(3)) if m.group(3) else None
        m = _AT_OLD.search(line)
        if m:
            return m.group(3).strip(), m.group(1), int(m.group(2)) if m.group(2) else None
    return None, None, None


def parse_report(text: str) -> tuple[list[SanitizerError], int | None]:
    """Errors of a compute-sanitizer text report, attributed; and its summary count."""
    errors: list[SanitizerError] = []
    count = None
    kernel_fault = False
    for block in _blocks(text):
        head = block[0]
        m = _SUMMARY.search(head)
        if m:
            count = int(m.group(1).replace(",", ""))
            continue
        m = _RACE_SUMMARY.search(head)
        if m:
            count = max(count or 0, int(m.group(2).replace(",", "")))
            continue
        if head.startswith(_SKIP_HEADS):
            continue
        details = [d for d in block[1:] if not d.startswith(("Host Frame", "Device Frame", "Saved host backtrace"))]
        api = _API.search(head)
        if api:
            code = int(api.group(2))
            where = "fault-followup" if kernel_fault and code in FAULT_CODES else "host"
            errors.append(SanitizerError(message=head, where=where, api_call=api.group(4), code=code,
                                         details=details[:4]))
            continue
        function, file, line = _locate(block)
        # The replay launches only the replayed kernel and kerncap's compare kernels; a
        # device function named in a frame is one the replayed kernel called.
        own = function is not None and base_name(function).startswith(OWN_KERNEL_PREFIX)
        where = "kerncap-kernel" if own else "kernel"
        kernel_fault = kernel_fault or where == "kernel"
        errors.append(SanitizerError(message=head, where=where, function=function, file=file, line=line,
                                     details=[d for d in details if not _AT_NEW.search(d) and not _AT_OLD.search(d)][:4]))
    return errors, count


# -- running ----------------------------------------------------------------------------------


def stored_path(root: Path, cubin: str | Path | None, tool: str) -> Path:
    return artifact_stem(root, cubin).with_suffix(f".{tool}.json")


def load_stored(reproducer: str | Path, cubin: str | Path | None, tool: str = "memcheck") -> SanitizeResult | None:
    """What an earlier `sanitize` run with `tool` stored for this cubin (None: the captured one), or None."""
    return load_result(stored_path(reproducer_dir(reproducer), cubin, tool), SanitizeResult.from_dict)


def sanitize(
    reproducer: str | Path,
    cubin: str | Path | None = None,
    *,
    tool: str = "memcheck",
    timeout: float = DEFAULT_TIMEOUT,
    device: int = 0,
    cancel: Cancellation | None = None,
    progress: Callable[[str], None] | None = None,
) -> SanitizeResult:
    """Run one validation launch of the captured kernel (or the variant) under
    compute-sanitizer's `tool`; the report is stored next to the variant."""
    if tool not in TOOLS:
        raise KerncapError(f"unknown compute-sanitizer tool {tool!r}", f"use one of: {', '.join(TOOLS)}")
    say = progress or (lambda text: None)
    t0 = time.monotonic()
    root = reproducer_dir(reproducer)
    capture = Capture.open(root)
    kernel = capture.kernel.get("name") or ""
    cubin_path = Path(cubin).resolve() if cubin is not None else None
    if cubin_path is not None and not cubin_path.is_file():
        raise KerncapError(f"variant cubin {cubin_path} does not exist", "build it with `kerncap recompile DIR`")
    exe = find_tool("compute-sanitizer", "compute-sanitizer")
    stem = artifact_stem(root, cubin)
    variants_dir(root, stem.parent.relative_to(root))  # never through a link out of the reproducer
    label = cubin_label(root, cubin)
    what = f"compute-sanitizer {tool} on {label}"
    result = SanitizeResult(tool=tool, kernel=kernel, cubin=None if cubin_path is None else str(cubin_path),
                            label=label, captured=cubin is None, errors=[], reported_count=None,
                            log=str(stem.with_suffix(f".{tool}.log")))

    with tempfile.TemporaryDirectory(prefix=".sanitize-", dir=stem.parent) as tmp:
        log = Path(tmp) / "sanitizer.log"
        wrapper = [str(exe), "--tool", tool, "--target-processes", "all", "--log-file", str(log)]
        run = ToolRun(root, wrapper, what=what, timeout=timeout, device=device, cancel=cancel,
                      capture=capture)
        say(f"{what}: one launch (kernels run much slower under the tool)")
        try:
            v = run.request("validate", cubin=None if cubin_path is None else str(cubin_path))
            result.validation = "pass" if v.get("passed") else "fail"
        except KerncapError as exc:
            # A faulting launch ends the replay process (sticky error, or a crash under
            # the tool): the tool has reported the fault; keep going and read its report.
            # Anything else (no GPU, a span taken, a variant that does not fit) is the error.
            if isinstance(exc, (Cancelled, ToolTimeout)) or not _launch_failure(exc.message):
                run.kill()
                _keep_log(log, Path(result.log))
                if isinstance(exc, AddressUnavailable):
                    # The tool reserves 279.6 GiB of its own in cuInit; guard pages keep it
                    # off the spans (va_guards.py), and this says so if something else took them.
                    raise AddressUnavailable(
                        f"{what} cannot restore this capture at its addresses: {exc.message}",
                        "under compute-sanitizer the replay process reserves memory of its own, and it covers "
                        "these addresses; the capture still replays and validates without the tool "
                        "(kerncap validate DIR); a capture from another run of the app may land elsewhere") from exc
                raise
            result.launch_error = exc.message
        say(f"{what}: reading the report")
        try:
            run.finish()
        except KerncapError:
            _keep_log(log, Path(result.log))
            raise
        try:
            text = log.read_text(errors="replace")
        except OSError:
            raise KerncapError(f"{what} wrote no report", "check the tool runs here: compute-sanitizer --version") from None
        _keep_log(log, Path(result.log))
    result.errors, result.reported_count = parse_report(text)
    if result.reported_count and not result.errors:
        result.notes.append(f"the tool counted {result.reported_count} errors this parser could not read; see the log")
    result.seconds = round(time.monotonic() - t0, 2)
    result.created = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    save_result(stored_path(root, cubin, tool), result.to_dict())
    return result


def _launch_failure(message: str) -> bool:
    return "CUDA_ERROR_" in message or message.startswith("replay server died")


def _keep_log(src: Path, dst: Path) -> None:
    try:
        os.replace(src, dst)
    except OSError:
        pass


# -- display ------------------------------------------------------------------------------------


def format_result(r: SanitizeResult, *, limit: int = 10) -> str:
    """The text `kerncap validate --sanitize` prints."""
    whose = "the captured kernel itself" if r.captured else "the variant"
    kernel_n, host_n = len(r.kernel_errors), len(r.host_errors)
    followups = [e for e in r.errors if e.where == "fault-followup"]
    if r.clean:
        head = f"{r.tool} on {r.label}: clean (0 errors in the kernel, 0 in kerncap's host path)"
    else:
        head = (f"{r.tool} on {r.label}: {kernel_n} error(s) in {whose}, {host_n} in kerncap's replay path"
                + (f" (the tool counted {r.reported_count})" if r.reported_count is not None else ""))
    lines = [head]
    if r.captured and kernel_n:
        lines.append("  these come from the app's own kernel as captured, not from an edit")
    for e in [e for e in r.errors if e.where != "fault-followup"][:limit]:
        where = {"kernel": "kernel", "kerncap-kernel": "kerncap compare kernel", "host": "host API"}[e.where]
        loc = f"  {e.location}" if e.location else ("  (no line info: compile with -lineinfo)" if e.function else "")
        lines.append(f"  [{where}] {e.message}")
        if e.function:
            lines.append(f"      at {e.function}{loc}")
        lines += [f"      {d}" for d in e.details[:2]]
    shown = len([e for e in r.errors if e.where != "fault-followup"])
    if shown > limit:
        lines.append(f"  … {shown - limit} more in the log")
    if followups:
        lines.append(f"  then the launch failed: {followups[0].message}")
    elif r.launch_error:
        lines.append(f"  the launch failed: {r.launch_error.splitlines()[0]}")
    if r.validation:
        lines.append(f"  validation under the tool: {r.validation.upper()}")
    lines += [f"  note: {n}" for n in r.notes]
    lines.append(f"log: {r.log}")
    return "\n".join(lines)
