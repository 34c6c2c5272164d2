"""Pruned reproducers: keep only the regions of the pointer closure (kerncap.prune.closure),
and only when replaying that smaller state proves it.

    report = prune_reproducer(repro_dir)          # validate=True: needs the GPU
    report.kept      # "pruned" | "full"
    report.summary() # "pruned 412 -> 3 regions (…), 20.1 GiB -> 1.3 GiB stored (16.0x smaller), validated …"

With validation (the default) the pruned reproducer is written next to the original
(`<dir>.prune-<pid>`), replayed and compared byte-exact with the captured post-state,
and only then put in the original's place: with one atomic exchange of the two
directories where the OS has it (Linux renameat2), so that a crash leaves either the
full or the pruned reproducer at the original path, never neither. Anything else —
a written region outside the closure, a replay error, a mismatch — keeps the full
reproducer and says why; the verdict is recorded in reproducer.json under "prune".

Without validation (`validate=False`, for machines without a GPU) the pruned
reproducer goes to `<dir>-pruned` (or `output`) and the original is not touched.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

from kerncap import __version__
from kerncap.core.confined import real_dir
from kerncap.core.fsio import exclusive, find_leftovers, write_atomic
from kerncap.errors import (
    CaptureFormatError,
    GpuUnavailable,
    KerncapError,
    NativeUnavailable,
)
from kerncap.prune.closure import Closure, compute_closure, kept_items
from kerncap.replay.client import ReplayClient
from kerncap.reproducer.format import Capture, capture_chunks
from kerncap.reproducer.prune_report import PruneReport
from kerncap.reproducer.record import read_record
from kerncap.reproducer.store import store_of
from kerncap.reproducer.stored import hydrate

__all__ = ["Closure", "PruneReport", "compute_closure", "default_pruned_path", "prune_reproducer", "write_pruned"]

PRUNED_SUFFIX = "-pruned"
VALIDATE_TIMEOUT_S = 900.0  # one replay request (open or validate) of the pruned reproducer
NOTHING_TO_DROP = "the closure holds every region: nothing to drop"


def default_pruned_path(repro_dir: str | os.PathLike) -> Path:
    root = Path(os.path.abspath(repro_dir))
    return root.with_name(root.name + PRUNED_SUFFIX)


# -- writing --------------------------------------------------------------------------------


def write_pruned(repro_dir: str | os.PathLike, closure: Closure, out_dir: str | os.PathLike, *,
                 capture: Capture | None = None) -> Path:
    """Write the reproducer `repro_dir` restricted to `closure` into `out_dir` (which must
    not exist): every file copied, except that the manifest lists only the kept regions
    (ids unchanged, so parameter annotations still hold) plus a "pruned" record, and the
    capture's blobs/ holds only the chunks still referenced, hard-linked from the
    original (copied where links are impossible). Written as `<out_dir>.partial-<pid>`
    and renamed when complete: nothing half-written remains. `capture`: `repro_dir`
    already opened (a manifest of 10^5 regions takes seconds to parse)."""
    root = Path(os.path.abspath(repro_dir))
    out = Path(os.path.abspath(out_dir))
    cap = capture if capture is not None else Capture.open(root)
    if out.exists():
        raise KerncapError(f"{out} already exists", "remove it, or choose another output for the pruned reproducer")
    if out == root or root in out.parents:
        raise KerncapError(f"{out} lies inside the reproducer {root}", "choose an output outside it")
    cap_rel = Path(os.path.relpath(cap.root, root))
    partial = out.with_name(f"{out.name}.partial-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)  # a leftover of this pid's earlier, killed run
    real_dir(root, cap_rel, what="prune")  # a capture/ that is a link would be written through below
    try:
        _copy_tree(root, partial, skip_in=root / cap_rel)
        blobs = real_dir(partial, cap_rel / "blobs", create=True, what="prune")
        _link_blobs(cap, closure, blobs)
        manifest = pruned_manifest(cap, closure, source=root)
        _write_json(partial / cap_rel / "manifest.json", manifest)  # last, as the interposer does
        os.rename(partial, out)
    except shutil.Error as exc:  # copytree's list of (src, dst, why): name the first, not the list
        shutil.rmtree(partial, ignore_errors=True)
        errors = exc.args[0] if exc.args and isinstance(exc.args[0], list) else []
        first = errors[0] if errors and isinstance(errors[0], tuple) and len(errors[0]) == 3 else None
        why = str(first[2]) if first else str(exc)[:200]
        more = f", and {len(errors) - 1} more file(s)" if len(errors) > 1 else ""
        raise KerncapError(f"cannot write the pruned reproducer {out}: {why}{more}",
                           "free space or fix permissions and prune again; the original is unchanged") from None
    except OSError as exc:
        shutil.rmtree(partial, ignore_errors=True)
        raise KerncapError(f"cannot write the pruned reproducer {out}: {exc.strerror or exc} ({exc.filename or out})",
                           "free space or fix permissions and prune again; the original is unchanged") from None
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return out


def pruned_manifest(cap: Capture, closure: Closure, *, source: Path) -> dict[str, Any]:
    """The capture's manifest restricted to the closure, with provenance bytes recomputed
    and the "pruned" record (docs/capture-format.md)."""
    kept = set(closure.kept)
    m = dict(cap.manifest)  # shallow: only "regions", "provenance" and "pruned" change (no deep copy of 10^5 regions)
    m["regions"] = [r for r in m.get("regions", []) if r.get("id") in kept]
    prov = m["provenance"] = dict(m.get("provenance") or {})
    # `snapshotted` stays: it is what the capture read from the GPU, a fact of that run.
    prov["bytes"] = {**(prov.get("bytes") or {}), "logical": closure.logical_pruned, "stored": closure.stored_pruned}
    m["pruned"] = {
        "from": str(source),
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "tool_version": __version__,
        "regions_full": closure.regions_full,
        "regions_dropped": closure.dropped,
        "logical_full": closure.logical_full,
        "stored_full": closure.stored_full,
        "logical_pruned": closure.logical_pruned,
        "stored_pruned": closure.stored_pruned,
        "reasons": {str(k): closure.reasons[k] for k in closure.kept},
        "by_reason": closure.by_reason,
    }
    return m


def _copy_tree(src: Path, dst: Path, *, skip_in: Path) -> None:
    """Copy src to dst (links as links) without the capture's manifest and blob files."""
    skip_dir = skip_in.resolve()

    def ignore(directory: str, names: list[str]) -> set[str]:
        if Path(directory).resolve() == skip_dir:
            return {"manifest.json", "blobs"} & set(names)
        return set()

    shutil.copytree(src, dst, symlinks=True, ignore=ignore)


