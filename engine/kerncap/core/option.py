"""An option of a request, declared once: a request record (ValidateRequest, BuildRequest,
…) is a frozen dataclass whose fields carry their `Option` (flag, type, bounds, default,
help) as field metadata (`Option.field`). The engine checks a request's values with it
(`check_fields`); the front ends render the same declarations into argparse and MCP tool
schemas (kerncap.frontends.render): nothing else spells a flag, a bound or a default.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kerncap.errors import UsageError

METADATA_KEY = "kerncap.option"


@dataclass(frozen=True)
class Option:
    """One option: its name (the request field and the MCP argument), the CLI flag, the
    type and bounds, the default and one line of help."""

    name: str
    flag: str
    kind: type
    default: Any
    help: str
    minimum: float | None = None
    maximum: float | None = None
    below: float | None = None   # an exclusive upper bound
    above: float | None = None   # an exclusive lower bound
    metavar: str | None = None
    short: str | None = None
    nullable: bool = False       # None is a value (atol: no tolerance)
    choices: tuple[str, ...] | None = None  # the only values (argparse choices, an MCP enum)
    many: bool = False           # repeatable (--keep R --keep S): a tuple of `kind`
    # text -> value for what is not a plain `kind` (REGION=DTYPE); raises ValueError with the words
    convert: Callable[[str], Any] | None = None
    mcp_name: str | None = None  # the MCP argument's name where it differs (compare's min_time_s)
    mcp_kind: Any = None         # the MCP argument's type where it differs (dict[int, str] for REGION=DTYPE pairs)

    # -- checking one value -----------------------------------------------------------------
    def problem(self, value: Any) -> str | None:
        """What is wrong with `value` in words ("must be >= 1 (got 0)"), or None."""
        if value is None:
            return None if self.nullable else "must be given"
        if self.many or self.convert is not None:
            return None  # checked by the request (a whole list, a converted pair)
        if self.choices is not None:
            return None if value in self.choices else f"must be one of {', '.join(self.choices)} (got {value!r})"
        if self.kind is float and isinstance(value, float) and math.isnan(value) and self.minimum is None \
                and self.above is None:
            return f"must be a number (got {value})"  # NaN fails every bound below: said as that bound
        for bound, ok, word in ((self.minimum, lambda v, b: v >= b, ">="), (self.maximum, lambda v, b: v <= b, "<="),
                                (self.above, lambda v, b: v > b, ">"), (self.below, lambda v, b: v < b, "<")):
            if bound is not None and not ok(value, bound):
                return f"must be {word} {bound:g} (got {value})"
        return None

    def check(self, value: Any) -> Any:
        """A value from a front end that parses no command line (the API, MCP): UsageError
        naming the option when it is out of bounds."""
        problem = self.problem(value)
        if problem:
            raise UsageError(f"{self.flag} {value}: {problem}", f"{self.help} ({self.default_text})")
        return value

    @property
    def default_text(self) -> str:
        if self.default is None or self.many:
            return "none"
        return f"{self.default:g}" if isinstance(self.default, float) else str(self.default).lower() \
            if isinstance(self.default, bool) else str(self.default)

    def field(self, default: Any = dataclasses.MISSING) -> Any:
        """This option as a request's dataclass field (its default, unless the request has
        its own): the one place a request and its option meet."""
        value = self.default if default is dataclasses.MISSING else default
        if isinstance(value, (dict, list)):
            return dataclasses.field(default_factory=lambda: type(value)(value), metadata={METADATA_KEY: self})
        return dataclasses.field(default=value, metadata={METADATA_KEY: self})


def options_of(request: Any) -> list[Option]:
    """The options a request record (class or instance) declares, in field order."""
    return [f.metadata[METADATA_KEY] for f in dataclasses.fields(request) if METADATA_KEY in f.metadata]


def option_named(request: Any, name: str) -> Option:
    for option in options_of(request):
        if option.name == name:
            return option
    raise KeyError(f"{getattr(request, '__name__', type(request).__name__)} declares no option {name!r}")


def check_fields(request: Any) -> None:
    """Every declared option's value within its bounds (UsageError naming the flag)."""
    for option in options_of(request):
        option.check(getattr(request, option.name))
