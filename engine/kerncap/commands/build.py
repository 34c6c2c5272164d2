"""`kerncap build DIR|SET [--config C] [--full|--reduced] [--trust] [--kernel K | --fusion N] [--rounds R] [--perturb K] [--json]`:
the workbench's build from the command line — recompile the edited source, time the new
cubin interleaved with the captured one, validate it and record a History row."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from kerncap import api
from kerncap.commands.arguments import non_negative_int
from kerncap.errors import EXIT_FAILED, EXIT_OK
from kerncap.frontends import render


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "build",
        help="recompile, time against the captured cubin, validate and record a variant (the workbench's build)",
        description="One build of the live loop, as the workbench's `b` and MCP's build tool run it: recompile the "
                    "reproducer's edited source, time the new cubin interleaved with the captured one (a speedup "
                    "with its confidence interval), validate it (determinism, the captured input, perturbed inputs) "
                    "and record it in the reproducer's variant history (history.json and its git log), where "
                    "`kerncap tui` and `kerncap check` see it. The first build records the baseline too. An "
                    "unchanged source builds nothing. Exit status 0: a passing variant (or unchanged), 1: it "
                    "failed validation, 3: it could not be built or replayed.",
    )
    p.add_argument("reproducer", type=Path, metavar="DIR", help="reproducer directory, or a reproducer set")
    render.add_request(p, api.BuildRequest, ("config",))
    how = p.add_mutually_exclusive_group()
    how.add_argument("--full", action="store_true", help="CUDA: compile the whole translation unit")
    how.add_argument("--reduced", action="store_true", help="CUDA: compile only what the kernel needs, no fallback")
    render.add_request(p, api.BuildRequest, ("trust", "kernel", "fusion", "intermediates", "rounds", "iterations",
                                             "perturb", "runs", "inputs", "timer"))
    p.add_argument("--device", type=non_negative_int, default=0, help="GPU ordinal (0)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    request = render.from_args(api.BuildRequest, args,
                               mode="full" if args.full else "reduced" if args.reduced else "auto")
    log: list[str] = []

    def progress(text: str, _level: str = "") -> None:
        log.append(text)
        if not args.json:
            print(text, flush=True)
        else:
            print(f"kerncap build: {text}", file=sys.stderr, flush=True)

    # The same call as the workbench's `b` and MCP's build tool: Session.build.
    with api.open_session(args.reproducer, device=args.device, compile_worker=False) as session:
        result = session.build(request, progress=progress)
    if args.json:
        print(json.dumps({**result.to_dict(), "log": log}, indent=1))
    v = result.variant
    return EXIT_OK if v is None or v.validation == "pass" else EXIT_FAILED if v.validation == "fail" else 3