def _link_blobs(cap: Capture, closure: Closure, blobs: Path) -> None:
    kept = set(closure.kept)
    needed: set[str] = set()
    for item in [*(r for r in cap.regions if r.id in kept), *kept_items(cap)]:
        needed.update(h for h in (*item.pre, *item.post) if h is not None)
    can_link = True
    for h in sorted(needed):
        src, dst = cap.blob_path(h), blobs / f"{h}.bin"
        try:
            if can_link:
                try:
                    os.link(src, dst)  # chunks are immutable and named by their hash: sharing is safe
                    continue
                except OSError as exc:
                    if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.EOPNOTSUPP, errno.ENOTSUP):
                        raise
                    can_link = False  # another file system, or one without hard links: copy the rest
            shutil.copyfile(src, dst)
        except FileNotFoundError:
            _from_store(cap, h, dst)


def _from_store(cap: Capture, h: str, dst: Path) -> None:
    """A chunk file gone since prune began: a `kerncap store` running beside it moved the
    payloads to the store (its marker is written before any blob goes), so the chunk is
    written from there, verified."""
    src = cap.blob_path(h)
    store = store_of(cap.root)
    if store is None or not store.has(h):
        where = f"nor in the store {store.root}" if store is not None else "and the reproducer is in no store"
        raise CaptureFormatError(f"payload {src} is missing, {where}",
                                 f"`kerncap info {cap.reproducer_dir}` lists what is missing; unpack the reproducer "
                                 "again from its pack, or extract it again")
    length = dict(capture_chunks(cap))[h]
    with open(dst, "xb") as out:
        store.stream_into(h, length, out)


