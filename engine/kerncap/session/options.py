"""One declaration per option and default of the edit loop: how a variant is validated
(determinism runs, perturbed inputs, tolerances), timed (rounds, iterations) and built.
The CLI renders them into argparse (`Option.add_to`), the MCP server into its tool
schemas (`Option.annotated`), the workbench and the fleet take the defaults from here;
a request (`ValidateRequest`, `CompareRequest`, `ReplayRequest`, `BuildRequest`) is the
same typed value in every front end, and `Session` (kerncap.session) answers it the
same way wherever it came from.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Annotated, Any, Literal

from kerncap.core import dtypes
from kerncap.errors import KerncapError, UsageError
from kerncap.replay.client import DEFAULT_TIMEOUT
from kerncap.replay.perturb import MAX_PERTURBATIONS, check_count
from kerncap.replay.significance import DEFAULT_CONFIDENCE, MIN_ROUNDS

_NO_DEFAULT = object()
check_perturb_count = check_count  # a K given explicitly must be 1..MAX_PERTURBATIONS


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

    # -- checking one value -----------------------------------------------------------------
    def problem(self, value: Any) -> str | None:
        """What is wrong with `value` in words ("must be >= 1 (got 0)"), or None."""
        if value is None:
            return None if self.nullable else "must be given"
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

    def parse(self, text: str) -> Any:
        """The argparse type: the value, or argparse's own usage error."""
        try:
            value = self.kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {'an integer' if self.kind is int else 'a number'} "
                                             f"(got {text!r})") from None
        problem = self.problem(value)
        if problem:
            raise argparse.ArgumentTypeError(problem)
        return value

    def check(self, value: Any) -> Any:
        """A value from a front end that parses no command line (the API, MCP): UsageError
        naming the option when it is out of bounds."""
        problem = self.problem(value)
        if problem:
            raise UsageError(f"{self.flag} {value}: {problem}", f"{self.help} ({self.default_text})")
        return value

    @property
    def default_text(self) -> str:
        if self.default is None:
            return "none"
        return f"{self.default:g}" if isinstance(self.default, float) else str(self.default).lower() \
            if isinstance(self.default, bool) else str(self.default)

    # -- rendering ------------------------------------------------------------------------
    def add_to(self, parser, *, default: Any = _NO_DEFAULT, help: str | None = None, **extra: Any) -> None:
        """This option on an argparse parser (or group): its flag, type, bounds, default."""
        flags = [self.flag] + ([self.short] if self.short else [])
        text = (help or self.help) + f" ({self.default_text if default is _NO_DEFAULT else default})"
        if self.kind is bool:
            parser.add_argument(*flags, action="store_true", help=text, dest=self.name, **extra)
            return
        if self.choices is not None:
            extra = {"choices": self.choices, **extra}
        parser.add_argument(*flags, type=self.parse, metavar=self.metavar, help=text, dest=self.name,
                            default=self.default if default is _NO_DEFAULT else default, **extra)

    def annotated(self, description: str | None = None) -> Any:
        """The MCP tool argument's type: Annotated[kind, Field(bounds, description)]."""
        from pydantic import Field

        bounds = {k: v for k, v in (("ge", self.minimum), ("le", self.maximum), ("gt", self.above),
                                    ("lt", self.below)) if v is not None}
        kind = Literal[self.choices] if self.choices is not None else self.kind
        kind = kind | None if self.nullable else kind
        return Annotated[kind, Field(description=description or self.help, **bounds)]


# -- validation --------------------------------------------------------------------------------

RUNS = Option("runs", "--runs", int, 3, "replays of the captured kernel that decide whether it is deterministic "
              "(1 skips the check)", minimum=1, maximum=100, metavar="N")
PERTURB = Option("perturb", "--perturb", int, 0, "also validate on K perturbed copies of the captured input "
                 "(numeric regions of known dtype redrawn; indices, pointers and unknown regions kept); they must "
                 "agree with the captured kernel (0: the captured input only)", minimum=0,
                 maximum=MAX_PERTURBATIONS, metavar="K")
