"""A reproducer's variant history: every build is a git commit of `source/` in the
reproducer's own repository, its timing and validation in the commit trailer, mirrored
in `<dir>/history.json` (kerncap.reproducer.schemas.HISTORY_JSON) so it loads without
walking git. The workbench, `kerncap build`, MCP's `build` (kerncap.session) write it;
`kerncap check` re-validates its best variant and `kerncap list` shows its baseline's
verdict. It travels with packed and shared reproducers, so it is read as untrusted:
schema-checked, and a cubin it names outside the reproducer is never followed."""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import shutil
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from kerncap.core.fsio import write_atomic
from kerncap.core.schema import check
from kerncap.core.units import speedup_text
from kerncap.errors import CaptureFormatError, KerncapError
from kerncap.reproducer.editable import source_fingerprint  # noqa: F401 - what Variant.source_hash holds
from kerncap.reproducer.format import read_json
from kerncap.reproducer.schemas import HISTORY_JSON, VALIDATIONS

HISTORY_FILE = "history.json"
HISTORY_VERSION = 1
MAX_HISTORY_BYTES = 64 << 20
GITIGNORE = ("# kerncap: payloads and build outputs stay out of the variant history\ncapture/blobs/\nvariants/\nbuild/\n"
             "kernels/*/capture/\nfusions/*/*.cubin\n")
FUSIONS = "fusions"  # a sequence's fusions (kerncap.recompile.fusion): versioned with kernels/
_UNREADABLE_HINT = ("the git log of the reproducer still holds every variant; move the file away to start a new "
                    "history")


@dataclass
class Variant:
    id: int                      # 0 is the baseline (the captured cubin)
    time: str
    median_ms: float | None
    min_ms: float | None = None
    spread_pct: float | None = None
    validation: str = "skipped"  # one of VALIDATIONS: pass | fail | inconclusive | error | skipped
    commit: str | None = None
    cubin: str | None = None     # relative to the reproducer; None: the captured cubin
    build_seconds: float | None = None
    note: str = ""
    source_hash: str | None = None  # source_fingerprint() of source/ as built
    # What the validation covered: "exact · p4" (byte-exact, 4 perturbed inputs too),
    # "tol", "nondet tol" (a tolerance derived from the kernel's own spread).
    validation_detail: str = ""
    # Speedup over the captured cubin, timed interleaved with it, and its interval
    # (kerncap.replay.significance); None in records made before intervals existed.
    speedup: float | None = None
    speedup_low: float | None = None
    speedup_high: float | None = None
    confidence: float | None = None
    significant: bool | None = None
    # The speedup with both medians less the launch floor, where it is 1 % or more above
    # the medians' ratio (significance.bracket_bound): what the events around each timed
    # launch may hide of a short variant's own speedup, an upper bound. None: not noted.
    speedup_bound: float | None = None
    # What timed it (significance.TIMERS): "kernel" is CUPTI's record of the kernel's own run,
    # the clock `kerncap apply` times the app with; None: events (rows before the timer existed).
    timer: str | None = None
    # A sequence (docs/sequences.md): the kernel whose entry was rebuilt (None: the
    # baseline) and every launch's replayed median, in launch order (None: not timed).
    kernel: int | None = None
    launch_ms: list[float] | None = None
    # A sequence's fusion (kerncap.session.fusions): its name, the launches it replaced
    # (first..last), the buffers its comparison left out (name, address, bytes, why), and
    # the fused launch's median against the replaced launches' (summed), timed one after
    # the other in the same build (None: not timed per launch). launch_ms is then the
    # fused sequence's launches, the fused one at index `first`.
    fusion: dict[str, Any] | None = None
    # The last `kerncap apply` of this variant's cubin in the app (kerncap.capture.apply,
    # ApplyResult.in_app): the command, launches substituted, the --check verdict (pass /
    # fail, the first launch that differed) and the in-app kernel and app speedups with
    # their intervals (None: not timed). The workbench's History shows it ("in app").
    in_app: dict[str, Any] | None = None

    @property
    def label(self) -> str:
        return "baseline" if self.id == 0 else f"v{self.id}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


_FIELDS = {f.name for f in dataclasses.fields(Variant)}


