"""`kerncap apply DIR (--cubin V | --variant N) [--check] -- CMD…`: the unmodified app with
a variant standing in for the captured kernel (docs/apply.md). The flags are ApplyRequest's
options (rendered, as MCP's `apply` tool is); the open reproducer's Session answers it."""

from __future__ import annotations

import argparse
import json

from kerncap import api
from kerncap.frontends import render


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "apply",
        help="run the app with a variant substituted for the captured kernel",
        description="Run the unmodified app with a variant cubin standing in for the captured kernel (every "
        "launch, or --dispatch N,M…): the app's grid, block, shared memory and arguments, the module's globals "
        "copied in. --check compares what each launch wrote with the app's own kernel; the app is timed R times "
        "each way, interleaved. The outcome is kept on the variant's History row (the workbench's \"in app\"). "
        "Exit status 0, 1 a --check mismatch, 4 the variant was refused (the app ran its own kernel), 3 could "
        "not run, 2 a usage error. docs/apply.md",
    )
    p.add_argument("path", metavar="DIR", help="the reproducer the kernel was captured into")
    which = p.add_mutually_exclusive_group()
    render.add_request(which, api.options.ApplyRequest, ("cubin", "variant"))
    render.add_request(p, api.options.ApplyRequest, exclude=("cubin", "variant"))
    p.add_argument("--quiet", action="store_true", help="do not pass the app's output through")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--cmd", metavar="CMD", help="the app's command as one string (instead of `-- CMD…`)")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    command = api.app_command(args.app_command, args.cmd)
    request = render.from_args(api.options.ApplyRequest, args, command=tuple(command))
    quiet = args.quiet or args.json
    with api.open(args.path, compile_worker=False) as session:
        r = session.apply(request, output=(lambda _stream, _data: None) if quiet else None)
    print(json.dumps(r.to_dict(), indent=1) if args.json else r.text())
    return r.exit_status