def _write_json(path: Path, data: Any) -> None:
    write_atomic(path, json.dumps(data, indent=1) + "\n")


# -- pruning --------------------------------------------------------------------------------


def prune_reproducer(
    repro_dir: str | os.PathLike,
    *,
    validate: bool = True,
    output: str | os.PathLike | None = None,
    device: int = 0,
    timeout: float | None = VALIDATE_TIMEOUT_S,
) -> PruneReport:
    """Replace the reproducer `repro_dir` by its pruned form if that replays byte-exact;
    otherwise keep it and say why (PruneReport.kept / .reason).

    `validate=False` (no GPU here) writes the pruned reproducer to `output` (default
    `<repro_dir>-pruned`), unvalidated, and leaves `repro_dir` as it is. `device` and
    `timeout` (seconds per replay request; None: no limit) apply to the validation."""
    root = Path(os.path.abspath(repro_dir))
    if root.is_symlink():
        root = root.resolve()  # swap the directory itself, not the link to it
    if not root.is_dir():
        Capture.open(root)  # says what is missing
    with exclusive(root, "pruning"):  # two prunes of one reproducer must not swap it twice
        return _prune_locked(root, validate=validate, output=output, device=device, timeout=timeout)


def _prune_locked(root: Path, *, validate: bool, output, device: int, timeout: float | None) -> PruneReport:
    hydrate(root)  # payloads moved to the store (`kerncap store`) come back: pruning hard-links them
    cap = Capture.open(root)
    stale = [left.advice() for left in find_leftovers(root.parent, root.name)]
    closure = compute_closure(cap)
    report = PruneReport(
        path=root, kept="full", reason="", regions_full=closure.regions_full, regions_pruned=closure.regions_pruned,
        logical_full=closure.logical_full, logical_pruned=closure.logical_pruned,
        stored_full=closure.stored_full, stored_pruned=closure.stored_pruned,
        seconds={"closure": closure.seconds, "write": 0.0, "validate": 0.0}, reasons=dict(closure.reasons),
        by_reason=dict(closure.by_reason), notes=stale,
    )
    if closure.refusal:
        return _keep_full(report, closure.refusal, record=validate)
    if closure.dropped == 0:
        # Pruning a pruned reproducer again drops nothing: keep its "pruned" record then.
        return _keep_full(report, NOTHING_TO_DROP, record=validate and "pruned" not in cap.manifest)

    if not validate:
        out = Path(os.path.abspath(output)) if output is not None else default_pruned_path(root)
        t0 = time.perf_counter()
        write_pruned(root, closure, out, capture=cap)
        report.seconds["write"] = time.perf_counter() - t0
        report.kept, report.output = "pruned", out
        _record(out, report)
        return report

    staged = root.with_name(f"{root.name}.prune-{os.getpid()}")
    shutil.rmtree(staged, ignore_errors=True)  # a leftover of this pid's earlier, killed run
    t0 = time.perf_counter()
    write_pruned(root, closure, staged, capture=cap)
    report.seconds["write"] = time.perf_counter() - t0
    try:
        t0 = time.perf_counter()
        try:
            result = _validate(staged, device=device, timeout=timeout)
        except (GpuUnavailable, NativeUnavailable) as exc:
            raise KerncapError(
                f"cannot validate the pruned reproducer of {root}: {exc.message}",
                "validation replays the kernel, which needs an NVIDIA GPU and kerncap's replay core: run "
                f"`kerncap prune` on the GPU machine, or `kerncap prune {root} --no-validate` to write an "
                f"unvalidated {default_pruned_path(root).name} next to it",
            ) from None
        except CaptureFormatError as exc:
            return _keep_full(report, f"the pruned reproducer could not be read back: {exc.message}", record=True)
        except KerncapError as exc:
            return _keep_full(report, "replaying the pruned reproducer failed, so the kernel probably reaches "
                                      f"memory the closure dropped: {exc.message}", record=True)
        finally:
            report.seconds["validate"] = time.perf_counter() - t0
        if not result.passed:
            return _keep_full(report, _mismatch_reason(result), record=True)
        report.kept, report.validated, report.output = "pruned", True, root
        _record(staged, report)  # before the swap: the pruned reproducer arrives with its record
        _swap_in(root, staged)
        return report
    finally:
        shutil.rmtree(staged, ignore_errors=True)  # already gone once swapped in


