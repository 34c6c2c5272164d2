"""`kerncap mcp`: kerncap as a Model Context Protocol server, for agents that edit,
compile, validate and time kernels in a loop (docs/mcp.md).

Built on the official `mcp` Python SDK's `MCPServer` (pip install 'kerncap[mcp]'):
stdio by default, streamable HTTP with `--http HOST:PORT`. Every tool returns the same
data as the CLI's `--json`; an error the user can fix comes back as a tool error whose
text is the message and the hint, with the CLI's JSON error as structured content.

Every path a tool takes must lie under one of the directories the server was started
with (`--root DIR`, repeatable; relative paths are taken from the first). The server
keeps one open session per reproducer (kerncap.api.SessionPool: its resident replay
server and, for Triton, its warm compile worker), so an agent's edit → build → validate
→ time loop pays the capture's restore once, and `build` records its variants in the
reproducer's history where the workbench and `kerncap check` see them. Every option's
type, bounds and default come from kerncap.api.options, as the CLI's do. When
the client goes away — the stdio stream closes, a request is cancelled, the process is
terminated — the replay servers are killed, also in the middle of a request.
"""

from __future__ import annotations

import functools
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import anyio
from pydantic import Field

from kerncap import __version__, api
from kerncap.core.units import printable
from kerncap.errors import KerncapError, UsageError
from kerncap.frontends import render, verbs

try:
    from mcp.server.mcpserver import Context, MCPServer
    from mcp.types import CallToolResult, TextContent
except ImportError as exc:  # the `mcp` extra is optional
    raise KerncapError(f"the MCP Python SDK is not installed ({exc})", "pip install 'kerncap[mcp]'") from None

T = TypeVar("T")
APP_OUTPUT_LINES = 40     # tail of the app's output returned by profile/extract
PROGRESS_EVERY_S = 1.0
DEFAULT_APP_TIMEOUT_S = 900.0

INSTRUCTIONS = """kerncap pulls one GPU kernel dispatch out of a CUDA application into a reproducer directory
that replays it at its original addresses. Loop: `info` a reproducer, `list_sources`, `read_source`,
`write_source` an edit, then `build` (recompile, time against the captured cubin with a confidence interval,
validate, and record the variant in the reproducer's history, as the workbench does), or the steps one by one:
`recompile` (Triton: optional `config` pins), `validate` the new cubin (byte-exact unless atol/rtol; `perturb` K
also on K perturbed inputs), `compare` its timing with the captured cubin; `ncu` for Nsight Compute's metrics,
`sanitize` for compute-sanitizer's report on one launch. `profile` and `extract` run the application itself;
`apply` runs it with a variant in place of the captured kernel (`check`: are its outputs the same on every launch).
A sequence (extract with `sequence`) replays whole in an `order`; `validate`/`replay` with `per_launch` name the first
launch that departs / time each launch; `fuse_skeleton` and `fuse_build` replace a range of its launches by one kernel.
Paths must lie under the server's roots; relative paths are taken from the first root."""

# Argument types shared by the tools (module level: the SDK evaluates the annotations here).
Reproducer = Annotated[str, Field(description="a reproducer directory (absolute, or relative to the first root)")]
Cubin = Annotated[str | None, Field(description="a variant cubin, relative to the reproducer (e.g. variants/1.cubin) "
                                                "or absolute; omit for the captured cubin")]
FusionName = Annotated[str, Field(description="the fusion's name: fusions/<name>/ and variants/fuse-<name>.json "
                                              "(letters, digits, '-', '_')")]
# The app's command, as profile and a verb that runs the app (kerncap.frontends.verbs: apply) take it.
AppCommand = Annotated[list[str], Field(description="the app's argv, e.g. [\"python\", \"train.py\"]")]
AppCwd = Annotated[str | None, Field(description="working directory (under a root)")]
AppEnv = Annotated[dict[str, str] | None, Field(description="variables added to the app's environment")]
SourceKernel = Annotated[str | None, Field(description="a sequence: whose sources (kernels/<k>/source/), its number "
                                                       "or a part of its name; omit for one dispatch, or for the "
                                                       "sequence's only kernel with sources")]