SEED = Option("seed", "--seed", int, 0, "seed of the perturbations", minimum=0, metavar="S")
ATOL = Option("atol", "--atol", float, None, "absolute tolerance (tolerance mode)", minimum=0.0, metavar="A",
              nullable=True)
RTOL = Option("rtol", "--rtol", float, None, "relative tolerance (tolerance mode)", minimum=0.0, metavar="R",
              nullable=True)

# -- timing --------------------------------------------------------------------------------------

REPLAY_ITERATIONS = Option("iterations", "--iterations", int, 20, "timed launches", minimum=1, maximum=100000,
                           metavar="N", short="-n")
REPLAY_WARMUP = Option("warmup", "--warmup", int, 3, "untimed launches first", minimum=0, maximum=10000,
                       metavar="W", short="-w")
FLUSH_L2 = Option("flush_l2", "--flush-l2", bool, False, "cold L2: evict it before every launch (outside the timing)")
ROUNDS = Option("rounds", "--rounds", int, 30, f"interleaved rounds (at least {MIN_ROUNDS})", minimum=MIN_ROUNDS,
                maximum=100000, metavar="R")
COMPARE_ITERATIONS = Option("iterations", "--iterations", int, 10, "timed launches per program and round",
                            minimum=1, maximum=100000, metavar="N", short="-n")
COMPARE_WARMUP = Option("warmup", "--warmup", int, 2, "untimed launches per program and round", minimum=0,
                        maximum=10000, metavar="W", short="-w")
TIMING_INPUTS = Option("inputs", "--inputs", int, 4, "inputs the timed launches rotate over: the captured one and "
                       "K-1 perturbed ones (as validate --perturb draws them from --seed), so that a program "
                       "whose speed comes from having seen an input before shows none (1: the captured input "
                       "alone)", minimum=1, maximum=16, metavar="K")
MIN_TIME = Option("min_seconds", "--min-time", float, 0.0, "add rounds until every program has S seconds of "
                  "measured kernel time", minimum=0.0, metavar="S")
MAX_TIME = Option("max_seconds", "--max-time", float, 300.0, "stop adding rounds after S seconds of wall time",
                  above=0.0, metavar="S")
CONFIDENCE = Option("confidence", "--confidence", float, DEFAULT_CONFIDENCE, "confidence of the intervals",
                    minimum=0.5, below=1.0, metavar="C")

# -- a build of the live loop: recompile, timing interleaved with the captured cubin, validation --

BUILD_ROUNDS = Option("rounds", "--rounds", int, 20, "interleaved rounds of the variant against the captured cubin",
                      minimum=MIN_ROUNDS, maximum=100000, metavar="R")
BUILD_ITERATIONS = Option("iterations", "--iterations", int, 10, "timed launches per program and round",
                          minimum=1, maximum=100000, metavar="N", short="-n")
BUILD_PERTURB = Option("perturb", "--perturb", int, 4, "perturbed inputs the variant must also agree on",
                       minimum=0, maximum=MAX_PERTURBATIONS, metavar="K")
# A set's members are timed one after the other (baseline and variant per member).
SET_ITERATIONS = Option("iterations", "--iterations", int, 20, "timed launches per member", minimum=1,
                        maximum=100000, metavar="N", short="-n")

# -- `kerncap check` / `kerncap sweep` on the fan-out --------------------------------------------------

FLEET_ITERATIONS = Option("iterations", "--iterations", int, 50, "timed launches", minimum=1, maximum=100000,
                          metavar="N", short="-n")
FLEET_WARMUP = Option("warmup", "--warmup", int, 5, "untimed launches first", minimum=0, maximum=10000,
                      metavar="W", short="-w")
FLEET_PERTURB = replace(PERTURB, help="also validate each variant on K perturbed inputs against the captured kernel "
                        "(docs/replay.md)")
# -- sequences (docs/sequences.md) ------------------------------------------------------------------

