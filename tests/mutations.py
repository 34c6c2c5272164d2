"""The mutation check: break the engine on purpose, one mutation at a time, and show that
the CPU tests named for that behaviour fail. Run by hand (not collected by pytest, not
in CI), from the repository root, with the suite's environment:

    PYTHONPATH=engine:. python3 tests/mutations.py [--only NAME ...] [--list]

Each mutation replaces one exact snippet of one file (which must occur exactly once) in
a scratch copy of the tree (the working tree is never touched), runs its test files
there (`pytest -x -q`, in the suite's random order), and counts it caught when they fail.
The unmutated copy must pass the same tests first, so a failure is the mutation's. Exit
status 0 when every mutation was caught, 1 otherwise. docs/testing.md shows a run.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Mutation:
    name: str
    area: str
    path: str
    old: str
    new: str
    tests: tuple[str, ...]  # pytest arguments: files, optionally with -k


MUTATIONS = [
    # -- the four hollow tests of issue 27 -------------------------------------------------
    Mutation("guards: place() places nothing", "replay", "engine/kerncap/replay/va_guards.py",
             "    placed = []\n    for at in guards_for(spans):", "    placed = []\n    for at in []:",
             ("tests/test_va_guards.py",)),
    Mutation("guards: a taken address stops the placement", "replay", "engine/kerncap/replay/va_guards.py",
             "        if got in (None, _MAP_FAILED):\n            continue", "        if got in (None, _MAP_FAILED):\n            break",
             ("tests/test_va_guards.py",)),
    Mutation("workbench: restore does nothing", "workbench", "engine/kerncap/reproducer/history.py",
             '            self.repo().git.checkout(self._commit_of(v), "--", "source")', "            self._commit_of(v)",
             ("tests/tui/test_app.py", "-k", "restore")),
    Mutation("MCP/validate: a set is checked on its first member only", "validation", "engine/kerncap/session/sets.py",
             "        reports = [x for m in run.runs for x in m.validation.reproducers]\n",
             "        reports = [x for m in run.runs for x in m.validation.reproducers][:1]\n",
             ("tests/test_mcp_server.py", "-k", "reproducer_set")),
    Mutation("stack: the capture's GPU name is not filled in", "provenance", "engine/kerncap/core/stack.py",
             '        stack["gpu"]["name"] = manifest_gpu.get("name")', "        pass",
             ("tests/test_stack.py",)),
    # -- capture format ---------------------------------------------------------------------------
    Mutation("format: a payload's hash is not checked", "capture format", "engine/kerncap/reproducer/format.py",
             "        if xxhash.xxh64_hexdigest(data) != h:", "        if False:",
             ("tests/test_damaged_input.py",)),
    Mutation("schema: any chunk size is accepted", "capture format", "engine/kerncap/reproducer/schemas.py",
             '"chunk_size": Int(min=4096, max=1 << 28),', '"chunk_size": Int(),',
             ("tests/test_damaged_input.py",)),
    # -- validation -------------------------------------------------------------------------------
    Mutation("validate: byte-exact checks always pass", "validation", "engine/kerncap/replay/results.py",
             "            return self.mismatched_bytes == 0", "            return True",
             ("tests/test_differential.py",)),
    Mutation("compare: an infinity is within tolerance of a finite value", "validation",
             "engine/kerncap/core/dtypes.py",
             "        return True\n    return not (abs(actual - expected) <= atol + rtol * abs(expected))",
             "        pass\n    return not (abs(actual - expected) <= atol + rtol * abs(expected))",
             ("tests/test_compare_semantics.py",)),
    Mutation("compare: NaN never equals NaN", "validation", "engine/kerncap/core/dtypes.py",
             "        return not (math.isnan(actual) and math.isnan(expected))", "        return True",
             ("tests/test_compare_semantics.py",)),
    # -- store ------------------------------------------------------------------------------------
    Mutation("store: an object's hash is not checked", "store", "engine/kerncap/reproducer/store.py",
             "        if digest.hexdigest() != h:", "        if False:",
             ("tests/test_store.py",)),
    Mutation("store: hard-linked objects are read", "store", "engine/kerncap/reproducer/store.py",
             "        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:", "        if not stat.S_ISREG(st.st_mode):",
             ("tests/test_store.py",)),
    Mutation("pack: --force does not replace an existing pack", "store", "engine/kerncap/reproducer/pack.py",
             "    if (out.exists() or out.is_symlink()) and not force:", "    if out.exists() or out.is_symlink():",
             ("tests/test_pack.py",)),
    # -- prune ------------------------------------------------------------------------------------
    Mutation("prune: pointers in memory are not followed", "prune", "engine/kerncap/prune/closure.py",
             '                        keep(index, f"pointer at region {region.id}+{offset:#x}" + (STORED_SUFFIX if n else ""),\n'
             "                             STORED if n else POINTERS)", "                        pass",
             ("tests/test_prune.py",)),
    Mutation("prune: a write no pointer reaches goes unnoticed", "prune", "engine/kerncap/prune/closure.py",
             "        unreached_written=[r for r in cap.regions if (r.written or r.pre != r.post) and r.id not in kept_set],",
             "        unreached_written=[],",
             ("tests/test_prune.py",)),
    Mutation("prune: a sequence's post-states are not scanned", "prune", "engine/kerncap/prune/closure.py",
             "    post = roots.post  # a sequence: post-states hold the pointers its launches stored",
             "    post = False",
             ("tests/test_sequence_prune.py",)),
    Mutation("prune: a sequence's copies and fills are not roots", "prune", "engine/kerncap/prune/roots.py",
             "        for start, length, role in _touched(st):", "        for start, length, role in []:",
             ("tests/test_sequence_prune.py",)),
    # -- sources ----------------------------------------------------------------------------------
    Mutation("sources: the first of several objects wins over the captured cubin's", "sources",
             "engine/kerncap/sources/discover.py",
             '            return same[0], "exact"', '            return cands[0], "exact"',
             ("tests/test_sources.py", "tests/test_sources_project.py")),
    # -- workbench --------------------------------------------------------------------------------
    Mutation("workbench: saves are not debounced", "workbench", "kerncap_tui/app.py",
             "        if self._debounce is not None:\n            self._debounce.stop()\n        self._debounce = self.set_timer",
             "        self._debounce = self.set_timer",
             ("tests/tui/test_app.py", "-k", "debounced")),
    Mutation("workbench: a replay that never answers is waited for", "workbench", "kerncap_tui/replay_limit.py",
             "    return api.open_session(root, replay_timeout=replay_timeout(), **options)",
             "    return api.open_session(root, **options)",
             ("tests/tui/test_replay_timeout.py",)),
]


def scratch_copy(dest: Path) -> None:
    """The tracked and untracked-but-not-ignored files of the tree (no build outputs)."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO, check=True,
                           capture_output=True).stdout.decode().split("\0")
    for rel in filter(None, files):
        src = REPO / rel
        if src.is_file() and not src.is_symlink():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)


