"""A variant's speedup in its reproducer beside its speedup in the unmodified app (issue
46's goal: the kernel's in-app GPU-time speedup within the interval of its replay speedup,
and the app's wall-time change with its interval).

    python3 bench/apply_speedup.py [--app cuda|triton] [--build DIR] [--n 4194304] [--runs 10] [--json FILE]

--app cuda (the default): the smooth kernel (testapps/cuda/smooth, a 64-tap filter over
--n floats, launched 5 times) is extracted with its sources; the README's edit (the
boundary check hoisted out of the inner loop, tests/gpu/smooth_edits.py) is built with
`kerncap build` (the History row's speedup: timed over 4 rotating inputs, every launch
checked). --app triton: the same filter as a @triton.jit kernel
(testapps/python/triton_smooth.py), its pinned source edited (smooth_edits.TRITON_EDIT: the tap weight's
volatile load made a plain one) and built the same way. Then `kerncap apply
--variant N --check --runs R` runs the app R times as it is and R times with the variant,
interleaved, and reports the kernel's total GPU time (CUPTI, as `kerncap profile`) and the
app's wall time, each as a speedup with its interval, and --check's verdict over every
launch. The apply is run a second time without --check, so --check's cost shows as the
difference of the two commands' wall times.

One clock on both sides (--clock-rounds R, 0 to skip): the replay's speedup is timed with
CUDA events, the app's with CUPTI's activity records. To tell a difference of clocks from
a difference of the kernel's surroundings (the app's back-to-back launches against the
replay's restores), the reproducer is also replayed under `kerncap profile` (CUPTI, the
app's clock), the captured cubin and the variant alternating R times, and that speedup (the
median of the rounds' ratios of mean GPU time per launch, with their range) is printed
beside the other two. That replay is a plain `kerncap replay`, which times the captured
input alone (the cold L2 state of `--inputs 1`, facts §48): --clock-l2 warm (the default)
adds `--warm-l2`, the app's state; --clock-l2 cold leaves it as §47 ran it.

The replay is also timed with the L2 flushed before each launch (--flush-l2, cold) and
with the kernel's memory read into it (--warm-l2, as an app that has just produced its
inputs leaves them): where the in-app speedup falls among these says how much of a gap is
the cache the launch starts from.

--alloc vmm runs the CUDA app in the apply runs with x and y mapped as the replay maps its
regions (cuMemCreate + cuMemMap of whole minimum granules, smooth's argv[3]): if the app's
speedup then falls to the replay's, the memory's backing is what differs (facts §48).

--idle US runs the CUDA app with the GPU drained after every launch and left idle US
microseconds (0: drained only); --no-memset without the app's zeroing of y before each
launch. Where the in-app speedup moves with them, the app's cadence (back-to-back launches
against launches after an idle GPU) is what differs from the replay (facts §52).

--launches L runs the app with L launches of the kernel in the apply runs (the capture is of
its usual 5): with many launches most of them run on a GPU already busy for a while, so an
in-app speedup that moves towards the replay's says the first launches of a run (a GPU
still raising its clocks) made the difference."""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import REPO, build_testapps, write_json  # noqa: E402


def kerncap(*args: str) -> tuple[int, dict, float]:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "kerncap", *args], capture_output=True, text=True, timeout=900)
    seconds = time.perf_counter() - t0
    try:
        return proc.returncode, json.loads(proc.stdout), seconds
    except ValueError:
        raise SystemExit(f"kerncap {' '.join(args[:2])} printed no JSON (status {proc.returncode}):\n"
                         f"{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}") from None


def interval(d: dict | None) -> str:
    if not d or d.get("speedup") is None:
        return "n/a"
    lo, hi = d.get("low"), d.get("high")
    return f"{d['speedup']:.3f}x" + (f" [{lo:.3f}-{hi:.3f}]" if lo is not None else "")


def meets(a: dict | None, b: dict | None) -> bool:
    return bool(a and b and a.get("low") is not None and b.get("low") is not None
                and a["low"] <= b["high"] and b["low"] <= a["high"])


def found(key: str, doc):
    """The first value of `key` anywhere in a JSON document (None if absent)."""
    if isinstance(doc, dict):
        if key in doc:
            return doc[key]
        doc = list(doc.values())
    if isinstance(doc, list):
        for v in doc:
            hit = found(key, v)
            if hit is not None:
                return hit
    return None