SEQUENCE_ORDERS = ("streams", "serial", "graph")
SEQUENCE_ORDER = Option("sequence_order", "--order", str, "streams", "how a sequence replays: streams (each step on a "
                        "stream standing for the app's, events and host syncs kept), serial (one stream, the recorded "
                        "order) or graph (the streams order captured once into a CUDA graph: no launch gaps)",
                        metavar="ORDER", choices=SEQUENCE_ORDERS)
PER_LAUNCH = Option("per_launch", "--per-launch", bool, False, "a sequence: replay also times each launch; validate "
                    "also finds the first launch after which the variant's state departs from the captured one")

REPLAY_TIMEOUT = Option("replay_timeout", "--replay-timeout", float, DEFAULT_TIMEOUT, "seconds one validation or timing may "
                        "take before its replay server is killed", above=0.0, metavar="S")


def dtype_name(text: str) -> str:
    """A dtype tolerance validation accepts (argparse type): "fp16" -> "float16"."""
    try:
        return dtypes.normalize(text)
    except KerncapError as exc:
        raise argparse.ArgumentTypeError(f"{exc.message}; {exc.hint}") from None


def region_dtype(text: str) -> tuple[int, str]:
    """REGION=DTYPE (argparse type): "3=bf16" -> (3, "bfloat16")."""
    rid, sep, name = text.partition("=")
    if not sep or not rid.strip().isdigit():
        raise argparse.ArgumentTypeError(f"expected REGION=DTYPE, e.g. 3=float16 (got {text!r})")
    return int(rid), dtype_name(name)


# -- requests ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ValidateRequest:
    """What to validate and how: the variant `cubin` (None: the captured cubin) after
    `runs` determinism replays, on the captured input and `perturb` perturbed ones."""

    cubin: str | None = None
    runs: int = RUNS.default
    perturb: int = PERTURB.default
    seed: int = SEED.default
    keep: tuple[int, ...] = ()
    atol: float | None = ATOL.default
    rtol: float | None = RTOL.default
    dtype: str | None = None
    region_dtypes: dict[int, str] = field(default_factory=dict)
    region_shapes: dict[int, tuple[int, ...]] = field(default_factory=dict)  # coordinates of the mismatch reports

    def checked(self) -> ValidateRequest:
        """The request with its policy applied: bounds, `keep` only with perturbations,
        and per-region dtypes alone asking for an element-wise comparison (float32 for
        the other regions) — the one place that rule lives."""
        for option in (RUNS, PERTURB, SEED, ATOL, RTOL):
            option.check(getattr(self, option.name))
        if self.perturb:
            check_count(self.perturb)
        elif self.keep:
            raise UsageError("--keep needs --perturb K", "e.g. --perturb 8 --keep 3")
        dtype = dtypes.normalize(self.dtype) if self.dtype else None
        region = {int(k): dtypes.normalize(v) for k, v in self.region_dtypes.items()}
        if region and dtype is None and self.atol is None and self.rtol is None:
            dtype = "float32"
        return replace(self, dtype=dtype, region_dtypes=region, keep=tuple(int(k) for k in self.keep),
                       region_shapes={int(k): tuple(int(x) for x in v) for k, v in self.region_shapes.items()})

    @property
    def tolerance(self) -> bool:
        return self.atol is not None or self.rtol is not None or self.dtype is not None


@dataclass(frozen=True)
class ReplayRequest:
    cubin: str | None = None
    iterations: int = REPLAY_ITERATIONS.default
    warmup: int = REPLAY_WARMUP.default
    flush_l2: bool = FLUSH_L2.default
    per_launch: bool = PER_LAUNCH.default  # a sequence: each launch timed too

    def checked(self) -> ReplayRequest:
        REPLAY_ITERATIONS.check(self.iterations)
        REPLAY_WARMUP.check(self.warmup)
        return self


def check_order(order: str | None) -> str | None:
    """A sequence replay order (UsageError naming the choices otherwise)."""
    if order is not None and order not in SEQUENCE_ORDERS:
        raise UsageError(f"--order {order!r}", f"use one of: {', '.join(SEQUENCE_ORDERS)}")
    return order