class Roots:
    """The directories the server may read and write under."""

    def __init__(self, dirs: Sequence[str | os.PathLike]):
        if not dirs:
            raise UsageError("no --root given", "start the server with --root DIR (repeatable): the reproducers and "
                                                "workspaces it may use")
        self.dirs = []
        for d in dirs:
            p = Path(d).expanduser().resolve()
            if not p.is_dir():
                raise UsageError(f"--root {d} is not a directory", "create it first, or pass an existing directory")
            self.dirs.append(p)

    def path(self, value: str, what: str = "path") -> Path:
        if "\x00" in value:  # no file name holds one: os.stat would raise ValueError
            raise UsageError(f"{what} {value!r} holds a NUL character, which no path can",
                             "pass the directory's path as `list_reproducers` gives it")
        p = Path(value).expanduser()
        resolved = (p if p.is_absolute() else self.dirs[0] / p).resolve()
        if not any(resolved.is_relative_to(d) for d in self.dirs):
            raise UsageError(f"{what} {value} is outside the directories this server may use "
                             f"({', '.join(map(str, self.dirs))})",
                             "pass a path under one of them, or restart `kerncap mcp` with another --root")
        return resolved

    def reproducer(self, value: str) -> Path:
        """A reproducer directory (or a reproducer set) under the roots; a verb that cannot
        take a set refuses it itself (the session's, or the engine function's, words)."""
        p = self.path(value, "reproducer")
        if not api.holds_reproducer(p):
            raise KerncapError(f"{p} is not a reproducer (no capture/ in it)",
                               "pass a directory made by `extract`; `list_reproducers` lists those under the roots")
        return p.parent if p.name == "capture" else p

    def cubin(self, reproducer: Path, value: str | None) -> Path | None:
        """A variant cubin: relative to the reproducer, or an absolute path under the roots."""
        if value is None or value == "":
            return None
        p = Path(value)
        resolved = self.path(str(p if p.is_absolute() else reproducer / p), "cubin")
        if not resolved.is_file():
            raise KerncapError(f"variant cubin {resolved} does not exist", "build it with `recompile`")
        return resolved


def _error_result(exc: KerncapError) -> CallToolResult:
    # A message can quote a reproducer's strings: shown to a person, their control characters are escaped.
    text = printable(exc.message + (f"\nhint: {exc.hint}" if exc.hint else ""))
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=exc.to_json(),
                          is_error=True)


