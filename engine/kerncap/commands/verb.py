"""`kerncap VERB DIR [options]` for every verb on an open reproducer that
kerncap.frontends.verbs declares (apply, sanitize): the flags are the verb's request's
options (rendered), the open reproducer's Session answers it, the result is printed as
its text or, with --json, its to_dict(); the exit status is the verb's."""

from __future__ import annotations

import argparse
import json
import sys

from kerncap import api
from kerncap.frontends import render, verbs
from kerncap.frontends.verbs import Run, Verb


class Command:
    """One verb as a command of cli.commands(): its name and `register(subparsers)`."""

    def __init__(self, verb: Verb):
        self.verb = verb
        self.name = verb.name

    def register(self, sub: argparse._SubParsersAction) -> None:
        verb = self.verb
        p = sub.add_parser(verb.name, help=verb.help, description=verb.description)
        p.add_argument("path", metavar="DIR", help="the reproducer" + (" the kernel was captured into"
                                                                       if verb.runs_app else ""))
        if verb.exclusive:
            render.add_request(p.add_mutually_exclusive_group(), verb.request, verb.exclusive)
        render.add_request(p, verb.request, exclude=verb.exclusive)
        if verb.runs_app:
            p.add_argument("--quiet", action="store_true", help="do not pass the app's output through")
        p.add_argument("--json", action="store_true", help="print the result as JSON")
        if verb.runs_app:
            p.add_argument("--cmd", metavar="CMD", help="the app's command as one string (instead of `-- CMD…`)")
        p.set_defaults(handler=self.handle)

    def handle(self, args: argparse.Namespace) -> int:
        verb = self.verb
        more, run = {}, Run(progress=_progress)
        if verb.runs_app:
            more["command"] = tuple(api.app_command(args.app_command, args.cmd))
            run = Run(output=(lambda _stream, _data: None) if args.quiet or args.json else None)
        request = render.from_args(verb.request, args, **more)  # the Session method checks it
        with api.open(args.path, compile_worker=False) as session:
            result = verb.call(session, request, run)
        print(json.dumps(result.to_dict(), indent=1) if args.json else verb.text(result))
        return verb.status(result)


def _progress(text: str) -> None:
    print(f"kerncap: {text}", file=sys.stderr, flush=True)


def commands() -> tuple[Command, ...]:
    """A command for every declared verb (read when the parser is built)."""
    return tuple(Command(v) for v in verbs.VERBS)
