"""The requests of the edit loop, each field declared once with its option (flag, type,
bounds, default, help: kerncap.core.option): ValidateRequest, ReplayRequest and
CompareRequest (kerncap.replay.requests, re-exported here), ApplyRequest
(kerncap.capture.apply, re-exported), SanitizeRequest (kerncap.replay.sanitize,
re-exported) and BuildRequest. The front
ends render them (kerncap.frontends.render: argparse, MCP tool schemas, the workbench's
settings); `Session` (kerncap.session) answers a request the same way wherever it came
from.
"""

from __future__ import annotations

from dataclasses import dataclass

from kerncap.capture.apply import APP_TIMEOUT_S, IDENTIFY_MODES, ApplyRequest  # noqa: F401  (api.options.ApplyRequest)
from kerncap.core.option import Option, check_fields, option_named, options_of  # noqa: F401  (the front ends' names)
from kerncap.errors import UsageError
from kerncap.replay.requests import *  # noqa: F401,F403  (one namespace of requests and options: api.options)
from kerncap.replay.sanitize import SanitizeRequest  # noqa: F401  (api.options.SanitizeRequest)
from kerncap.replay.requests import (MAX_PERTURBATIONS, MIN_ROUNDS, RUNS, TIMER, TIMING_INPUTS, CompareRequest,
                                     ValidateRequest)

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
BUILD_MODES = ("auto", "reduced", "full")
MODE = Option("mode", "--mode", str, "auto", "CUDA C++: auto compiles only what the captured kernel needs and falls "
              "back to the whole translation unit; reduced never falls back; full compiles the whole unit",
              choices=BUILD_MODES)
CONFIG = Option("config", "--config", str, None, "Triton only: compile options or an autotune config to pin, e.g. "
                "\"num_warps=4,BLOCK=64\" (see recompile)", nullable=True)
TRUST = Option("trust", "--trust", bool, False, "run recorded compile flags outside the allow-list (see recompile "
               "--trust)")
KERNEL = Option("kernel", "--kernel", str, None, "a sequence: the kernel to rebuild from kernels/<k>/source (its "
                "number or a part of its name); the whole sequence is then timed, validated and recorded with each "
                "launch's time", metavar="K", nullable=True)
FUSION = Option("fusion", "--fusion", str, None, "a sequence: build the fusion fusions/N/ (kerncap fuse) instead; "
                "the fused sequence is timed against the captured one, validated on what is live after the range and "
                "recorded with the fused launch's time against the replaced launches'", metavar="N", nullable=True)
INTERMEDIATES = Option("intermediates", "--intermediate", str, (), "with --fusion: a skeleton buffer only the "
                       "replaced launches use, left out of the comparison (repeatable; kerncap also infers them)",
                       metavar="BUF", many=True)


@dataclass(frozen=True)
class BuildRequest:
    """A build of the live loop: recompile the edited source, time the new cubin
    interleaved with the captured one, validate it (determinism, the captured input,
    `perturb` perturbed inputs) and record a History row."""

    config: str | None = CONFIG.field()        # Triton: options or an autotune config to pin
    mode: str = MODE.field()                   # CUDA C++: auto | reduced | full
    trust: bool = TRUST.field()                # run recorded compile flags outside the allow-list
    rounds: int = BUILD_ROUNDS.field()
    iterations: int = BUILD_ITERATIONS.field()
    perturb: int = BUILD_PERTURB.field()
    runs: int = RUNS.field()
    inputs: int = TIMING_INPUTS.field()
    timer: str = TIMER.field()
    kernel: str | None = KERNEL.field()        # a sequence: the kernel (its number or a part of its name) to rebuild
    fusion: str | None = FUSION.field()        # a sequence: the fusion (fusions/<name>/) to build instead
    intermediates: tuple[str, ...] = INTERMEDIATES.field()  # a fusion: skeleton buffers declared intermediates

    def checked(self) -> BuildRequest:
        if self.mode not in BUILD_MODES:
            raise UsageError(f"mode {self.mode!r} is none of auto, reduced, full", "e.g. mode auto")
        if self.fusion is not None and self.kernel is not None:
            raise UsageError("--kernel and --fusion: a build rebuilds one kernel or builds one fusion",
                             "drop one of them")
        if self.intermediates and self.fusion is None:
            raise UsageError("--intermediate goes with --fusion", "declare intermediates of the fusion you build")
        check_fields(self)
        return self

    def timing(self) -> CompareRequest:
        return CompareRequest(rounds=self.rounds, iterations=self.iterations, inputs=self.inputs, timer=self.timer)

    def validation(self, cubin: str | None) -> ValidateRequest:
        return ValidateRequest(cubin=cubin, runs=self.runs, perturb=self.perturb if cubin is not None else 0)