@dataclass
class History:
    root: Path
    variants: list[Variant] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    # -- loading / saving -------------------------------------------------------------
    @classmethod
    def load(cls, root: str | Path) -> "History":
        """The history of the reproducer at `root` (empty when it has none);
        CaptureFormatError naming the file and the field when history.json is damaged."""
        root = Path(root)
        path = root / HISTORY_FILE
        hist = cls(root=root)
        if not path.exists() and not path.is_symlink():
            return hist
        data = read_json(path, MAX_HISTORY_BYTES, _UNREADABLE_HINT, _UNREADABLE_HINT)
        check(data, HISTORY_JSON, path, _UNREADABLE_HINT)
        # Fields a newer kerncap added are kept out of the dataclass, not refused.
        hist.variants = sorted((Variant(**{k: v for k, v in entry.items() if k in _FIELDS})
                                for entry in data["variants"]), key=lambda v: v.id)
        ids = [v.id for v in hist.variants]
        if len(set(ids)) != len(ids):
            raise CaptureFormatError(f"{path}: two variants have the same id", _UNREADABLE_HINT)
        return hist

    @contextmanager
    def _as_on_disk(self) -> Iterator[None]:
        """The rows history.json holds now, under an exclusive lock on the reproducer's
        directory until the block has saved: the workbench, `kerncap build` and an MCP agent
        each hold a History, and a row another process recorded since this one loaded is
        kept (and its id not given out again), not overwritten."""
        try:
            fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY)
        except OSError as exc:
            raise KerncapError(f"cannot open {self.root} to record the variant history ({exc.strerror})",
                               "check that the reproducer directory exists and is yours") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # milliseconds: a read, an append, a git commit, a write
            mine = {v.id: v for v in self.variants}  # rows unchanged on disk stay the objects callers hold
            self.variants = [mine[d.id] if mine.get(d.id) == d else d for d in History.load(self.root).variants]
            yield
        finally:
            os.close(fd)

    def refresh(self) -> bool:
        """Read history.json again: rows another process recorded (or noted) since; whether
        anything changed. CaptureFormatError when the file is now damaged."""
        with self._lock:
            before = [v.to_dict() for v in self.variants]
            with self._as_on_disk():
                pass
            return [v.to_dict() for v in self.variants] != before

    def _save(self) -> None:
        path = self.root / HISTORY_FILE
        doc = {"version": HISTORY_VERSION, "variants": [v.to_dict() for v in self.variants]}
        write_atomic(path, json.dumps(doc, indent=1) + "\n", what=f"record the variant history in {path}")

    @property
    def baseline(self) -> Variant | None:
        return next((v for v in self.variants if v.id == 0), None)

    def get(self, vid: int) -> Variant:
        for v in self.variants:
            if v.id == vid:
                return v
        raise KerncapError(f"variant {vid} is not in {self.root / HISTORY_FILE}")

    def built_from(self, fingerprint: str) -> Variant | None:
        """The variant built from exactly this source/ (not the baseline: that is the
        captured cubin, not a build), if any."""
        return next((v for v in reversed(self.variants) if v.id and v.source_hash == fingerprint), None)

    def speedup(self, v: Variant) -> float | None:
        """The measured (interleaved) speedup; for older records the ratio of medians
        taken at different times (see `has_interval`)."""
        if v.speedup is not None:
            return v.speedup
        base = self.baseline
        if not base or not base.median_ms or not v.median_ms:
            return None
        return base.median_ms / v.median_ms

    @staticmethod
    def has_interval(v: Variant) -> bool:
        return v.speedup_low is not None and v.speedup_high is not None

    def best_significant(self) -> Variant | None:
        """The fastest variant that passed validation and is significantly faster than
        the captured cubin (its interval lies above 1); None when there is none."""
        faster = [v for v in self.variants if v.id and v.validation == "pass" and v.significant
                  and v.speedup_low is not None and v.speedup_low > 1.0]
        return max(faster, key=lambda v: v.speedup or 0.0, default=None)

    # -- git --------------------------------------------------------------------------
    def repo(self):
        """The reproducer's own git repository, created on first use."""
        if shutil.which("git") is None:
            raise KerncapError("git is not installed: the variant history is a git repository of the reproducer",
                               "install git (e.g. apt-get install git); builds still run without it")
        try:
            import git
        except ImportError as exc:
            raise KerncapError(f"GitPython is not installed ({exc})", "pip install gitpython") from None
        creating = not (self.root / ".git").exists()
        if creating and not os.access(self.root, os.W_OK):
            raise _unwritable(self.root, "create the variant history's git repository in")
        try:
            repo = git.Repo(self.root) if not creating else git.Repo.init(self.root)
        except git.GitError as exc:
            if _read_only(exc):
                raise _unwritable(self.root, "create the variant history's git repository in") from None
            raise KerncapError(f"cannot open the git repository of {self.root} ({_first_line(exc)})",
                               f"check it with `git -C {self.root} status`") from None
        ignore = self.root / ".gitignore"
        if not ignore.exists():
            write_atomic(ignore, GITIGNORE, what=f"write {ignore}")
        return repo

    @property
    def versioned(self) -> str:
        """What each variant commits: source/, or for a sequence (no source/ of its own) its
        kernel entries, kernels/ (each entry's source/; their builds are in .gitignore), or
        with no kernel entries its fusions/."""
        if not (self.root / "source").is_dir():
            for d in ("kernels", FUSIONS):  # a sequence extracted without sources: only its fusions
                if (self.root / d).is_dir():
                    return d
        return "source"

    @property
    def versioned_paths(self) -> list[str]:
        """What a commit holds: `versioned`, and a sequence's fusions/ (each fused kernel and
        its launch; the fused cubins are ignored) once it has one."""
        extra = [FUSIONS] if self.versioned == "kernels" and (self.root / FUSIONS).is_dir() \
            and not (self.root / FUSIONS).is_symlink() else []
        return [self.versioned, *extra]

    def _commit_source(self, message: str) -> str:
        import git

        repo = self.repo()
        source = self.root / self.versioned
        if not source.is_dir():
            raise KerncapError(f"{source} does not exist", "this reproducer has no editable source to version")
        paths = self.versioned_paths
        # a .gitignore written before fusions existed does not ignore their cubins
        excluded = [f":(exclude){FUSIONS}/*/*.cubin"] if FUSIONS in paths else []
        try:
            repo.git.add("--all", "--", *paths, ".gitignore", *excluded)
            actor = git.Actor("kerncap", "kerncap@localhost")
            return repo.index.commit(message, author=actor, committer=actor).hexsha
        except git.GitError as exc:
            if _read_only(exc):
                raise _unwritable(self.root, "commit source/ to the variant history in") from None
            raise KerncapError(f"git commit of {source} failed ({_first_line(exc)})",
                               "check the repository with `git status`") from None

    def initial_commit(self) -> str:
        """The commit holding source/ as extracted: made on first open, before any edit,
        so the baseline's sources can be diffed and restored like any variant."""
        import git

        with self._lock:
            repo = self.repo()
            try:
                if repo.head.is_valid():
                    return repo.git.rev_list("--max-parents=0", "HEAD").split()[-1]
            except git.GitError as exc:
                raise KerncapError(f"cannot read the git history of {self.root} ({exc})", "check `git log` there") from None
            return self._commit_source("kerncap: source as extracted\n\nKerncap-Variant: 0\n")

    def record(self, baseline: bool = False, **fields) -> Variant:
        """Append a variant and mirror it to history.json. A variant commits source/ with its
        timing in the trailer; the baseline (the captured cubin) points at the initial commit."""
        if fields.get("validation", "skipped") not in VALIDATIONS:
            raise ValueError(f"validation {fields['validation']!r} is none of {VALIDATIONS}")
        first = self.initial_commit() if baseline else None
        with self._lock, self._as_on_disk():
            vid = 0 if baseline else max((v.id for v in self.variants), default=0) + 1
            v = Variant(id=vid, time=datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), **fields)
            if baseline:
                self.variants = [x for x in self.variants if x.id != 0]
            self.variants.append(v)
            self.variants.sort(key=lambda x: x.id)
            v.commit = first if baseline else self._commit_source(self._message(v))
            self._save()
            return v

    def note_in_app(self, vid: int, outcome: dict[str, Any]) -> Variant:
        """Keep the outcome of applying row `vid`'s cubin in the app (the row's `in_app`,
        stamped with the time; no commit: the sources did not change)."""
        with self._lock, self._as_on_disk():
            v = self.get(vid)
            v.in_app = {"time": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), **outcome}
            self._save()
            return v

    def _message(self, v: Variant) -> str:
        s = self.speedup(v)
        timing = f"{v.median_ms:.4f} ms" if v.median_ms is not None else "not timed"
        ratio = ""
        if s and v.id:
            ratio = f" ({speedup_text(s)} vs baseline" + ("" if not self.has_interval(v) or v.significant
                                                 else ", within noise") + ")"
        head = f"kerncap {v.label}: {timing}" + ratio + f", validation {v.validation}"
        trailers = [
            f"Kerncap-Variant: {v.id}",
            f"Kerncap-Median-Ms: {v.median_ms}",
            f"Kerncap-Min-Ms: {v.min_ms}",
            f"Kerncap-Spread-Pct: {v.spread_pct}",
            f"Kerncap-Validation: {v.validation}",
        ]
        if s:
            trailers.append(f"Kerncap-Speedup: {s:.4f}")
        if self.has_interval(v):
            trailers.append(f"Kerncap-Speedup-Interval: {v.speedup_low:.4f} {v.speedup_high:.4f} "
                            f"({(v.confidence or 0) * 100:g}%, {'significant' if v.significant else 'within noise'})")
        if v.validation_detail:
            trailers.append(f"Kerncap-Validation-Detail: {v.validation_detail}")
        if v.cubin:
            trailers.append(f"Kerncap-Cubin: {v.cubin}")
        if v.fusion:
            excluded = ", ".join(e["name"] for e in v.fusion.get("excluded") or []) or "nothing"
            trailers.append(f"Kerncap-Fusion: {v.fusion['name']} (launches {v.fusion['first']}-{v.fusion['last']}; "
                            f"not compared: {excluded})")
        return head + ("\n\n" + v.note if v.note else "") + "\n\n" + "\n".join(trailers) + "\n"

    def _commit_of(self, v: Variant) -> str:
        if not v.commit:
            raise KerncapError(f"variant {v.label} has no recorded commit", "only variants built by the workbench can be diffed or restored")
        return v.commit

    def diff(self, a: Variant, b: Variant) -> str:
        import git

        try:
            return self.repo().git.diff(self._commit_of(a), self._commit_of(b), "--", *self.versioned_paths)
        except git.GitError as exc:
            raise KerncapError(
                f"git diff {a.label}..{b.label} failed in {self.root} ({exc})",
                "the commits may be missing from this copy of the reproducer; check `git log`",
            ) from None

    def restore(self, v: Variant) -> None:
        """Put the variant's sources back into source/ (the next save-triggered build records it again)."""
        import git

        try:
            repo, commit = self.repo(), self._commit_of(v)
            # fusions/ as that commit holds it, when it holds any (an older row's commit may not)
            paths = [p for p in self.versioned_paths if p == self.versioned or repo.git.ls_tree(commit, "--", p)]
            repo.git.checkout(commit, "--", *paths)
        except git.GitError as exc:
            raise KerncapError(f"restoring {v.label} into {self.root / 'source'} failed ({exc})", "check `git status` in the reproducer") from None