def compare_interval(doc) -> dict | None:
    """The variant's interval in a `kerncap replay --compare --json` document (its second
    program; the first is the captured cubin)."""
    if isinstance(doc, dict):
        if isinstance(doc.get("programs"), list) and len(doc["programs"]) > 1:
            return doc["programs"][1].get("interval")
        for v in doc.values():
            found = compare_interval(v)
            if found:
                return found
    return None


def replay_under_cupti(repro: Path, kernel: str, cubin: Path | None, launches: int, warm: bool) -> float:
    """Mean GPU time per launch (ns) of `kernel` replayed `launches` times under `kerncap
    profile` (CUPTI activity records: the clock `kerncap apply` times the app with)."""
    with tempfile.TemporaryDirectory(prefix="kc-one-clock-") as tmp:
        out = Path(tmp) / "profile.json"
        replay = [sys.executable, "-m", "kerncap", "replay", str(repro), "-n", str(launches), "-w", "3",
                  *(["--cubin", str(cubin)] if cubin else []), *(["--warm-l2"] if warm else [])]
        status, _, _ = kerncap("profile", "--json", "--output", str(out), "--", *replay)
        doc = json.loads(out.read_text())
    rows = [k for k in doc["kernels"] if k["name"] == kernel]
    if status != 0 or not rows:
        raise SystemExit(f"the replay under kerncap profile timed no {kernel} (status {status})")
    return rows[0]["total_ns"] / rows[0]["calls"]