def kerncap_tool(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A tool whose KerncapError (and disk trouble) comes back as an MCP tool error."""

    @functools.wraps(fn)
    async def wrapper(*args, **kwargs):
        try:
            return await fn(*args, **kwargs)
        except KerncapError as exc:
            return _error_result(exc)
        except OSError as exc:
            where = f" ({exc.filename})" if exc.filename else ""
            return _error_result(KerncapError(f"{exc.strerror or exc}{where}",
                                              "check free space and permissions of that location"))

    return wrapper


class _Tail:
    """The last lines an app wrote (stdout and stderr of a profiled or captured app
    must never reach the stdio transport)."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self._partial = {"stdout": b"", "stderr": b""}
        self._lock = threading.Lock()  # stdout and stderr are pumped by two threads

    def __call__(self, stream: str, data: bytes) -> None:
        with self._lock:
            text = self._partial[stream] + data
            *done, self._partial[stream] = text.split(b"\n")
            self.lines += [f"{stream}: {line.decode(errors='replace')}" for line in done]
            del self.lines[:-APP_OUTPUT_LINES]


class KerncapMCP:
    """The server's state: its roots and its open sessions."""

    def __init__(self, roots: Sequence[str | os.PathLike], *, max_resident: int = 4,
                 replay_timeout: float | None = None, replay_server_cmd: Sequence[str] | None = None):
        self.roots = Roots(roots)
        self._pool_options = dict(max_resident=max_resident, timeout=replay_timeout, server_cmd=replay_server_cmd,
                                  compile_workers=True)
        self.pool = api.SessionPool(**self._pool_options)

    async def blocking(self, ctx: Context | None, label: str, fn: Callable[[], T], *,
                       reproducer: Path | None = None, on_cancel: Callable[[], None] | None = None) -> T:
        """Run fn in a worker thread, reporting progress every second. If the request is
        cancelled (or the client goes away) a replay in flight on `reproducer` is killed
        and `on_cancel` is called (a tool run's Cancellation)."""
        start = time.monotonic()
        done = anyio.Event()

        async def ticker() -> None:
            while not done.is_set():
                with anyio.move_on_after(PROGRESS_EVERY_S):
                    await done.wait()
                if not done.is_set() and ctx is not None:
                    elapsed = time.monotonic() - start
                    try:
                        await ctx.report_progress(elapsed, None, f"{label}: {elapsed:.0f} s")
                    except Exception:
                        return

        failure: Exception | None = None
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(ticker)
                try:
                    result = await anyio.to_thread.run_sync(fn, abandon_on_cancel=True)
                except Exception as exc:
                    failure = exc
                finally:
                    done.set()
        except anyio.get_cancelled_exc_class():
            if reproducer is not None:
                self.pool.kill(reproducer)
            if on_cancel is not None:
                on_cancel()
            raise
        if failure is not None:
            raise failure
        return result

    def session(self, reproducer: Path, call: Callable[[Any], T], order: str | None = None) -> T:
        """`call(session)` on the reproducer's open session, replaying a sequence in `order`
        (None: streams; a session in another order restarts its replay server first)."""
        def in_order(s):
            s.use_order(order)
            return call(s)
        return self.pool.run(reproducer, in_order)

    def shutdown(self) -> None:
        """The client went away: every replay server and compile worker is killed (a client
        that connects again, over the in-memory transport, gets a fresh pool)."""
        pool, self.pool = self.pool, api.SessionPool(**self._pool_options)
        pool.kill_all()


def build_server(roots: Sequence[str | os.PathLike], *, max_resident: int = 4, replay_timeout: float | None = None,
                 replay_server_cmd: Sequence[str] | None = None) -> MCPServer:
    """The MCP server over `roots` (see the module doc). `replay_server_cmd` replaces the
    replay server command (tests)."""
    state = KerncapMCP(roots, max_resident=max_resident, replay_timeout=replay_timeout,
                       replay_server_cmd=replay_server_cmd)

    @asynccontextmanager
    async def lifespan(_server: MCPServer):
        try:
            yield state
        finally:
            state.shutdown()

    server = MCPServer("kerncap", version=__version__, instructions=INSTRUCTIONS, lifespan=lifespan,
                       log_level="WARNING")
    server.kerncap = state  # type: ignore[attr-defined]  # for tests and the CLI's signal handler
    for register in TOOL_GROUPS:  # (defined below) each registers its tools on the server
        register(server, state)
    return server


def _profile_tool(server: MCPServer, state: KerncapMCP) -> None:
    """The tools of the application: profile it."""
    R = state.roots

    @server.tool()
    @kerncap_tool
    async def profile(ctx: Context,
                      command: AppCommand, cwd: AppCwd = None, env: AppEnv = None,
                      timeout_s: Annotated[float, Field(gt=0, description="stop the app after this long")] = DEFAULT_APP_TIMEOUT_S,
                      sampled: Annotated[bool, Field(description="count every launch and time a sample with CUDA "
                                                                 "events instead of CUPTI's record of every launch")] = False,
                      ) -> dict[str, Any]:
        """Run the app once under the capture library and rank its kernels by total GPU time
        (the data of `kerncap profile --json`); the profile is saved in the first root's
        workspace."""
        workdir = R.path(cwd, "cwd") if cwd else R.dirs[0]
        tail = _Tail()
        result = await state.blocking(ctx, "profile", lambda: api.profile(command, cwd=workdir, env=env,
                                                                          timeout=timeout_s, output=tail,
                                                                          sampled=sampled))
        saved = api.Workspace(R.dirs[0] / "kerncap-workspace").new_profile_path()
        saved.parent.mkdir(parents=True, exist_ok=True)
        result.save(saved)
        return {**result.to_dict(), "saved": str(saved), "app_output_tail": tail.lines}


def _extract_tool(server: MCPServer, state: KerncapMCP) -> None:
    """The tools of the application: capture from it."""
    R = state.roots

    @server.tool()
    @kerncap_tool
    async def extract(ctx: Context,
                      kernel: Annotated[str, Field(description="kernel name pattern (see match)")],
                      command: Annotated[list[str], Field(description="the app's argv")],
                      output: Annotated[str | None, Field(description="new reproducer directory (under a root); "
                                                                      "default kerncap-workspace/reproducers/<kernel>-<time> "
                                                                      "in the first root")] = None,
                      dispatch: Annotated[int, Field(ge=0, description="which matching dispatch, from 0")] = 0,
                      match: Annotated[str, Field(description="substring | regex | exact")] = "substring",
                      source_dir: Annotated[str | None, Field(description="the app's source tree (CUDA C++)")] = None,
                      build_dir: Annotated[str | None, Field(description="its build tree (compile_commands.json)")] = None,
                      cwd: Annotated[str | None, Field(description="working directory of the app")] = None,
                      env: Annotated[dict[str, str] | None, Field(description="variables added to the app's "
                                                                              "environment")] = None,
                      timeout_s: Annotated[float, Field(gt=0, description="stop the app after this long")] = DEFAULT_APP_TIMEOUT_S,
                      keep_running: Annotated[bool, Field(description="let the app run to its end after the "
                                                                      "capture (default: stop it)")] = False,
                      prune: Annotated[bool, Field(description="shrink to the pointer closure of the kernel (a "
                                                               "sequence: of its launches and copies) if that "
                                                               "validates (GPU)")] = False,
                      force: Annotated[bool, Field(description="replace a non-empty output")] = False,
                      intercept: Annotated[Literal[api.INTERCEPT_PATHS] | None,
                                           Field(description="entry: interposed driver entry points, cheaper "
                                                             "per launch, or cupti callbacks (default: the server's "
                                                             "KERNCAP_INTERCEPT, else entry)")] = None,
                      sequence: Annotated[Literal[api.SEQUENCE_MODES] | None,
                                          Field(description="capture a window of launches as one reproducer "
                                                            "(docs/sequences.md): nvtx (instance `dispatch` of the "
                                                            "range `nvtx`; kernel may be empty), graph (the graph "
                                                            "launch running dispatch `dispatch` of kernel), run "
                                                            "(from dispatch `dispatch` of kernel, `count` launches "
                                                            "or `until` a kernel)")] = None,
                      nvtx: Annotated[str | None, Field(description="only launches in NVTX ranges matching this "
                                                                    "path ('step.3/layer.5'); with sequence=nvtx "
                                                                    "the range whose instance is captured")] = None,
                      count: Annotated[int | None, Field(ge=1, description="sequence=run: launches in the "
                                                                           "window")] = None,
                      until: Annotated[str | None, Field(description="sequence=run: up to and including the next "
                                                                     "launch of a kernel matching this")] = None,
                      ) -> dict[str, Any]:
        """Capture one dispatch of a kernel of the app into a new reproducer (what `kerncap
        extract` does), or a sequence of launches (`sequence`); returns the reproducer's
        path and what `info` says about it."""
        window = api.sequence_extract_arguments(sequence, nvtx=nvtx, count=count, until=until)
        out = R.path(output, "output") if output else api.Workspace(R.dirs[0] / "kerncap-workspace").new_reproducer_path(
            kernel or (nvtx or "sequence").replace("/", "_"))
        src = R.path(source_dir, "source_dir") if source_dir else None
        bld = R.path(build_dir, "build_dir") if build_dir else None
        workdir = R.path(cwd, "cwd") if cwd else R.dirs[0]
        tail = _Tail()
        result = await state.blocking(ctx, "extract", lambda: api.extract(
            kernel, command, output=out, dispatch=dispatch, match=match, keep_running=keep_running,
            timeout=timeout_s, source_dir=src,
            build_dir=bld, cwd=workdir, env=env, force=force, output_sink=tail, prune=prune, intercept=intercept,
            **window))
        return {"reproducer": str(result.reproducer_dir), "seconds": result.seconds, "sources": result.sources,
                "warnings": result.warnings, "prune": result.prune.to_json() if result.prune else None,
                "info": api.info(result.reproducer_dir).to_dict(), "app_output_tail": tail.lines}


def _verb_tools(server: MCPServer, state: KerncapMCP) -> None:
    """The verbs on an open reproducer (kerncap.frontends.verbs: apply, sanitize), each a
    tool rendered from its declaration."""
    for verb in verbs.VERBS:
        server.tool(name=verb.name, description=verb.doc)(kerncap_tool(_verb_tool(state, verb)))


def _verb_tool(state: KerncapMCP, verb: verbs.Verb) -> Callable[..., Any]:
    """The tool of `verb`: its request's options as arguments (render.tool_options), every
    path under the roots, the session's answer as the CLI's --json gives it. A verb that
    runs the app takes its `command`, `cwd`, `env` and returns the tail of its output, as
    profile and extract do; a cancel stops what the verb started."""
    R = state.roots
    declared = {o.name for o in api.options.options_of(verb.request)}

    async def answer(ctx: Context, reproducer: str, options: dict[str, Any], command: list[str] | None = None,
                     cwd: str | None = None, env: dict[str, str] | None = None) -> dict[str, Any]:
        repro = R.reproducer(reproducer)
        workdir = (R.path(cwd, "cwd") if cwd else R.dirs[0]) if verb.runs_app else None
        more: dict[str, Any] = {}
        for name in (n for n in verb.cubins if n in declared):
            variant = R.cubin(repro, options.pop(name, None))
            more[name] = None if variant is None else str(variant)
        for name in verb.app_files:
            more[name] = tuple(str(R.path(str(workdir / p), name)) for p in options.pop(name, None) or ())
        if verb.runs_app:
            more.update(command=tuple(command), cwd=str(workdir), env=env)
        request = render.from_tool(verb.request, options, **more)
        tail = _Tail() if verb.runs_app else None
        cancel = api.Cancellation()
        run = verbs.Run(output=tail, cancelled=lambda: cancel.cancelled, cancel=cancel)
        result = await state.blocking(ctx, verb.name, lambda: state.session(repro, lambda s: verb.call(s, request, run)),
                                      on_cancel=cancel.cancel)
        return result.to_dict() if tail is None else {**result.to_dict(), "app_output_tail": tail.lines}

    if verb.runs_app:
        async def tool(ctx: Context, reproducer: Reproducer, command: AppCommand, cwd: AppCwd = None,
                       env: AppEnv = None, **options: Any) -> dict[str, Any]:
            return await answer(ctx, reproducer, options, command, cwd, env)
    else:
        async def tool(ctx: Context, reproducer: Reproducer, **options: Any) -> dict[str, Any]:
            return await answer(ctx, reproducer, options)
    return render.tool_options(verb.request, descriptions=verb.descriptions)(tool)


def _reproducer_tools(server: MCPServer, state: KerncapMCP) -> None:
    """The tools of reproducers and their sources."""
    R = state.roots

    @server.tool()
    @kerncap_tool
    async def list_reproducers() -> dict[str, Any]:
        """Every reproducer under the server's roots (as `kerncap list --json`)."""
        rows = api.list_reproducers(R.dirs[0] / "kerncap-workspace", extra=[*R.dirs, *(d / "reproducers" for d in R.dirs)])
        return {"roots": [str(d) for d in R.dirs], "reproducers": [r.to_dict() for r in rows]}

    @server.tool()
    @kerncap_tool
    async def info(reproducer: Reproducer) -> dict[str, Any]:
        """Everything a reproducer holds: kernel, launch, parameters, regions, globals,
        provenance and the recorded stack (as `kerncap info --json`). For a reproducer set:
        its members (each a reproducer: their paths work with every tool) with weights,
        dispatches, signatures, and the buckets not captured (`"set": true`)."""
        repro = R.reproducer(reproducer)
        return api.info(repro).to_dict()

    @server.tool()
    @kerncap_tool
    async def list_sources(reproducer: Reproducer, kernel: SourceKernel = None) -> dict[str, Any]:
        """The reproducer's editable source files (under its source/; a sequence's: under
        kernels/<k>/source/ of the kernel named), with sizes."""
        repro = R.reproducer(reproducer)
        files = [f.__dict__ for f in api.list_sources(repro, kernel)]
        # source_dir: the reproducer's own source/ where the call reaches it (the engine
        # says whose sources a call reaches: a sequence's are its kernel entries')
        where = repro / "source" if api.sources_of(repro, kernel) == repro else None
        return {"reproducer": str(repro), "source_dir": str(where) if where else None, "kernel": kernel,
                "files": files}

    @server.tool()
    @kerncap_tool
    async def read_source(reproducer: Reproducer,
                          file: Annotated[str, Field(description="path relative to the reproducer's source/")],
                          kernel: SourceKernel = None,
                          ) -> dict[str, Any]:
        """The text of one source file of the reproducer."""
        repro = R.reproducer(reproducer)
        return {"file": file, "text": api.read_source(repro, file, kernel)}

    @server.tool()
    @kerncap_tool
    async def write_source(reproducer: Reproducer,
                           file: Annotated[str, Field(description="path relative to the reproducer's source/")],
                           text: Annotated[str, Field(description="the file's complete new content")],
                           kernel: SourceKernel = None,
                           ) -> dict[str, Any]:
        """Replace (or create) one source file of the reproducer; `recompile` builds from it
        (a sequence's kernel: `build` with that `kernel`)."""
        repro = R.reproducer(reproducer)
        return {"written": api.write_source(repro, file, text, kernel).__dict__}


def _build_tools(server: MCPServer, state: KerncapMCP) -> None:
    """The tools of recompile and build a variant."""
    R = state.roots

    @server.tool()
    @kerncap_tool
    @render.tool_options(api.BuildRequest, ("config", "mode", "kernel"))
    async def recompile(ctx: Context, reproducer: Reproducer, **options: Any) -> dict[str, Any]:
        """Rebuild only the captured kernel from the edited sources into variants/ (as
        `kerncap recompile --json`): CUDA C++ with the recorded nvcc flags, Triton in-process;
        `mode`, `phases` (seconds per compile phase) and `notes` (e.g. why the whole unit
        was compiled) say what ran. A sequence's `kernel` is rebuilt from kernels/<k>/source
        (`variant`: the sequence variant using it); a set gets one variant for every member
        (`variant`, `builds`, `cubins` per member, `commands`)."""
        repro = R.reproducer(reproducer)
        request = render.from_tool(api.BuildRequest, options).checked()
        result = await state.blocking(ctx, "recompile", lambda: state.session(
            repro, lambda s: s.recompile(request.config, mode=request.mode, kernel=request.kernel)))
        return result.to_dict()

    @server.tool()
    @kerncap_tool
    @render.tool_options(api.BuildRequest, ("config", "mode", "rounds", "iterations", "perturb", "runs", "inputs",
                                            "timer", "kernel", "fusion", "intermediates"))
    async def build(ctx: Context, reproducer: Reproducer, **options: Any) -> dict[str, Any]:
        """The workbench's build, for an agent (as `kerncap build --json`): recompile the
        edited sources, time the new cubin interleaved with the captured one (speedup with
        its confidence interval), validate it (determinism, the captured input, `perturb`
        perturbed inputs) and record it in the reproducer's variant history, where the
        workbench's History and `kerncap check` see it. `status`: recorded, or unchanged
        (the source equals a recorded variant's: nothing built); `variant` is the row."""
        repro = R.reproducer(reproducer)
        request = render.from_tool(api.BuildRequest, options)
        log: list[str] = []
        result = await state.blocking(ctx, "build", lambda: state.session(repro, lambda s: s.build(
            request, progress=lambda text, _level="": log.append(text))), reproducer=repro)
        return {**result.to_dict(), "log": log}

    @server.tool()
    @kerncap_tool
    async def list_configs(reproducer: Reproducer) -> dict[str, Any]:
        """The autotune configs a Triton reproducer recorded, each with its grid (pin one with
        recompile's `config`)."""
        with api.open(R.reproducer(reproducer), compile_worker=False) as session:  # a set: its members'
            found = session.autotune_configs()
        return {"function": found.function, "captured_grid": found.captured_grid,
                "configs": [{"config": c.config, "grid": c.grid, "grid_error": c.grid_error, "captured": c.captured}
                            for c in found.candidates]}


def _fusion_tools(server: MCPServer, state: KerncapMCP) -> None:
    """The tools of a sequence's fusions."""
    R = state.roots

    @server.tool()
    @kerncap_tool
    async def fuse_skeleton(reproducer: Reproducer,
                            first: Annotated[int, Field(ge=0, description="first launch of the range (info lists "
                                                                          "the sequence's launches)")],
                            last: Annotated[int, Field(ge=0, description="last launch of the range, included")],
                            name: FusionName = "1",
                            force: Annotated[bool, Field(description="write the skeleton again over an existing "
                                                                     "one")] = False,
                            ) -> dict[str, Any]:
        """Replace launches first..last of a sequence by one kernel you write (as `kerncap fuse
        --first --last --json`): writes fusions/<name>/fused.cu, a kernel kc_fused whose
        parameters are every buffer those launches take (typed, role read/written, the
        launches that use it) then each launch's scalar arguments, and fusion.json with their
        captured values and the launch (the first replaced launch's). Returns both paths, the
        skeleton's `text`, `params`, the launch and the steps between the replaced launches.
        Write the body (keep the parameter list) and build it with fuse_build."""
        repro = R.reproducer(reproducer)
        api.fuse_skeleton(repro, first, last, name, force=force)
        return api.fusion_info(repro, name)

    @server.tool()
    @kerncap_tool
    async def fuse_build(ctx: Context, reproducer: Reproducer, name: FusionName = "1",
                         intermediates: Annotated[list[str] | None, Field(description=(
                             "skeleton buffers (buf<i>) only the replaced launches use, left out of the comparison "
                             "(kerncap also infers them)"))] = None,
                         source: Annotated[str | None, Field(description=(
                             "the fused kernel's complete text, written to fusions/<name>/fused.cu first (omit: "
                             "build what is there)"))] = None,
                         grid: Annotated[list[Annotated[int, Field(ge=1)]] | None,
                                         Field(min_length=1, max_length=3, description="the fused launch's grid, "
                                                                                       "written to fusion.json")] = None,
                         block: Annotated[list[Annotated[int, Field(ge=1)]] | None,
                                          Field(min_length=1, max_length=3, description="its block")] = None,
                         shared_mem_bytes: Annotated[int | None, Field(ge=0, description="its dynamic shared "
                                                                                         "memory")] = None,
                         ) -> dict[str, Any]:
        """Compile a fusion's kernel with the local nvcc for the captured GPU into the sequence
        variant variants/fuse-<name>.json (as `kerncap fuse --name --build --json`), after
        writing `source` and the launch when given. Returns the `variant` path and what its
        comparison leaves out (`excluded`: each intermediate, inferred or declared). Then:
        validate with cubin=<variant> and per_launch (the first launch that departs), replay
        with it and per_launch (the fused launch's time against the replaced launches'), and
        compare with cubins=[<variant>] (the whole sequence's speedup with its interval)."""
        repro = R.reproducer(reproducer)

        def build_it() -> dict[str, Any]:
            if source is not None or grid is not None or block is not None or shared_mem_bytes is not None:
                api.fuse_edit(repro, name, source=source, grid=grid, block=block, shared_mem_bytes=shared_mem_bytes)
            return api.fused_variant_info(api.fuse_build(repro, name, intermediates=intermediates or ()))
        return await state.blocking(ctx, "fuse_build", build_it)


def _check_tools(server: MCPServer, state: KerncapMCP) -> None:
    """The tools of the GPU: validation and the data."""
    R = state.roots

    @server.tool()
    @kerncap_tool
    @render.tool_options(api.ValidateRequest, exclude=("cubin",))  # every option but the path
    @render.tool_options(api.SequenceReplay, ("per_launch", "sequence_order"))
    async def validate(ctx: Context, reproducer: Reproducer, cubin: Cubin = None, **options: Any) -> dict[str, Any]:
        """Validation you can trust, as `kerncap validate --json` (the same request, the same
        result): `runs` replays of the captured kernel decide whether it is deterministic,
        then the kernel (or the variant) runs on the captured pre-state and every region and
        global is compared with the captured post-state, byte-exact unless a tolerance or
        dtype is given; with `perturb` K also on K perturbed inputs against the captured
        kernel. `verdict` (pass | fail | inconclusive), `passed` and `summary` say what the
        verdict covers; `regions` lists every region of the captured input. Uses the
        reproducer's resident replay server. A reproducer set counts as its members (each
        checked in a replay server of its own; `cubin` may be a set variant,
        variants/<n>.json): one verdict over all their inputs. A sequence (docs/sequences.md)
        replays in `order`; `cubin` may be its variant (variants/<name>.json: a rebuilt kernel
        or a fusion, whose left-out intermediates the notes name); `per_launch` also names the
        first launch after which the variant's state departs from the captured one
        (`per_launch`: at, launches_checked, checks)."""
        repro = R.reproducer(reproducer)
        variant = R.cubin(repro, cubin)
        per_launch, order = options.pop("per_launch", False), options.pop("order", None)
        request = render.from_tool(api.ValidateRequest, options,
                                   cubin=None if variant is None else str(variant)).checked()
        if per_launch:
            report, localized = await state.blocking(ctx, "validate", lambda: state.session(
                repro, lambda s: s.validate_per_launch(request), order), reproducer=repro)
            return {**report.to_dict(), "per_launch": localized}
        report = await state.blocking(ctx, "validate", lambda: state.session(repro, lambda s: s.validate(request),
                                                                             order), reproducer=repro)
        return report.to_dict()  # a set's report says "set": true itself

    @server.tool()
    @kerncap_tool
    async def dump(ctx: Context, reproducer: Reproducer,
                   output: Annotated[str, Field(description="directory for the .npy files (under a root)")],
                   items: Annotated[list[str] | None, Field(description=(
                       "REGION ids, arg:N, global:NAME; omitted: every item the kernel wrote"))] = None,
                   states: Annotated[list[str] | None, Field(description=(
                       "pre, post (captured), output (the cubin's on that input), expected; default pre, post (and "
                       "output, expected with a cubin or perturbation)"))] = None,
                   cubin: Cubin = None,
                   perturbation: Annotated[int | None, Field(ge=1, le=api.MAX_PERTURBATIONS, description=(
                       "run on perturbed input K (as validate numbers them) instead of the captured one"))] = None,
                   seed: Annotated[int, Field(ge=0)] = 0,
                   dtype: Annotated[str | None, Field(description="element type instead of the known one")] = None,
                   shape: Annotated[list[int] | None, Field(description="tensor shape of the one item named "
                                                                        "(-1 for one dimension)")] = None,
                   ) -> dict[str, Any]:
        """Write regions, arguments or module globals as .npy files with their dtype and
        shape (Triton tensor metadata, the C++ parameter type, or dtype/shape) and a JSON
        sidecar per item (offset, strides): the captured pre/post-state without a GPU, a
        variant's output on the captured or a perturbed input through the reproducer's
        resident replay server. numpy.load gives exactly the bytes validate compares.
        Refused when larger than the free space; a faulting variant is not dumped."""
        repro = R.reproducer(reproducer)
        variant = R.cubin(repro, cubin)
        out = R.path(output, "output")
        chosen = states or (["pre", "post", "output", "expected"] if variant or perturbation else ["pre", "post"])
        gpu = "output" in chosen or ("expected" in chosen and perturbation)
        options = dict(cubin=variant, perturbation=perturbation, seed=seed, dtype=dtype,
                       shape=tuple(shape) if shape else None, output=out)
        if gpu:
            result = await state.blocking(ctx, "dump", lambda: state.session(repro, lambda s: s.dump(
                items or (), chosen, **options)), reproducer=repro)
        else:
            result = await state.blocking(ctx, "dump", lambda: api.dump(repro, items or (), chosen, **options))
        return result.to_dict()


def _timing_tools(server: MCPServer, state: KerncapMCP) -> None:
    """The tools of the GPU: timing."""
    R = state.roots

    @server.tool()
    @kerncap_tool
    @render.tool_options(api.ReplayRequest, ("iterations", "warmup", "flush_l2", "warm_l2", "per_launch", "timer"))
    @render.tool_options(api.SequenceReplay, ("sequence_order",))
    async def replay(ctx: Context, reproducer: Reproducer, cubin: Cubin = None, **options: Any) -> dict[str, Any]:
        """Time the kernel (or the variant) at the captured addresses: per-iteration times,
        median, min, spread (as `kerncap replay --json`). A sequence replays whole in `order`;
        with `per_launch` each launch is timed on its stream too (`launches`: label, stream,
        median_ms; a fusion's launch stands for the launches it replaced; not in the graph
        order). A reproducer set: every member timed, and the weighted speedup of the
        variant (as `kerncap replay SET --json`)."""
        repro = R.reproducer(reproducer)
        variant = R.cubin(repro, cubin)
        order = options.pop("order", None)
        request = render.from_tool(api.ReplayRequest, options, cubin=None if variant is None else str(variant))
        result = await state.blocking(ctx, "replay", lambda: state.session(repro, lambda s: s.replay(request), order),
                                      reproducer=repro)
        return result.to_dict()

    @server.tool()
    @kerncap_tool
    @render.tool_options(api.CompareRequest)  # every option it declares
    @render.tool_options(api.SequenceReplay, ("sequence_order",))
    async def compare(ctx: Context, reproducer: Reproducer,
                      cubins: Annotated[list[str], Field(min_length=1, description="variant cubins to time against "
                                                                                  "the captured one")],
                      **options: Any) -> dict[str, Any]:
        """Time the captured cubin and each variant interleaved on the resident replay
        server (as `kerncap replay --compare --json`): per program the round timings,
        median and spread; per variant its speedup over the captured cubin with a
        bootstrap confidence interval over rounds and a verdict (faster, slower or
        within noise); the launch floor, the SM clock and warnings. A sequence's variants
        (a fusion: variants/fuse-<name>.json) are timed as whole sequences in `order`."""
        repro = R.reproducer(reproducer)
        variants = [R.cubin(repro, c) for c in cubins]
        order = options.pop("order", None)
        request = render.from_tool(api.CompareRequest, options, cubins=tuple(str(v) for v in variants))
        result = await state.blocking(ctx, "compare", lambda: state.session(repro, lambda s: s.compare(request),
                                                                            order), reproducer=repro)
        return result.to_dict()


def _inspect_tools(server: MCPServer, state: KerncapMCP) -> None:
    """The tools of the GPU: Nsight Compute, and closing a session."""
    R = state.roots

    @server.tool()
    @kerncap_tool
    async def ncu(ctx: Context, reproducer: Reproducer, cubin: Cubin = None,
                  sections: Annotated[list[str] | None, Field(description=(
                      "ncu sections to collect (default SpeedOfLight, LaunchStats, Occupancy, "
                      "MemoryWorkloadAnalysis)"))] = None,
                  ncu_set: Annotated[str | None, Field(description="a section set instead (basic; full is slow)")] = None,
                  warmup: Annotated[int, Field(ge=0, le=10000, description="launches before the profiled one")] = 3,
                  flush_l2: Annotated[bool, Field(description="cold L2 for the profiled launch")] = False,
                  reuse: Annotated[bool, Field(description=(
                      "return the stored result of an earlier run on the same cubin bytes and setup"))] = True,
                  timeout_s: Annotated[float, Field(gt=0, description="kill ncu and its replay after this long")]
                  = api.NCU_TIMEOUT,
                  ) -> dict[str, Any]:
        """Nsight Compute on one replayed launch of the kernel (or the variant), in a replay
        server of its own under ncu (as `kerncap replay --ncu --json`): the key `metrics`
        (duration_ns, dram_read_bytes, dram_write_bytes, sm_pct, memory_pct, occupancy_pct,
        registers, ...), ncu's `findings` (rule, type, description, estimated speedup) and
        the stored `report` (.ncu-rep next to the variant). Compare two variants by calling
        it on each."""
        repro = R.reproducer(reproducer)
        variant = R.cubin(repro, cubin)
        cancel = api.Cancellation()
        result = await state.blocking(ctx, "ncu", lambda: state.session(repro, lambda s: s.ncu(
            variant, sections=sections, ncu_set=ncu_set, warmup=warmup, flush_l2=flush_l2, reuse=reuse,
            timeout=timeout_s, cancel=cancel)), on_cancel=cancel.cancel)
        return result.to_dict()

    @server.tool()
    @kerncap_tool
    async def release(reproducer: Reproducer) -> dict[str, Any]:
        """Close the reproducer's session: its resident replay server (it frees its GPU
        memory; the next validate or replay starts a new one) and compile worker."""
        repro = R.reproducer(reproducer)
        return {"reproducer": str(repro), "released": state.pool.close(repro)}


TOOL_GROUPS = (_profile_tool, _extract_tool, _verb_tools, _reproducer_tools, _build_tools, _fusion_tools,
               _check_tools, _timing_tools, _inspect_tools)


def serve(roots: Sequence[str | os.PathLike], *, http: str | None = None, max_resident: int = 4,
          replay_timeout: float | None = None, replay_server_cmd: Sequence[str] | None = None) -> None:
    """Run the server until the client goes away (stdio) or until interrupted (HTTP).
    SIGTERM and SIGHUP kill the replay servers before the process ends."""
    server = build_server(roots, max_resident=max_resident, replay_timeout=replay_timeout,
                          replay_server_cmd=replay_server_cmd)
    state: KerncapMCP = server.kerncap  # type: ignore[attr-defined]

    def terminate(signum, _frame) -> None:
        state.shutdown()
        os._exit(128 + signum)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, terminate)
    api.apps_take_sigint()  # tools start apps from threads
    try:
        if http is None:
            server.run("stdio")
        else:
            host, port = parse_http(http)
            check_port(host, port)
            server.run("streamable-http", host=host, port=port)
    finally:
        state.shutdown()


def check_port(host: str, port: int) -> None:
    """Bind HOST:PORT once before the server starts, so that a busy port or an unknown
    host is one message of kerncap's (uvicorn would log a bare error and exit)."""
    hint = f"pick another port (`--http {host}:PORT`), or stop what listens on {port}"
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                              flags=socket.AI_PASSIVE)[0]
    except socket.gaierror as exc:
        raise UsageError(f"--http {host}:{port}: cannot resolve {host!r} ({exc.strerror})",
                         "give an address of this machine, e.g. --http 127.0.0.1:8765") from None
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            probe.bind(address)
        except OSError as exc:
            raise KerncapError(f"cannot serve MCP on {host}:{port}: {exc.strerror or exc}", hint) from None


def parse_http(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise UsageError(f"--http {text!r} is not HOST:PORT", "e.g. --http 127.0.0.1:8765")
    return (host.strip("[]") or "127.0.0.1"), int(port)

