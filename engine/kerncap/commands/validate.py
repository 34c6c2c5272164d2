"""`kerncap validate DIR|SET [DIR ...] [--cubin F] [--perturb K [--seed S] [--keep R ...]] [--runs N]
[--atol A] [--rtol R] [--dtype T] [--region-dtype R=T ...] [--json]`"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from kerncap import api
from kerncap.commands import inspect_tools
from kerncap.commands.arguments import non_negative_int
from kerncap.commands.replay import check_cubin
from kerncap.errors import UsageError
from kerncap.frontends import render



def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "validate",
        help="replay on the GPU and compare with the captured post-state (and on perturbed inputs)",
        description="Check that the captured kernel is deterministic (--runs replays), then restore the pre-state, "
                    "launch the kernel (the captured cubin or --cubin VARIANT) and compare every region and module "
                    "global with the captured post-state on the GPU: byte-exact by default; with "
                    "--atol/--rtol/--dtype element-wise within |a-e| <= atol + rtol*|e| (NaN equals NaN; integer "
                    "dtypes exact); a nondeterministic kernel gets a tolerance derived from its own spread. "
                    "Memory the captured kernel did not write must stay unchanged. With --perturb K the captured "
                    "kernel and the variant also run on K modified inputs and must agree. Several DIRs (reproducers "
                    "of the same kernel) are all checked. Exit status 0: pass, 1: fail, 3: inconclusive or could "
                    "not run.",
    )
    p.add_argument("paths", type=Path, nargs="+", metavar="DIR",
                   help="reproducer directory (or its capture/ directory); several: reproducers of one kernel; a "
                        "reproducer set counts as its members")
    p.add_argument("--cubin", type=Path, metavar="F",
                   help="variant cubin to check instead of the captured one (a set: a cubin or variants/<n>.json; "
                        "then every member is also timed and the weighted speedup reported)")
    # every option of the request (a new one lands here), the perturbation group's below
    render.add_request(p, api.ValidateRequest, exclude=("cubin", "perturb", "seed", "keep", "runs"))
    g = p.add_argument_group("perturbed inputs and determinism (docs/replay.md)")
    # --perturb given must be 1..1000 (a message from the request's own check); absent: none.
    render.add(g, api.options.PERTURB, default=None, type=int)
    render.add_request(g, api.ValidateRequest, ("seed", "keep", "runs"))
    q = p.add_argument_group("sequences (docs/sequences.md)")
    render.add_request(q, api.SequenceReplay, defaults={"sequence_order": None})
    p.add_argument("--device", type=non_negative_int, default=0,
                   help="GPU ordinal (0): any GPU of the capture's architecture; the report says which ran")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    inspect_tools.add_sanitize_arguments(p)
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    check_cubin(args.cubin)
    if args.sanitize:  # a set's session refuses it, as through MCP
        return inspect_tools.handle_sanitize(args)
    inspect_tools.check_tool_flags(args, "--sanitize")
    if args.per_launch and len(args.paths) != 1:
        # one sequence; the session refuses any other shape before anything runs, as MCP's
        raise UsageError("--per-launch localizes inside one sequence reproducer",
                         "pass one reproducer made with `kerncap extract --sequence`")
    request = request_from(args)
    report, timing, localized = _validate(args, request)
    if args.json:
        print(json.dumps({**report.to_dict(), "set_timing": timing.to_dict() if timing else None,
                          **({"per_launch": localized} if localized is not None else {})}, indent=1))
    else:
        print(api.format_trust_report(report))
        if timing is not None:
            print(api.format_set_run(timing))
        if localized is not None:
            print(api.format_localization(localized))
    return report.exit_status


def _validate(args: argparse.Namespace, request: api.ValidateRequest):
    """(the report, a set variant's timing, a sequence's first departing launch). One
    reproducer (or set) is validated through its session, as the workbench and MCP do: a
    set's variant is also timed on every member in the server that validated it (each
    member restored once), --per-launch localizes in that same server. Several DIRs (of
    one kernel) get one verdict over all their inputs."""
    if len(args.paths) > 1:
        return api.validate_request(args.paths, request, device=args.device, order=args.sequence_order), None, None
    with api.open(args.paths[0], device=args.device, order=args.sequence_order, compile_worker=False) as s:
        if args.per_launch:
            report, localized = s.validate_per_launch(request)
            return report, None, localized
        report, timing = s.validate_and_time(request)
        return report, timing, None


def request_from(args: argparse.Namespace) -> api.ValidateRequest:
    """The ValidateRequest of the command line (MCP's validate builds the same one)."""
    if args.perturb is not None:
        api.options.check_perturb_count(args.perturb)  # `--perturb 0` is refused; absent means none
    return render.from_args(api.ValidateRequest, args, cubin=None if args.cubin is None else str(args.cubin),
                            perturb=args.perturb or 0).checked()