def _validate(path: Path, *, device: int, timeout: float | None):
    """Byte-exact validation of a reproducer in a fresh replay server (tests replace this)."""
    with ReplayClient(path, device=device, timeout=timeout) as rc:
        return rc.validate()


def _mismatch_reason(result) -> str:
    failures = result.failures
    shown = "; ".join(
        f"{c.name}: {c.mismatched_bytes} bytes differ" + (" (unexpected write)" if c.unexpected_write else "")
        for c in failures[:5]
    )
    more = f"; and {len(failures) - 5} more" if len(failures) > 5 else ""
    return (f"the pruned reproducer does not replay byte-exact ({shown}{more}): the kernel reads memory the "
            "closure dropped, through a pointer it cannot see")


def _keep_full(report: PruneReport, reason: str, *, record: bool) -> PruneReport:
    report.kept, report.reason, report.validated, report.output = "full", reason, False, None
    if record:
        _record(report.path, report)
    return report


def _record(root: Path, report: PruneReport) -> None:
    """Store the report in <root>/reproducer.json under "prune" (a bare capture directory,
    without capture/, has no reproducer.json and gets none)."""
    if not (root / "capture").is_dir():
        return
    path = root / "reproducer.json"
    try:
        data: Any = read_record(root)
    except KerncapError as exc:
        report.notes.append(f"{exc.message}; the prune record was not written")
        return
    data["prune"] = report.to_json()
    try:
        _write_json(path, data)
    except OSError as exc:
        raise KerncapError(f"cannot write {path}: {exc.strerror or exc}", "check free space and permissions") from None


def _swap_in(root: Path, staged: Path) -> None:
    """Put `staged` at `root`'s path and remove what was there."""
    try:
        if _exchange(staged, root):
            shutil.rmtree(staged, ignore_errors=True)  # now the full reproducer
            return
    except OSError as exc:
        raise KerncapError(f"the pruned reproducer validated, but {root} could not be replaced by it: "
                           f"{exc.strerror or exc}",
                           f"check the permissions of {root.parent}; {root} is unchanged") from None
    # No atomic exchange here: two renames. A crash between them leaves the full
    # reproducer at <root>.full-<pid> and the pruned one at `staged`.
    old = root.with_name(f"{root.name}.full-{os.getpid()}")
    shutil.rmtree(old, ignore_errors=True)
    try:
        os.rename(root, old)
    except OSError as exc:
        raise KerncapError(f"the pruned reproducer validated, but {root} could not be moved aside: "
                           f"{exc.strerror or exc}",
                           f"check the permissions of {root.parent}; {root} is unchanged") from None
    try:
        os.rename(staged, root)
    except OSError as exc:
        try:
            os.rename(old, root)
        except OSError:
            raise KerncapError(f"the pruned reproducer validated, but moving it to {root} failed "
                               f"({exc.strerror or exc}) and so did moving the full reproducer back",
                               f"the full reproducer is at {old}: rename it to {root}") from None
        raise KerncapError(f"the pruned reproducer validated, but moving it to {root} failed: {exc.strerror or exc}",
                           f"check the permissions of {root.parent}; {root} is unchanged") from None
    shutil.rmtree(old, ignore_errors=True)


def _exchange(a: Path, b: Path) -> bool:
    """Atomically exchange two paths (renameat2 RENAME_EXCHANGE); False where the C
    library or the file system does not offer it."""
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return False
    AT_FDCWD, RENAME_EXCHANGE = -100, 2
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if renameat2(AT_FDCWD, os.fsencode(a), AT_FDCWD, os.fsencode(b), RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP):
        return False
    raise OSError(err, os.strerror(err), str(b))