def one_clock(repro: Path, kernel: str, cubin: Path, rounds: int, warm: bool, launches: int = 200) -> dict | None:
    """The replay speedup on CUPTI's clock: median and range of the per-round ratios."""
    if rounds <= 0:
        return None
    ratios = []
    for _ in range(rounds):
        ratios.append(replay_under_cupti(repro, kernel, None, launches, warm)
                      / replay_under_cupti(repro, kernel, cubin, launches, warm))
    ratios.sort()
    return {"speedup": ratios[len(ratios) // 2], "low": ratios[0], "high": ratios[-1], "ratios": ratios}


TRITON_APP = REPO / "testapps" / "python" / "triton_smooth.py"


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--app", choices=("cuda", "triton"), default="cuda",
                    help="the CUDA C++ smooth app or its Triton twin (triton_smooth.py)")
    ap.add_argument("--build", type=Path, help="testapps build directory (default: a temporary one, built now; "
                    "the CUDA app only)")
    ap.add_argument("--n", type=int, default=1 << 22, help="the smooth app's element count")
    ap.add_argument("--runs", type=int, default=10, help="app runs each way (apply --runs)")
    ap.add_argument("--launches", type=int, default=5,
                    help="the app's launches of the kernel in the apply runs (the capture is of its 5-launch run)")
    ap.add_argument("--clock-l2", choices=("warm", "cold"), default="warm",
                    help="the L2 state of the replay under CUPTI: warm (--warm-l2, the app's) or cold (a plain "
                         "replay's one captured input, as facts §47 ran it)")
    ap.add_argument("--clock-rounds", type=int, default=5,
                    help="rounds of the replay under kerncap profile (CUPTI, the app's clock); 0 skips it")
    ap.add_argument("--alloc", choices=("malloc", "vmm"), default="malloc",
                    help="vmm: the CUDA app's x and y from cuMemCreate + cuMemMap in the apply runs, as the replay "
                         "maps its regions (the capture stays of its cudaMalloc run): does the app's speedup move "
                         "to the replay's?")
    ap.add_argument("--idle", type=int, metavar="US",
                    help="the CUDA app drains the GPU after every launch and idles US microseconds (smooth's "
                         "'idle=US'; 0: drained, not idle)")
    ap.add_argument("--no-memset", action="store_true",
                    help="the CUDA app does not zero y before each launch (smooth's 'nomemset')")
    ap.add_argument("--timer", choices=("events", "kernel"), default="events",
                    help="what times the build's launches (kerncap build --timer): kernel is CUPTI's records, the "
                         "app's clock; an arm takes its own (e.g. --arms '4 --timer kernel')")
    ap.add_argument("--arms", default="4,1,4 --flush-l2,4 --warm-l2,1 --warm-l2",
                    help="the replay --compare arms, comma-separated: an input count and its flags")
    ap.add_argument("--plain", action=argparse.BooleanOptionalAction, default=True,
                    help="also apply without --check (its cost: the difference of the two wall times)")
    ap.add_argument("--identity", action="store_true",
                    help="also apply the captured cubin itself (no edit): its in-app 'speedup' over the app's own "
                         "module is what substituting alone does to the kernel's time (1.000 if nothing)")
    ap.add_argument("--json", help="write both documents here")
    args = ap.parse_args()
    if (args.alloc == "vmm" or args.idle is not None or args.no_memset) and args.app != "cuda":
        ap.error("--alloc vmm, --idle and --no-memset are the CUDA app's (smooth's modes)")
    if args.idle is not None and args.idle < 0:
        ap.error(f"--idle is microseconds, 0 or more (got {args.idle})")
    return args


def capture_and_edit(args: argparse.Namespace, work: Path) -> tuple[Path, list[str], str]:
    """The app's kernel extracted into work/smooth with its sources, and the faster edit
    made there: (reproducer, the app's command, the kernel's name)."""
    from kerncap.capture.extract import extract

    sys.path.insert(0, str(REPO / "tests" / "gpu"))
    from smooth_edits import SMOOTH_MANGLED, TRITON_SMOOTH_KERNEL, edit, kernel_header, triton_edit

    repro = work / "smooth"
    if args.app == "cuda":

        build = args.build or build_testapps(work / "testapps")
        command, kernel = [str(build / "smooth"), str(args.n)], SMOOTH_MANGLED
        extract(kernel, command, output=repro, match="exact", source_dir=REPO / "testapps" / "cuda",
                build_dir=build, timeout=120)
        edit(kernel_header(repro), "fast")
    else:
        command, kernel = [sys.executable, str(TRITON_APP), str(args.n)], TRITON_SMOOTH_KERNEL
        extract(kernel, command, output=repro, timeout=300)
        triton_edit(repro)
    return repro, command, kernel


def identity_apply(repro: Path, command: list[str], runs: int) -> dict:
    """`kerncap apply` of the captured cubin itself: the app's own module against the same
    code loaded and launched by the interposer (facts §48's gap: the module or the launch
    path, if this is not 1.000)."""
    from kerncap.reproducer.format import Capture

    cubin = Capture.open(repro).cubin_path
    return kerncap("apply", str(repro), "--cubin", str(cubin), "--runs", str(runs), "--json", "--", *command)[1]


def main() -> int:
    args = parse_args()
    with tempfile.TemporaryDirectory(prefix="kc-apply-speedup-") as tmp:
        repro, command, kernel = capture_and_edit(args, Path(tmp))
        applied_command = applied(command, args)
        status, built, _ = kerncap("build", str(repro), "--timer", args.timer, "--json")
        row = built.get("variant") or {}
        if status != 0 or row.get("validation") != "pass":
            raise SystemExit(f"the edited variant did not build and pass: {json.dumps(built)[:2000]}")
        # The same variant timed in the reproducer as `replay --compare` does, in each arm:
        # an input count (4: the build's rotation, a fill of x just before each launch; 1:
        # the captured input alone, nothing refilled) and an L2 state (flushed, or the
        # kernel's memory read into it): docs/facts.md §47, §48.
        ways = {arm: ["--inputs", *arm.split()] for arm in args.arms.split(",") if arm}
        docs = {k: kerncap("replay", str(repro), "--compare", str(repro / row["cubin"]), *way, "--rounds", "10",
                           "--json")[1] for k, way in ways.items()}
        compared = {k: compare_interval(d) for k, d in docs.items()}
        floors = {k: found("floor_ms", d) for k, d in docs.items()}
        status, applied, checked_s = kerncap("apply", str(repro), "--variant", str(row["id"]), "--check", "--runs",
                                             str(args.runs), "--json", "--", *applied_command)
        plain, plain_s = None, None
        if args.plain:
            _, plain, plain_s = kerncap("apply", str(repro), "--variant", str(row["id"]), "--runs", str(args.runs),
                                        "--json", "--", *applied_command)
        identity = identity_apply(repro, applied_command, args.runs) if args.identity else None
        cupti = one_clock(repro, kernel, repro / row["cubin"], args.clock_rounds, args.clock_l2 == "warm")
    report(args, row, compared, cupti, applied, status, checked_s, plain_s)
    print(f"  the replay's launch floor (an empty kernel between the same events), ms: {floors}")
    if identity is not None:
        print(f"  the captured cubin itself substituted in the app (kernel GPU time, as is / substituted): "
              f"{interval((identity.get('timing') or {}).get('kernel_speedup'))}")
    write_json(args.json, {"build": built, "apply": applied, "apply_plain": plain, "compare": compared, "cupti": cupti,
                           "identity": identity, "floor_ms": floors,
                           "seconds": {"checked": checked_s, "plain": plain_s}})
    return 0


def applied(command: list[str], args: argparse.Namespace) -> list[str]:
    """The app's command for the apply runs: its launch count and modes (smooth's argv[2:])."""
    modes = (["vmm"] if args.alloc == "vmm" else []) + ([f"idle={args.idle}"] if args.idle is not None else []) \
        + (["nomemset"] if args.no_memset else [])
    return command + ([str(args.launches)] if args.launches != 5 or modes else []) + modes


def per_launch_us(timing: dict) -> tuple[float, float] | None:
    """The kernel's GPU time per launch in the app, median over runs (µs), as is and with the variant."""
    ms, calls = timing.get("kernel_ms"), timing.get("kernel_calls")
    if not ms or not calls or not all(ms) or not all(calls):
        return None
    return tuple(statistics.median(1e3 * m / c for m, c in zip(ms[i], calls[i]) if c) for i in (0, 1))


def report(args: argparse.Namespace, row: dict, compared: dict, cupti: dict | None, applied: dict, status: int,
           checked_s: float, plain_s: float | None) -> None:
    t, check = applied.get("timing") or {}, applied.get("check") or {}
    replay = {"speedup": row.get("speedup"), "low": row.get("speedup_low"), "high": row.get("speedup_high")}
    kern = t.get("kernel_speedup")
    share = t.get("share") or [None]
    edit_name = "the README's edit" if args.app == "cuda" else "the plain tap load"
    print(f"{args.app} smooth over {args.n} floats, {edit_name} as History row {row['id']} "
          f"({row.get('validation')} {row.get('validation_detail')}):")
    print(f"  replay speedup (build, 4 rotating inputs, timer {row.get('timer') or 'events'}): {interval(replay)}")
    for k, iv in compared.items():
        print(f"  replay --compare --inputs {k}: {interval(iv)}")
    if cupti:
        print(f"  replay under kerncap profile (CUPTI, the app's clock; L2 {args.clock_l2}; "
              f"{args.clock_rounds} rounds, median [range]): {interval(cupti)}")
    print(f"  in the app, kernel GPU time ({args.runs} runs each way, {args.launches} launches a run): "
          f"{interval(kern)}")
    per = per_launch_us(t)
    if per:
        print(f"  in the app, per launch (median of runs, as is / with the variant): {per[0]:.2f} / {per[1]:.2f} us")
    print(f"  in the app, wall time: {interval(t.get('app_speedup'))}; the kernel's share of GPU time "
          f"{share[0] if share[0] is None else f'{share[0]:.1%}'}")
    print(f"  --check: {check.get('compared')} of {applied.get('launches')} launches compared, "
          f"mismatch {check.get('mismatch')}; exit {status}")
    if plain_s is not None:
        print(f"  kerncap apply wall time: {checked_s:.1f} s with --check, {plain_s:.1f} s without "
              f"(--check's cost {checked_s - plain_s:+.1f} s: two more runs of the app, fingerprinted)")
    inside = meets(kern, replay)
    print(f"goal (the in-app interval meets the replay interval): {'met' if inside else 'NOT met'}")
    for k, iv in compared.items():
        print(f"  with --compare --inputs {k}: {'met' if meets(kern, iv) else 'NOT met'}")
    if cupti:
        print(f"  with the replay on CUPTI's clock (its range): {'met' if meets(kern, cupti) else 'NOT met'}")


if __name__ == "__main__":
    sys.exit(main())
