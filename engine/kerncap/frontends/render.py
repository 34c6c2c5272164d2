"""The request records' options (kerncap.core.option, each declared once as a field of its
request) rendered for the front ends: argparse arguments for the CLI (`add`, `add_request`,
`from_args`) and MCP tool arguments (`annotated`, `tool_options`, `from_tool`). The
workbench builds its requests from the same records. Shared by the front ends (the only
module they all may import besides kerncap.api); it imports nothing but the API.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Annotated, Any, Literal

from kerncap import api

if TYPE_CHECKING:  # an annotation only: importing the options imports the engine
    Option = api.options.Option

_KEEP = object()


# -- argparse ------------------------------------------------------------------------------------


def argument_type(option: Option) -> Callable[[str], Any]:
    """The argparse type: the value, or argparse's own usage error (exit status 2)."""
    def parse(text: str) -> Any:
        try:
            value = option.convert(text) if option.convert is not None else option.kind(text)
        except ValueError as exc:
            if option.convert is not None:
                raise argparse.ArgumentTypeError(str(exc)) from None
            raise argparse.ArgumentTypeError(f"expected {'an integer' if option.kind is int else 'a number'} "
                                             f"(got {text!r})") from None
        problem = None if option.convert is not None else option.problem(value)
        if option.many and problem is None and option.minimum is not None and value < option.minimum:
            problem = f"must be >= {option.minimum:g} (got {value})"
        if problem:
            raise argparse.ArgumentTypeError(problem)
        return value
    parse.__name__ = option.name  # argparse names the type in its messages
    return parse


def add(parser, option: Option, *, default: Any = _KEEP, help: str | None = None, **extra: Any) -> None:
    """One option on an argparse parser (or group): its flag, type, bounds, default."""
    flags = [option.flag] + ([option.short] if option.short else [])
    value = option.default if default is _KEEP else default
    shown = option.default_text if default is _KEEP else "none" if default is None else default
    # a help of the caller's own says its default itself
    text = help or (option.help + ("" if option.many else f" ({shown})"))
    if option.kind is bool:
        parser.add_argument(*flags, action="store_true", help=text, dest=option.name, **extra)
        return
    if option.many:
        parser.add_argument(*flags, type=argument_type(option), action="append", default=[], metavar=option.metavar,
                            help=text, dest=option.name, **extra)
        return
    if option.choices is not None:
        extra = {"choices": option.choices, **extra}
    else:
        extra = {"type": argument_type(option), **extra}
    parser.add_argument(*flags, metavar=option.metavar, help=text, dest=option.name, default=value, **extra)


def _chosen(declared: dict[str, Option], names: Iterable[str] | None, exclude: Iterable[str]) -> list[str]:
    """`names` in that order, or every declared option but `exclude`: a field added to the
    request then reaches every front end that renders the whole request."""
    return list(names) if names is not None else [n for n in declared if n not in set(exclude)]


def add_request(parser, request: type, names: Iterable[str] | None = None, *, exclude: Iterable[str] = (),
                defaults: dict[str, Any] | None = None, helps: dict[str, str] | None = None) -> None:
    """The options `request` declares (those `names` lists, or all but `exclude`) on a parser."""
    declared = {o.name: o for o in api.options.options_of(request)}
    for name in _chosen(declared, names, exclude):
        extra = {} if defaults is None or name not in defaults else {"default": defaults[name]}
        add(parser, declared[name], help=(helps or {}).get(name), **extra)


def from_args(request: type, args: argparse.Namespace, **more: Any) -> Any:
    """The request of a command line: each declared option the parser has, by its name."""
    values = {}
    for option in api.options.options_of(request):
        if option.name in more or not hasattr(args, option.name):
            continue
        value = getattr(args, option.name)
        if option.many:
            value = dict(value) if isinstance(option.default, dict) else tuple(value)
        values[option.name] = value
    return request(**values, **more)


# -- MCP tool arguments ---------------------------------------------------------------------------


def annotated(option: Option, description: str | None = None) -> Any:
    """The MCP tool argument's type: Annotated[kind, Field(bounds, description)]."""
    from pydantic import Field

    bounds = {k: v for k, v in (("ge", option.minimum), ("le", option.maximum), ("gt", option.above),
                                ("lt", option.below)) if v is not None}
    if option.many:
        item = Annotated[option.kind, Field(**bounds)] if bounds else option.kind
        kind = option.mcp_kind if option.mcp_kind is not None else list[item]
        return Annotated[kind | None, Field(description=description or option.help)]
    kind = Literal[option.choices] if option.choices is not None else option.mcp_kind or option.kind
    kind = kind | None if option.nullable else kind
    return Annotated[kind, Field(description=description or option.help, **bounds)]


def _argument(option: Option) -> str:
    return option.mcp_name or option.name


def tool_options(request: type, names: Iterable[str] | None = None, *, exclude: Iterable[str] = (),
                 descriptions: dict[str, str] | None = None) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A tool's keyword arguments rendered from `request`'s declarations (the tool takes
    them as **options and passes them to `from_tool`): the SDK reads the signature."""
    declared = {o.name: o for o in api.options.options_of(request)}
    names = _chosen(declared, names, exclude)

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        sig = inspect.signature(fn, eval_str=True)  # the module's own names (Reproducer, Context)
        fixed = [p for p in sig.parameters.values() if p.kind is not p.VAR_KEYWORD]
        rendered = []
        for name in names:
            option = declared[name]
            default = None if option.many else option.default
            rendered.append(inspect.Parameter(_argument(option), inspect.Parameter.KEYWORD_ONLY, default=default,
                                              annotation=annotated(option, (descriptions or {}).get(name))))
        params = fixed + rendered
        fn.__signature__ = sig.replace(parameters=params)
        fn.__annotations__ = {**{p.name: p.annotation for p in params}, "return": sig.return_annotation}
        return fn
    return decorate


def from_tool(request: type, arguments: dict[str, Any], **more: Any) -> Any:
    """The request of a tool call: its rendered arguments back under their field names."""
    values = {}
    for option in api.options.options_of(request):
        if _argument(option) not in arguments or option.name in more:
            continue
        value = arguments[_argument(option)]
        if option.many:
            value = dict(value or {}) if isinstance(option.default, dict) else tuple(value or ())
        values[option.name] = value
    return dataclasses.replace(request(), **values, **more)
