"""The requests of the verbs on an open reproducer that the replay layer answers
(validate, replay, compare), each field declared once with its option (flag, type,
bounds, default, help: kerncap.core.option). The engine checks them here
(`.checked()`); the front ends render them (kerncap.frontends.render): the CLI's flags,
MCP's tool arguments and the workbench's settings are the same declarations, so a request
means the same wherever it came from (kerncap.session answers it).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from kerncap.core import dtypes
from kerncap.core.option import Option, check_fields
from kerncap.errors import KerncapError, UsageError
from kerncap.replay.client import DEFAULT_TIMEOUT
from kerncap.replay.perturb import MAX_PERTURBATIONS, check_count
from kerncap.replay.significance import DEFAULT_CONFIDENCE, MIN_ROUNDS, TIMERS
from kerncap.replay.tensor_view import parse_shape

check_perturb_count = check_count  # a K given explicitly must be 1..MAX_PERTURBATIONS
SEQUENCE_ORDERS = ("streams", "serial", "graph")


def dtype_name(text: str) -> str:
    """A dtype tolerance validation accepts: "fp16" -> "float16" (ValueError otherwise)."""
    try:
        return dtypes.normalize(text)
    except KerncapError as exc:
        raise ValueError(f"{exc.message}; {exc.hint}") from None


def region_dtype(text: str) -> tuple[int, str]:
    """REGION=DTYPE: "3=bf16" -> (3, "bfloat16")."""
    rid, sep, name = text.partition("=")
    if not sep or not rid.strip().isdigit():
        raise ValueError(f"expected REGION=DTYPE, e.g. 3=float16 (got {text!r})")
    return int(rid), dtype_name(name)


def region_shape(text: str) -> tuple[int, tuple[int, ...]]:
    """REGION=SHAPE: "3=1024,1024" -> (3, (1024, 1024))."""
    rid, sep, dims = text.partition("=")
    if not sep or not rid.strip().isdigit():
        raise ValueError(f"expected REGION=SHAPE, e.g. 3=1024,1024 (got {text!r})")
    try:
        return int(rid), parse_shape(dims)
    except KerncapError as exc:
        raise ValueError(f"{exc.message}; {exc.hint}") from None


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
WARM_L2 = Option("warm_l2", "--warm-l2", bool, False, "warm L2: read the kernel's memory (up to the L2's size) before "
                 "every launch (outside the timing), as an app that has just produced it leaves it")
TIMER = Option("timer", "--timer", str, "events", "what times each launch: events (CUDA events around it: the "
               "launch with what the stream does between them) or kernel (CUPTI's record of its kernels' own run, "
               "the clock kerncap profile and kerncap apply time the app with; a variant whose launch spans more "
               "than its kernels' records gets no speedup on it)", metavar="T", choices=TIMERS)
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
                  "measured kernel time", minimum=0.0, metavar="S", mcp_name="min_time_s")
MAX_TIME = Option("max_seconds", "--max-time", float, 300.0, "stop adding rounds after S seconds of wall time",
                  above=0.0, metavar="S", mcp_name="max_time_s")
CONFIDENCE = Option("confidence", "--confidence", float, DEFAULT_CONFIDENCE, "confidence of the intervals",
                    minimum=0.5, below=1.0, metavar="C")

# -- sequences (docs/sequences.md) ------------------------------------------------------------------

SEQUENCE_ORDER = Option("sequence_order", "--order", str, "streams", "how a sequence replays: streams (each step on a "
                        "stream standing for the app's, events and host syncs kept), serial (one stream, the recorded "
                        "order) or graph (the streams order captured once into a CUDA graph: no launch gaps)",
                        metavar="ORDER", choices=SEQUENCE_ORDERS, mcp_name="order")
PER_LAUNCH = Option("per_launch", "--per-launch", bool, False, "a sequence: replay also times each launch; validate "
                    "also finds the first launch after which the variant's state departs from the captured one")

REPLAY_TIMEOUT = Option("replay_timeout", "--replay-timeout", float, DEFAULT_TIMEOUT, "seconds one validation or timing may "
                        "take before its replay server is killed", above=0.0, metavar="S")

# -- what a validation compares and how (ValidateRequest's own) ---------------------------------------

CUBIN = Option("cubin", "--cubin", str, None, "a variant cubin to run instead of the captured one (omit: the "
               "captured cubin)", metavar="F", nullable=True)
KEEP = Option("keep", "--keep", int, (), "never perturb this region (repeatable)", minimum=0, metavar="REGION",
              many=True)
DTYPE = Option("dtype", "--dtype", str, None, "element type of regions with no known dtype (tolerance mode; "
               "default float32): " + " ".join(dtypes.COMPARABLE), metavar="T", nullable=True, convert=dtype_name)
REGION_DTYPES = Option("region_dtypes", "--region-dtype", str, {}, "element type of one region (repeatable), e.g. "
                       "--region-dtype 3=bfloat16", metavar="ID=T", many=True, convert=region_dtype,
                       mcp_kind=dict[int, str])
REGION_SHAPES = Option("region_shapes", "--region-shape", str, {}, "tensor shape of a region for the mismatch "
                       "report's coordinates, e.g. 3=1024,1024", metavar="ID=SHAPE", many=True, convert=region_shape,
                       mcp_kind=dict[int, list[int]])


# -- requests ------------------------------------------------------------------------------------------


def check_l2(request) -> None:
    """--flush-l2 and --warm-l2 ask for opposite cache states before each launch."""
    if request.flush_l2 and request.warm_l2:
        raise UsageError("--flush-l2 and --warm-l2 ask for opposite L2 states",
                         "choose one: --flush-l2 (cold), --warm-l2 (the kernel's memory read just before), or "
                         "neither (as the restores before each launch leave it)")


@dataclass(frozen=True)
class ValidateRequest:
    """What to validate and how: the variant `cubin` (None: the captured cubin) after
    `runs` determinism replays, on the captured input and `perturb` perturbed ones."""

    cubin: str | None = CUBIN.field()
    runs: int = RUNS.field()
    perturb: int = PERTURB.field()
    seed: int = SEED.field()
    keep: tuple[int, ...] = KEEP.field()
    atol: float | None = ATOL.field()
    rtol: float | None = RTOL.field()
    dtype: str | None = DTYPE.field()
    region_dtypes: dict[int, str] = REGION_DTYPES.field()
    region_shapes: dict[int, tuple[int, ...]] = REGION_SHAPES.field()  # coordinates of the mismatch reports

    def checked(self) -> ValidateRequest:
        """The request with its policy applied: bounds, `keep` only with perturbations,
        and per-region dtypes alone asking for an element-wise comparison (float32 for
        the other regions) — the one place that rule lives."""
        check_fields(self)
        if self.perturb:
            check_count(self.perturb)
        elif self.keep:
            raise UsageError("--keep needs --perturb K", "e.g. --perturb 8 --keep 3")
        if any(int(k) < 0 for k in self.keep):
            raise UsageError(f"--keep {min(self.keep)}: a region id is >= 0", "e.g. --keep 3")
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
    """Time the kernel (or the variant `cubin`): `warmup` untimed launches, then `iterations`."""

    cubin: str | None = CUBIN.field()
    iterations: int = REPLAY_ITERATIONS.field()
    warmup: int = REPLAY_WARMUP.field()
    flush_l2: bool = FLUSH_L2.field()
    warm_l2: bool = WARM_L2.field()
    per_launch: bool = PER_LAUNCH.field()  # a sequence: each launch timed too
    timer: str = TIMER.field()

    def checked(self) -> ReplayRequest:
        check_fields(self)
        check_l2(self)
        if self.per_launch and self.timer != "events":
            raise UsageError("--per-launch with --timer kernel: a sequence's launches are timed one by one between "
                             "CUDA events only", "leave out --per-launch, or time with --timer events")
        return self


@dataclass(frozen=True)
class SequenceReplay:
    """How a sequence reproducer replays in a session (`Session.use_order`) and whether a
    replay or a validation also looks at each launch."""

    sequence_order: str = SEQUENCE_ORDER.field()
    per_launch: bool = PER_LAUNCH.field()


def check_order(order: str | None) -> str | None:
    """A sequence replay order (UsageError naming the choices otherwise)."""
    if order is not None and order not in SEQUENCE_ORDERS:
        raise UsageError(f"--order {order!r}", f"use one of: {', '.join(SEQUENCE_ORDERS)}")
    return order


@dataclass(frozen=True)
class CompareRequest:
    """Time the captured cubin and `cubins` interleaved (a speedup with its interval each)."""

    cubins: tuple[str, ...] = ()
    rounds: int = ROUNDS.field()
    iterations: int = COMPARE_ITERATIONS.field()
    warmup: int = COMPARE_WARMUP.field()
    flush_l2: bool = FLUSH_L2.field()
    warm_l2: bool = WARM_L2.field()
    min_seconds: float = MIN_TIME.field()
    max_seconds: float = MAX_TIME.field()
    confidence: float = CONFIDENCE.field()
    inputs: int = TIMING_INPUTS.field()
    seed: int = SEED.field()
    timer: str = TIMER.field()
    # perturbations (0-based, as validate numbers them minus one) the timing must not use:
    # those that made the captured kernel itself fault in a validation just before
    skip: tuple[int, ...] = ()

    def checked(self) -> CompareRequest:
        if self.rounds < MIN_ROUNDS:
            raise UsageError(f"--rounds {self.rounds} is too few for a confidence interval",
                             f"use at least {MIN_ROUNDS} ({ROUNDS.default} by default)")
        check_fields(self)
        check_l2(self)
        return self