def run_tests(tree: Path, tests: tuple[str, ...]) -> tuple[int, str, float]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tree / "engine"), str(tree)]))
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests], cwd=tree,
                          env=env, capture_output=True, text=True, timeout=1200)
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    return proc.returncode, (lines[-1] if lines else proc.stderr.strip()[-200:]), time.monotonic() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="+", metavar="NAME", help="run the mutations whose name contains one of these")
    ap.add_argument("--list", action="store_true", help="list the mutations and exit")
    args = ap.parse_args()
    chosen = [m for m in MUTATIONS if not args.only or any(o in m.name for o in args.only)]
    if args.list:
        for m in chosen:
            print(f"{m.area:15} {m.name}  ({m.path}; {' '.join(m.tests)})")
        return 0
    with tempfile.TemporaryDirectory(prefix="kerncap-mutations-") as tmp:
        tree = Path(tmp)
        scratch_copy(tree)
        for m in chosen:  # every snippet must be there exactly once, before anything runs
            count = (tree / m.path).read_text().count(m.old)
            if count != 1:
                print(f"{m.name}: the snippet occurs {count} times in {m.path}; update the mutation")
                return 2
        baseline = {}
        for tests in dict.fromkeys(m.tests for m in chosen):
            rc, last, seconds = run_tests(tree, tests)
            baseline[tests] = rc
            if rc != 0:
                print(f"unmutated tree: {' '.join(tests)} fails already ({last}); fix that first")
                return 2
        rows, missed = [], []
        for m in chosen:
            path = tree / m.path
            original = path.read_text()
            path.write_text(original.replace(m.old, m.new))
            try:
                rc, last, seconds = run_tests(tree, m.tests)
            finally:
                path.write_text(original)
            caught = rc != 0
            if not caught:
                missed.append(m.name)
            rows.append((m.area, m.name, " ".join(m.tests), "caught" if caught else "MISSED", f"{seconds:.0f} s", last))
            print(f"{'caught' if caught else 'MISSED':6}  {m.name}  [{' '.join(m.tests)}: {last}]", flush=True)
    print(f"\n{len(rows) - len(missed)} of {len(rows)} mutations caught" + (f"; missed: {', '.join(missed)}" if missed else ""))
    return 0 if not missed else 1


if __name__ == "__main__":
    raise SystemExit(main())