def _first_line(exc: Exception) -> str:
    text = str(getattr(exc, "stderr", "") or exc).strip()
    return text.splitlines()[-1].strip() if text else type(exc).__name__


def _read_only(exc: Exception) -> bool:
    text = f"{exc} {getattr(exc, 'stderr', '')}"
    return any(s in text for s in ("Read-only file system", "Permission denied", "Operation not permitted"))


def _unwritable(root: Path, doing: str) -> KerncapError:
    return KerncapError(f"cannot {doing} {root}: the directory is read-only (or not yours)",
                        "copy the reproducer somewhere writable to keep its variant history "
                        f"(cp -r {root} ~/); builds are still timed and validated, just not recorded")


def best_variant(reproducer: str | Path) -> Variant | None:
    """The fastest recorded variant (not the captured cubin) that passed validation and
    whose cubin is still inside the reproducer; None when there is none."""
    root = Path(reproducer)
    passing = [v for v in History.load(root).variants
               if v.id != 0 and v.validation == "pass" and v.median_ms is not None and _inside(root, v.cubin)]
    return min(passing, key=lambda v: (v.median_ms, v.id), default=None)


def _inside(root: Path, cubin: str | None) -> bool:
    """A recorded cubin that exists inside the reproducer (history.json travels with
    shared reproducers: a path out of it is not followed)."""
    if not cubin:
        return False
    try:
        path = (root / cubin).resolve()
        return path.is_relative_to(root.resolve()) and path.is_file()
    except OSError:  # a name too long for the file system, a loop of links: not a cubin of ours
        return False


def summary(reproducer: str | Path) -> dict[str, Any]:
    """For `kerncap list`: the baseline's validation and the number of variants ({} for
    a reproducer without a history; "unreadable history.json" when it is damaged, with
    `problem`: why, and what to do)."""
    root = Path(reproducer)
    if not (root / HISTORY_FILE).exists() and not (root / HISTORY_FILE).is_symlink():
        return {}
    try:
        h = History.load(root)
    except KerncapError as exc:
        return {"validation": f"unreadable {HISTORY_FILE}",
                "problem": exc.message + (f"; {exc.hint}" if exc.hint else "")}
    return {"validation": h.baseline.validation if h.baseline else None, "variants": len(h.variants)}
