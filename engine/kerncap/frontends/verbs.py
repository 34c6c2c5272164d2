"""The verbs on an open reproducer, each declared once: its name (the CLI subcommand and
the MCP tool), its request record (every `Option` field is a flag and a tool argument:
kerncap.frontends.render), the Session method that answers it, its help and how its
result is shown. The CLI (kerncap.commands.verb) and the MCP server
(kerncap.frontends.mcp_server) register every verb of `VERBS` from this alone: a new verb
is its request, its Session method and one entry here (docs/architecture.md).

Shared by the front ends as the renderer is; it imports nothing but the API, and names
each request by its name in `kerncap.api.options` so that listing the commands imports no
engine module (`kerncap tui`'s first frame).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kerncap import api


@dataclass(frozen=True)
class Run:
    """What a front end hands the Session method besides the request: where the app's
    output goes (None: passed through), whether the caller gave up, the Cancellation a
    tool run watches, one-line progress (None: quiet)."""

    output: Callable[[str, bytes], None] | None = None
    cancelled: Callable[[], bool] | None = None
    cancel: Any = None  # an api.Cancellation, or None
    progress: Callable[[str], None] | None = None


@dataclass(frozen=True)
class Verb:
    name: str                  # the CLI subcommand and the MCP tool
    request_name: str          # its request record in kerncap.api.options
    call: Callable[[Any, Any, Run], Any]  # (session, checked request, run) -> the result
    help: str                  # one line in `kerncap --help`
    description: str           # `kerncap <verb> --help`
    doc: str                   # the MCP tool's description
    status: Callable[[Any], int]  # the CLI's exit status of a result
    text: Callable[[Any], str]    # the CLI's words for a result (--json: its to_dict())
    # options of which the CLI takes at most one (an argparse mutually exclusive group)
    exclusive: tuple[str, ...] = ()
    # MCP argument descriptions where they differ from the option's help
    descriptions: dict[str, str] = field(default_factory=dict)
    # options naming a variant cubin (those the request declares): relative to the reproducer,
    # and under the server's roots (MCP)
    cubins: tuple[str, ...] = ("cubin",)
    # the verb runs the user's app: the CLI takes it after `--` (or --cmd) and --quiet, MCP
    # `command`, `cwd`, `env` and returns the output's tail; `app_files` are options naming
    # files relative to the app's working directory (MCP: under the roots)
    runs_app: bool = False
    app_files: tuple[str, ...] = ()

    @property
    def request(self) -> type:
        return getattr(api.options, self.request_name)


def _sanitize_arguments(request) -> dict[str, Any]:
    r = request.checked()
    return {"cubin": r.cubin, "tool": r.tool, "timeout": r.timeout}


APPLY = Verb(
    "apply", "ApplyRequest",
    lambda session, request, run: session.apply(request, output=run.output, cancelled=run.cancelled),
    help="run the app with a variant substituted for the captured kernel",
    description="Run the unmodified app with a variant cubin standing in for the captured kernel (every launch, or "
    "--dispatch N,M…): the app's grid, block, shared memory and arguments, the module's globals copied in. --check "
    "compares what each launch wrote with the app's own kernel; the app is timed R times each way, interleaved. The "
    "outcome is kept on the variant's History row (the workbench's \"in app\"). Exit status 0, 1 a --check "
    "mismatch, 4 the variant was refused (the app ran its own kernel), 3 could not run (also: --check found the "
    "app's own runs differing, so it has no verdict), 2 a usage error. "
    "docs/apply.md",
    doc="Run the app with a variant standing in for the captured kernel, as `kerncap apply --json` (the same "
    "request, the same result): every launch of that kernel (or those `dispatch` names) runs the variant with the "
    "app's grid, block and arguments; `check` runs the app as is and with the variant and names the first launch "
    "whose outputs differ; `runs` R times it each way, interleaved (the kernel's in-app speedup with its interval, "
    "the app's, the kernel's share of GPU time). `exit_status` 1: check failed. A refused variant (another "
    "parameter layout, globals, architecture; the app ran its own kernel) is a tool error with exit_status 4. The "
    "outcome is kept on the variant's History row (`in_app`), which the workbench shows. Runs the user's command "
    "as profile and extract do; each run stops after `timeout_s`.",
    status=lambda result: result.exit_status,
    text=lambda result: result.text(),
    exclusive=("cubin", "variant"),
    descriptions={"cubin": "the variant cubin, relative to the reproducer (e.g. variants/1.cubin) or absolute (one of "
                           "cubin and variant)",
                  "compare_output": "with check: also compare these files the app writes (under a root; relative "
                                    "to cwd)"},
    runs_app=True, app_files=("compare_output",),
)

SANITIZE = Verb(
    "sanitize", "SanitizeRequest",
    lambda session, request, run: session.sanitize(**_sanitize_arguments(request), cancel=run.cancel,
                                                   progress=run.progress),
    help="one validation launch under compute-sanitizer",
    description="Run one validation launch of the captured kernel (or the --cubin variant) on the captured input "
    "in a replay server of its own under compute-sanitizer's --tool, and attribute each error it reports: to the "
    "kernel (file:line when the cubin has line info), to kerncap's compare kernels, or to a host call of the replay "
    "path. The report is stored next to the variant. The same as `kerncap validate DIR --sanitize TOOL`. Exit "
    "status 0 no error reported, 1 errors, 3 could not run, 2 a usage error.",
    doc="compute-sanitizer on one validation launch of the kernel (or the variant), in a replay server of its own "
    "(as `kerncap sanitize --json`): `errors` each with `where` (kernel: the replayed kernel's own, with file and "
    "line when the cubin has line info; kerncap-kernel or host: kerncap's replay path), `reported_count` (the "
    "tool's own summary), `validation` (pass | fail under the tool, none when the launch failed), `launch_error` "
    "and the stored `log`. No errors and no reported count: clean. A reproducer set refuses it (sanitize a "
    "member).",
    status=lambda result: 0 if result.clean else 1,
    text=lambda result: api.format_sanitize(result),
    descriptions={"cubin": "a variant cubin, relative to the reproducer (e.g. variants/1.cubin) or absolute; omit "
                           "for the captured cubin"},
)

# In `kerncap --help` after `extract`; MCP's tools in this order after extract's.
VERBS = (APPLY, SANITIZE)
