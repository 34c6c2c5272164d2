"""`kerncap dump DIR [ITEM ...] [--state pre|post|output|expected ...] [--cubin F]
[--perturbation K [--seed S]] [--dtype T] [--shape D0,D1,...] [-o OUT] [--json]`"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from kerncap import api
from kerncap.commands.arguments import non_negative_int, positive_int, shape
from kerncap.commands.replay import check_cubin


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "dump",
        help="write regions, arguments or module globals as .npy arrays (captured states, a variant's output)",
        description="Write captured items as .npy files numpy loads with their dtype and shape (Triton tensor "
                    "metadata, the kernel's C++ parameter types, or --dtype/--shape), with a JSON sidecar per item "
                    "saying where the tensor lies (offset, strides) and how that is known. pre/post come from the "
                    "capture (no GPU); output is what --cubin (default: the captured cubin) leaves there on the "
                    "captured input or on --perturbation K, and expected what validate compares it with (both "
                    "replay on the GPU). The bytes are exactly those validate compares. Exit status 0: written; "
                    "3: could not (no space, a faulting variant, no GPU).",
    )
    p.add_argument("path", type=Path, metavar="DIR", help="reproducer directory (or its capture/ directory)")
    p.add_argument("items", nargs="*", metavar="ITEM",
                   help="REGION (an id), arg:N (the region argument N points into, typed by it), global:NAME; "
                        "default: every item the kernel wrote")
    p.add_argument("--state", action="append", choices=api.DUMP_STATES, metavar="S",
                   help="pre, post, output, expected (repeatable; default: pre and post, plus output and expected "
                        "with --cubin or --perturbation)")
    p.add_argument("--cubin", type=Path, metavar="F", help="the variant whose output to write")
    p.add_argument("--perturbation", type=positive_int, metavar="K",
                   help="run on perturbed input K (as `validate --perturb` numbers them) instead of the captured one")
    p.add_argument("--seed", type=non_negative_int, default=0, metavar="S", help="seed of the perturbation (0)")
    p.add_argument("--dtype", metavar="T", help="element type to write instead of the known one (e.g. float16)")
    p.add_argument("--shape", type=shape, metavar="D0,D1,...",
                   help="tensor shape of the one item named (row-major; -1 for one dimension)")
    p.add_argument("-o", "--output", type=Path, metavar="OUT", help="directory (default: DIR/dumps/<cubin>)")
    p.add_argument("--device", type=non_negative_int, default=0, help="GPU ordinal (0) for output/expected")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    check_cubin(args.cubin)
    states = args.state or (["pre", "post", "output", "expected"] if args.cubin or args.perturbation
                            else ["pre", "post"])
    result = api.dump(args.path, args.items, list(dict.fromkeys(states)), cubin=args.cubin,
                      perturbation=args.perturbation, seed=args.seed, dtype=args.dtype, shape=args.shape,
                      output=args.output, device=args.device)
    print(json.dumps(result.to_dict(), indent=1) if args.json else api.format_dump(result))
    return 0
