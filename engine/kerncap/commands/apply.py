"""`kerncap apply DIR (--cubin V | --variant N) [--check] -- CMD…`: the unmodified app with
a variant standing in for the captured kernel (docs/apply.md)."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict

from kerncap import api


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "apply",
        help="run the app with a variant substituted for the captured kernel",
        description="Run the unmodified app with a variant cubin standing in for the captured kernel (every "
        "launch, or --dispatch N,M…): the app's grid, block, shared memory and arguments, the module's globals "
        "copied in. --check compares what each launch wrote with the app's own kernel; the app is timed R times "
        "each way, interleaved. Exit status 0, 1 a --check mismatch, 4 the variant was refused (the app ran "
        "its own kernel), 3 could not run. docs/apply.md",
    )
    p.add_argument("path", metavar="DIR", help="the reproducer the kernel was captured into")
    v = p.add_mutually_exclusive_group()
    v.add_argument("--cubin", metavar="V", help="the variant cubin")
    v.add_argument("--variant", type=int, metavar="N", help="the variant of history.json's row N")
    p.add_argument("--dispatch", metavar="N[,M…]", help="substitute only these launches (from 0, as extract counts)")
    p.add_argument("--check", action="store_true",
                   help="run as is and with the variant; compare each launch's written buffers byte for byte")
    p.add_argument("--compare-output", action="append", default=[], metavar="PATH",
                   help="with --check: also compare this file the app writes (repeatable)")
    p.add_argument("--runs", type=int, default=5, metavar="R",
                   help="timed runs of the app each way, interleaved (default 5; 0: no timing)")
    p.add_argument("--identify", choices=("cubin", "name"), default="cubin",
                   help="identify the kernel by its cubin's sha256 and name (default) or by name alone")
    p.add_argument("--timeout", type=float, metavar="S", help="stop each run of the app after S seconds")
    p.add_argument("--quiet", action="store_true", help="do not pass the app's output through")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--cmd", metavar="CMD", help="the app's command as one string (instead of `-- CMD…`)")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    command = api.app_command(args.app_command, args.cmd)
    r = api.apply(args.path, command, cubin=args.cubin, variant=args.variant, dispatch=args.dispatch, check=args.check,
              compare_output=args.compare_output, runs=args.runs, identify=args.identify, timeout=args.timeout,
              quiet=args.quiet or args.json)
    if args.json:
        doc = {"variant": str(r.variant), "launches": r.launches, "substituted": r.substituted,
               "skipped_globals": r.skipped_globals, "check": asdict(r.check) if r.check else None,
               "timing": None}
        if r.timing:
            t = r.timing
            doc["timing"] = {"runs": t.runs, "app_s": t.app_s, "kernel_ms": t.kernel_ms, "share": t.share,
                             "app_speedup": asdict(t.app_interval) if t.app_interval else None,
                             "kernel_speedup": asdict(t.kernel_interval) if t.kernel_interval else None}
        doc["exit_status"] = r.exit_status
        print(json.dumps(doc, indent=1))
        return r.exit_status
    print(f"apply: {r.variant.name} substituted for {r.substituted} of {r.launches} launch(es)")
    if r.skipped_globals:
        print(f"  note: the variant has no {', '.join(r.skipped_globals)}: not mirrored")
    if r.check:
        print(r.check.text())
    if r.timing:
        print(r.timing.text("kernel"))
    return r.exit_status
