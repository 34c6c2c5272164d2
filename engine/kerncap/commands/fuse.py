"""`kerncap fuse DIR --first A --last B [--name N]`: the skeleton of a fused kernel for
launches A..B of a sequence; `kerncap fuse DIR --name N --build [--intermediate BUF ...]`:
compile it into a sequence variant (docs/sequences.md, "Fusions")."""

from __future__ import annotations

import argparse
import json
import shlex
from pathlib import Path

from kerncap import api
from kerncap.commands.arguments import non_negative_int
from kerncap.errors import UsageError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "fuse",
        help="replace a range of a sequence's launches by one kernel you write (a skeleton, then a build)",
        description="Write the skeleton of a kernel replacing launches --first..--last of a sequence reproducer "
                    "(fusions/NAME/fused.cu, whose parameters are every buffer those launches take and their "
                    "scalar arguments, and fusion.json with the captured values and the launch to edit); after you "
                    "filled it in, --build compiles it and writes variants/fuse-NAME.json for validate and "
                    "replay --compare. Buffers only the replaced launches use are left out of the comparison when "
                    "inferred or declared (--intermediate), and named in every report.",
    )
    p.add_argument("path", type=Path, metavar="DIR", help="a sequence reproducer (kerncap extract --sequence)")
    p.add_argument("--first", type=non_negative_int, metavar="A", help="first launch of the range (kerncap info lists them)")
    p.add_argument("--last", type=non_negative_int, metavar="B", help="last launch of the range, included")
    p.add_argument("--name", default="1", metavar="N", help="the fusion's name (default: 1)")
    p.add_argument("--force", action="store_true", help="write the skeleton again over an existing one")
    p.add_argument("--build", action="store_true", help="compile fusions/N/fused.cu into variants/fuse-N.json")
    p.add_argument("--intermediate", action="append", default=[], metavar="BUF",
                   help="--build: a skeleton buffer only the replaced launches use, left out of the comparison "
                        "(repeatable; kerncap also infers them)")
    p.add_argument("--json", action="store_true", help="print the skeleton (its parameters, the launch) or the "
                                                       "built variant (what it leaves out) as JSON")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    q = shlex.quote(str(args.path))
    if args.build:
        if args.first is not None or args.last is not None:
            raise UsageError("--build compiles an existing skeleton", "drop --first/--last")
        variant = api.fuse_build(args.path, args.name, intermediates=args.intermediate)
        if args.json:
            print(json.dumps(api.fused_variant_info(variant), indent=1))
            return 0
        print(f"built       {variant}")
        print(f"next        kerncap validate {q} --cubin {shlex.quote(str(variant))} --per-launch  |  "
              f"kerncap replay {q} --compare {shlex.quote(str(variant))}")
        return 0
    if args.first is None or args.last is None:
        raise UsageError("a skeleton needs --first A and --last B", "e.g. kerncap fuse DIR --first 2 --last 3")
    if args.intermediate:
        raise UsageError("--intermediate goes with --build", "declare intermediates when you build the fusion")
    source = api.fuse_skeleton(args.path, args.first, args.last, args.name, force=args.force)
    if args.json:
        print(json.dumps(api.fusion_info(args.path, args.name), indent=1))
        return 0
    print(f"skeleton    {source}")
    print(f"launch      {source.parent / 'fusion.json'} (grid, block, shared_mem_bytes)")
    print(f"next        edit the kernel, then: kerncap fuse {q} --name {shlex.quote(args.name)} --build")
    return 0
