"""`kerncap sources KERNEL --source-dir DIR [--build-dir DIR] [--json]`: where a
kernel's source is, without running the application."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from kerncap import api


def register(sub) -> None:
    p = sub.add_parser("sources", help="find the source files and compile command of a CUDA C++ kernel in a built tree")
    p.add_argument("kernel", help="mangled name, or a demangled name / substring resolved among the built objects")
    p.add_argument("--source-dir", required=True, type=Path, help="root of the application's source tree")
    p.add_argument("--build-dir", type=Path, help="directory holding compile_commands.json and the objects")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    found = api.find_sources(args.kernel, args.source_dir, args.build_dir)
    report = found.report()
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"kernel            {found.kernel}")
    print(f"translation unit  {found.translation_unit}")
    print(f"found by          {found.method} ({found.confidence})")
    if found.object:
        print(f"object            {found.object}")
    print(f"compile in        {found.cwd}")
    print(f"compile command   {' '.join(found.compile_command)}  [{found.compile_command_origin}]")
    print("files")
    for f in report["files"]:
        mark = "  *" if f in report["line_table_files"] else "   "
        print(f"{mark} {f}")
    if report["line_table_files"]:
        print("  (* named by the kernel's line table)")
    for note in found.notes:
        print(f"note: {note}")
    return 0
