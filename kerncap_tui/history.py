"""Variant history: every build is a git commit of `source/` in the reproducer's own
repository, its timing and validation in the commit trailer, mirrored in
`<dir>/history.json` so the workbench loads without walking git."""

from __future__ import annotations

import json
import os
import threading
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from kerncap import api
from kerncap.core.units import speedup_text
from kerncap.errors import KerncapError

HISTORY_FILE = "history.json"
HISTORY_VERSION = 1
GITIGNORE = "# kerncap: payloads and build outputs stay out of the variant history\ncapture/blobs/\nvariants/\nbuild/\n"


@dataclass
class Variant:
    id: int                      # 0 is the baseline (the captured cubin)
    time: str
    median_ms: float | None
    min_ms: float | None = None
    spread_pct: float | None = None
    validation: str = "skipped"  # pass | fail | inconclusive | error | skipped
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

    @property
    def label(self) -> str:
        return "baseline" if self.id == 0 else f"v{self.id}"


@dataclass
class History:
    root: Path
    variants: list[Variant] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    # -- loading / saving -------------------------------------------------------------
    @classmethod
    def load(cls, root: str | Path) -> "History":
        root = Path(root)
        path = root / HISTORY_FILE
        hist = cls(root=root)
        if not path.exists():
            return hist
        try:
            data = json.loads(path.read_text())
            hist.variants = [Variant(**v) for v in data.get("variants", [])]
        except (OSError, ValueError, TypeError) as exc:
            raise KerncapError(
                f"{path} is unreadable ({exc})",
                "the git log of the reproducer still holds every variant; move the file away to start a new history",
            ) from None
        return hist

    def _save(self) -> None:
        path = self.root / HISTORY_FILE
        tmp = path.with_name(f".{HISTORY_FILE}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"version": HISTORY_VERSION, "variants": [asdict(v) for v in self.variants]}, indent=1))
        os.replace(tmp, path)

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
        try:
            import git
        except ImportError as exc:
            raise KerncapError(f"GitPython is not installed ({exc})", "pip install gitpython") from None
        try:
            if (self.root / ".git").exists():
                return git.Repo(self.root)
            repo = git.Repo.init(self.root)
        except git.GitError as exc:
            raise KerncapError(f"cannot open the git repository of {self.root} ({exc})", "is git installed?") from None
        ignore = self.root / ".gitignore"
        if not ignore.exists():
            ignore.write_text(GITIGNORE)
        return repo

    def _commit_source(self, message: str) -> str:
        import git

        repo = self.repo()
        source = self.root / "source"
        if not source.is_dir():
            raise KerncapError(f"{source} does not exist", "this reproducer has no editable source to version")
        try:
            repo.git.add("--all", "--", "source", ".gitignore")
            actor = git.Actor("kerncap", "kerncap@localhost")
            return repo.index.commit(message, author=actor, committer=actor).hexsha
        except git.GitError as exc:
            raise KerncapError(f"git commit of {source} failed ({exc})", "check the repository with `git status`") from None

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
        first = self.initial_commit() if baseline else None
        with self._lock:
            vid = 0 if baseline else max((v.id for v in self.variants), default=0) + 1
            v = Variant(id=vid, time=datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), **fields)
            if baseline:
                self.variants = [x for x in self.variants if x.id != 0]
            self.variants.append(v)
            self.variants.sort(key=lambda x: x.id)
            v.commit = first if baseline else self._commit_source(self._message(v))
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
        return head + ("\n\n" + v.note if v.note else "") + "\n\n" + "\n".join(trailers) + "\n"

    def _commit_of(self, v: Variant) -> str:
        if not v.commit:
            raise KerncapError(f"variant {v.label} has no recorded commit", "only variants built by the workbench can be diffed or restored")
        return v.commit

    def diff(self, a: Variant, b: Variant) -> str:
        import git

        try:
            return self.repo().git.diff(self._commit_of(a), self._commit_of(b), "--", "source")
        except git.GitError as exc:
            raise KerncapError(
                f"git diff {a.label}..{b.label} failed in {self.root} ({exc})",
                "the commits may be missing from this copy of the reproducer; check `git log`",
            ) from None

    def restore(self, v: Variant) -> None:
        """Put the variant's sources back into source/ (the next save-triggered build records it again)."""
        import git

        try:
            self.repo().git.checkout(self._commit_of(v), "--", "source")
        except git.GitError as exc:
            raise KerncapError(f"restoring {v.label} into {self.root / 'source'} failed ({exc})", "check `git status` in the reproducer") from None



def source_fingerprint(source_dir: Path) -> str:
    return api.source_fingerprint(source_dir)
