"""How long `kerncap-tui` (the bundled demo, README's first command) takes from process
start to its first frame on the terminal (issue 47's goal: <= 1 s after install), beside
two baselines measured the same way in the same run:

    python3 bench/first_frame.py              # 7 rounds, 120x40 terminal
    python3 bench/first_frame.py --rounds 15 --importtime   # and the slowest imports

Each command runs on a pseudo-terminal (Textual's real driver, as a user's terminal
would run it); the clock starts just before the process is spawned and stops when the
terminal output holds the first frame: Textual paints a whole screen from its top-left
cell (`ESC[1;1H`), after the escapes that set the terminal up (the alternate screen,
mouse reporting), which hold no cursor position. The process then gets SIGTERM (the
workbench exits as on Ctrl-C). Baselines: `python -c "import textual"` (the interpreter and
Textual's import alone) and a Textual app with a header and a footer (the floor of any
Textual app's first frame). The rounds of the three commands interleave, so a load that
changes during the run changes all three alike; the median and the range are printed
with the load average."""

from __future__ import annotations

import argparse
import fcntl
import os
import pty
import select
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

MARKER = b"\x1b[1;1H"  # the first screen painted (see above)
MINIMAL_APP = """
from textual.app import App
from textual.binding import Binding
from textual.widgets import Footer, Header
class Minimal(App):
    BINDINGS = [Binding("q", "quit", "Quit")]
    def compose(self):
        yield Header()
        yield Footer()
Minimal().run()
"""


def frame_time(cmd: list[str], cols: int, rows: int, timeout: float, marker: bytes | None) -> float:
    """Seconds from spawning `cmd` on a pty of cols x rows until `marker` is in its output
    (marker None: until it exits)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": str(cols), "LINES": str(rows)}
    env.pop("TEXTUAL", None)  # no devtools
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdin=slave, stdout=slave, stderr=slave, env=env, start_new_session=True)
    os.close(slave)
    seen = b""
    try:
        while True:
            left = t0 + timeout - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"{cmd[0]}: no frame within {timeout:.0f} s; output so far: {seen[-400:]!r}")
            ready, _, _ = select.select([master], [], [], left)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:
                    chunk = b""
                if not chunk:  # the process closed the terminal
                    if marker is None:
                        break
                    raise RuntimeError(f"{cmd[0]} ended before its first frame: {seen[-400:]!r}")
                seen += chunk
                if marker is not None and marker in seen:
                    break
            if marker is None and proc.poll() is not None:
                break
        return time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            end = time.monotonic() + 10
            while proc.poll() is None and time.monotonic() < end:  # drain: a full pty blocks its exit
                if select.select([master], [], [], 0.1)[0]:
                    try:
                        os.read(master, 65536)
                    except OSError:
                        break
            if proc.poll() is None:
                proc.kill()
        proc.wait()
        os.close(master)


def importtime(python: str, module: str, top: int) -> list[tuple[int, str]]:
    """The `top` modules with the largest cumulative import time (µs) when importing `module`."""
    err = subprocess.run([python, "-X", "importtime", "-c", f"import {module}"], capture_output=True,
                         text=True, check=True).stderr
    rows = []
    for line in err.splitlines():
        if line.startswith("import time:") and "|" in line and "cumulative" not in line:
            _, cum, name = line[len("import time:"):].split("|")
            rows.append((int(cum), name.rstrip()))
    return sorted(rows, reverse=True)[:top]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--size", default="120x40", help="terminal COLSxROWS (default 120x40)")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds a frame may take before the run fails")
    ap.add_argument("--tui", help="the kerncap-tui to run (default: the one beside this Python)")
    ap.add_argument("--importtime", action="store_true", help="also list the slowest imports of kerncap_tui.app")
    args = ap.parse_args()
    cols, rows = (int(x) for x in args.size.lower().split("x"))
    tui = args.tui or shutil.which("kerncap-tui", path=str(Path(sys.executable).parent)) or shutil.which("kerncap-tui")
    if not tui:
        sys.exit("first_frame: kerncap-tui is not installed beside this Python; pip install . first, or give --tui")
    commands = {
        "python -c 'import textual'": ([sys.executable, "-c", "import textual"], None),
        "minimal Textual app, first frame": ([sys.executable, "-c", MINIMAL_APP], MARKER),
        "kerncap-tui (bundled demo), first frame": ([tui], MARKER),
    }
    times: dict[str, list[float]] = {name: [] for name in commands}
    load_before = os.getloadavg()
    for _ in range(args.rounds):
        for name, (cmd, marker) in commands.items():
            times[name].append(frame_time(cmd, cols, rows, args.timeout, marker))
    load_after = os.getloadavg()
    print(f"first frame, {args.rounds} rounds, {cols}x{rows} pty, {os.cpu_count()} cores, load average "
          f"{load_before[0]:.1f} before, {load_after[0]:.1f} after:")
    for name, ts in times.items():
        print(f"  {name}: median {statistics.median(ts):.2f} s (range {min(ts):.2f}-{max(ts):.2f})")
    if args.importtime:
        print("slowest imports of kerncap_tui.app (cumulative, one run):")
        for cum, name in importtime(sys.executable, "kerncap_tui.app", 15):
            print(f"  {cum / 1e6:6.3f} s {name}")


if __name__ == "__main__":
    main()
