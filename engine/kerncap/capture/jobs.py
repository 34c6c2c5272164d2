"""The app's whole process tree, so that stopping the app leaves nothing behind.

A process group is not enough for multi-process jobs: torchrun starts its workers in
sessions of their own, and a worker whose parent died is re-parented away from the
app. So while the app runs, its descendants are followed through /proc (pid, parent,
start time, so a reused pid is never mistaken for one of them), and kerncap makes
itself a child subreaper (Linux prctl), so an orphaned descendant is re-parented to
kerncap rather than to init and stays findable. Stopping the app signals the group
and every known descendant, waits, then SIGKILLs what is left, and reaps its orphans.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import time
from dataclasses import dataclass, field

PR_SET_CHILD_SUBREAPER = 36
SCAN_INTERVAL = 0.25  # seconds between /proc scans while the app runs


def enable_subreaper() -> bool:
    """Make orphaned descendants of this process its children (Linux only)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def read_process_table() -> dict[int, tuple[int, int]]:
    """pid -> (parent pid, start time in clock ticks) for every process in /proc."""
    table: dict[int, tuple[int, int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return table
    for name in entries:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read().decode(errors="replace")
        except OSError:
            continue  # exited meanwhile
        # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
        rest = stat[stat.rfind(")") + 2:].split()
        try:
            table[int(name)] = (int(rest[1]), int(rest[19]))
        except (IndexError, ValueError):
            continue
    return table


@dataclass
class ProcessTree:
    """The app's root process and every descendant seen since it started."""

    root: int
    known: dict[int, int] = field(default_factory=dict)  # pid -> start time
    _last_scan: float = 0.0

    def scan(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last_scan < SCAN_INTERVAL:
            return
        self._last_scan = now
        table = read_process_table()
        if self.root in table and self.root not in self.known:
            self.known[self.root] = table[self.root][1]
        children: dict[int, list[int]] = {}
        for pid, (ppid, _) in table.items():
            children.setdefault(ppid, []).append(pid)
        # From the root and from every known process still alive (a descendant whose
        # parent died hangs off kerncap, the subreaper, or off one of those).
        me = os.getpid()
        frontier = [p for p in self.known if self._same(p, table)] + [self.root]
        frontier += [p for p in children.get(me, []) if p in self.known]
        seen = set(frontier)
        while frontier:
            for child in children.get(frontier.pop(), []):
                if child not in seen and child != me:
                    seen.add(child)
                    self.known.setdefault(child, table[child][1])
                    frontier.append(child)

    def _same(self, pid: int, table: dict[int, tuple[int, int]]) -> bool:
        return pid in table and table[pid][1] == self.known.get(pid)

    def alive(self) -> list[int]:
        """Known processes still running (zombies count until reaped)."""
        table = read_process_table()
        return sorted(p for p in self.known if self._same(p, table))

    def signal(self, sig: int) -> int:
        """Signals every known live process but the root (signalled by the caller with
        its group); the number signalled."""
        sent = 0
        for pid in self.alive():
            if pid == self.root:
                continue
            try:
                os.kill(pid, sig)
                sent += 1
            except (ProcessLookupError, PermissionError):
                pass
        return sent

    def reap(self) -> None:
        """Collects orphans that were re-parented to kerncap (so they leave no zombie)."""
        for pid in list(self.known):
            if pid == self.root:
                continue
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass  # not our child: its own parent reaps it
            except OSError:
                pass


@dataclass
class StopReport:
    """What stopping the app took (AppOutcome.stop)."""

    processes: int = 0        # processes of the app running when it was stopped
    signals: list[str] = field(default_factory=list)  # signals sent, in order
    killed: int = 0           # still running after the last polite signal: SIGKILL
    leftover: list[int] = field(default_factory=list)  # alive even after SIGKILL (should never happen)

    def describe(self) -> str:
        if not self.processes:
            return ""
        text = f"stopped {self.processes} process(es) of the app with {'/'.join(self.signals) or 'no signal'}"
        if self.killed:
            text += f", {self.killed} needed SIGKILL"
        if self.leftover:
            text += f"; still running: pids {', '.join(map(str, self.leftover))}"
        return text


def signal_name(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return str(sig)