@dataclass(frozen=True)
class CompareRequest:
    """Time the captured cubin and `cubins` interleaved (a speedup with its interval each)."""

    cubins: tuple[str, ...] = ()
    rounds: int = ROUNDS.default
    iterations: int = COMPARE_ITERATIONS.default
    warmup: int = COMPARE_WARMUP.default
    flush_l2: bool = FLUSH_L2.default
    min_seconds: float = MIN_TIME.default
    max_seconds: float = MAX_TIME.default
    confidence: float = CONFIDENCE.default
    inputs: int = TIMING_INPUTS.default
    seed: int = SEED.default
    # perturbations (0-based, as validate numbers them minus one) the timing must not use:
    # those that made the captured kernel itself fault in a validation just before
    skip: tuple[int, ...] = ()

    def checked(self) -> CompareRequest:
        if self.rounds < MIN_ROUNDS:
            raise UsageError(f"--rounds {self.rounds} is too few for a confidence interval",
                             f"use at least {MIN_ROUNDS} ({ROUNDS.default} by default)")
        for option in (ROUNDS, COMPARE_ITERATIONS, COMPARE_WARMUP, MIN_TIME, MAX_TIME, CONFIDENCE, TIMING_INPUTS,
                       SEED):
            option.check(getattr(self, option.name))
        return self


@dataclass(frozen=True)
class BuildRequest:
    """A build of the live loop: recompile the edited source, time the new cubin
    interleaved with the captured one, validate it (determinism, the captured input,
    `perturb` perturbed inputs) and record a History row."""

    config: str | None = None      # Triton: options or an autotune config to pin
    mode: str = "auto"             # CUDA C++: auto | reduced | full
    trust: bool = False            # run recorded compile flags outside the allow-list
    rounds: int = BUILD_ROUNDS.default
    iterations: int = BUILD_ITERATIONS.default
    perturb: int = BUILD_PERTURB.default
    runs: int = RUNS.default
    inputs: int = TIMING_INPUTS.default
    kernel: str | None = None      # a sequence: the kernel (its number or a part of its name) to rebuild
    fusion: str | None = None      # a sequence: the fusion (fusions/<name>/) to build instead
    intermediates: tuple[str, ...] = ()  # a fusion: skeleton buffers declared intermediates

    def checked(self) -> BuildRequest:
        if self.mode not in ("auto", "reduced", "full"):
            raise UsageError(f"mode {self.mode!r} is none of auto, reduced, full", "e.g. mode auto")
        if self.fusion is not None and self.kernel is not None:
            raise UsageError("--kernel and --fusion: a build rebuilds one kernel or builds one fusion",
                             "drop one of them")
        if self.intermediates and self.fusion is None:
            raise UsageError("--intermediate goes with --fusion", "declare intermediates of the fusion you build")
        for option in (BUILD_ROUNDS, BUILD_ITERATIONS, BUILD_PERTURB, RUNS, TIMING_INPUTS):
            option.check(getattr(self, option.name))
        return self

    def timing(self) -> CompareRequest:
        return CompareRequest(rounds=self.rounds, iterations=self.iterations, inputs=self.inputs)

    def validation(self, cubin: str | None) -> ValidateRequest:
        return ValidateRequest(cubin=cubin, runs=self.runs, perturb=self.perturb if cubin is not None else 0)


def add_options(parser, options: Sequence[Option], **defaults: Any) -> None:
    """Several options on one parser; `defaults` overrides a default by option name."""
    for option in options:
        if option.name in defaults:
            option.add_to(parser, default=defaults[option.name])
        else:
            option.add_to(parser)


def from_args(cls: Callable[..., Any], args: argparse.Namespace, options: Sequence[Option], **more: Any) -> Any:
    """A request from parsed arguments: each option's value under its name."""
    values = {o.name: getattr(args, o.name) for o in options if getattr(args, o.name, None) is not None}
    return cls(**values, **more)
