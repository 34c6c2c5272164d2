"""Are a capture's payloads there? (`kerncap info`, `kerncap list`; `--verify` also
checks every hash.) Without --verify only sizes are looked at, so a workspace of large
captures is listed in milliseconds."""

from __future__ import annotations

import stat
from dataclasses import dataclass, field

from kerncap.errors import KerncapError
from kerncap.reproducer.format import Capture, capture_chunks, cubin_problem, item_label
from kerncap.reproducer.store import Store, store_of


@dataclass
class PayloadCheck:
    chunks: int = 0                  # distinct non-zero chunks the manifest names
    local: int = 0                   # present under capture/blobs/ with the right size
    in_store: int = 0                # not local, present in the workspace store
    missing: list[str] = field(default_factory=list)   # "<hash>: why"
    damaged: list[str] = field(default_factory=list)   # wrong size, not a regular file, hash mismatch
    cubin: str = "ok"                # "ok" | "missing" | "not a regular file" | "cannot be read (…)"
    verified: bool = False           # hashes were checked
    marker: str | None = None        # what is wrong with capture/stored.json, if anything

    @property
    def ok(self) -> bool:
        return not self.missing and not self.damaged and self.cubin == "ok" and self.marker is None

    def summary(self) -> str:
        """'ok' or one line saying what is wrong."""
        if self.ok:
            where = f", {self.in_store} in the store" if self.in_store else ""
            return f"ok ({self.chunks} chunks{where}{', hashes verified' if self.verified else ''})"
        parts = []
        if self.marker:
            parts.append(f"the store marker: {self.marker}")
        if self.missing:
            parts.append(f"{len(self.missing)} of {self.chunks} chunks missing (first: {self.missing[0]})")
        if self.damaged:
            parts.append(f"{len(self.damaged)} chunks damaged (first: {self.damaged[0]})")
        if self.cubin != "ok":
            parts.append(f"cubin {self.cubin}")
        return "; ".join(parts)

    def as_dict(self) -> dict:
        return {"ok": self.ok, "chunks": self.chunks, "local": self.local, "in_store": self.in_store,
                "missing": self.missing[:20], "missing_count": len(self.missing), "damaged": self.damaged[:20],
                "damaged_count": len(self.damaged), "cubin": self.cubin, "verified": self.verified,
                "marker": self.marker, "summary": self.summary()}


class _StoreLookup:
    """The capture's store, read again when a blob is found gone: a `kerncap store`
    running meanwhile writes its marker before it removes the blobs."""

    def __init__(self, cap: Capture, out: PayloadCheck):
        self.cap, self.out = cap, out
        self.store = self._read()

    def _read(self) -> Store | None:
        try:
            return store_of(self.cap.root)
        except KerncapError as exc:
            self.out.marker = exc.message
            return None

    def current(self) -> Store | None:
        if self.store is None and self.out.marker is None:
            self.store = self._read()
        return self.store


def check_payloads(cap: Capture, *, verify: bool = False) -> PayloadCheck:
    """Presence and size of every chunk file (or store object) and of the cubin; with
    `verify`, every chunk is read and its hash checked, and the cubin read, too."""
    out = PayloadCheck(verified=verify)
    stores = _StoreLookup(cap, out)
    owners = chunk_owners(cap)
    for h, length in capture_chunks(cap):
        out.chunks += 1
        path = cap.blob_path(h)
        named = f"{h} ({owners[h]})"  # messages name what the chunk is
        try:
            st = path.stat()
        except FileNotFoundError:
            st = None
        except OSError as exc:
            out.damaged.append(f"{named}: {exc.strerror}")
            continue
        if st is None:
            store = stores.current()
            if store is not None and store.has(h):
                out.in_store += 1
                if verify:
                    _read(cap, h, named, length, out)
            else:
                out.missing.append(f"{named}: no {path.name}" + (f" and not in the store {store.root}" if store else ""))
            continue
        if not stat.S_ISREG(st.st_mode):
            out.damaged.append(f"{named}: {path.name} is not a regular file")
        elif st.st_size != length:
            out.damaged.append(f"{named}: {path.name} holds {st.st_size} bytes, expected {length}")
        else:
            out.local += 1
            if verify:
                _read(cap, h, named, length, out)
    problem = cubin_problem(cap.cubin_path, read=verify)
    out.cubin = "ok" if problem is None else problem.removeprefix("is ")
    return out


def chunk_owners(cap: Capture) -> dict[str, str]:
    """Chunk hash -> where the manifest first uses it: "host region 0 pre-state chunk 2"."""
    owners: dict[str, str] = {}
    for item in cap.payload_items:
        for state, chunks in (("pre", item.pre), ("post", item.post)):
            for i, h in enumerate(chunks):
                if h is not None:
                    owners.setdefault(h, f"{item_label(item)} {state}-state chunk {i}")
    return owners


def _read(cap: Capture, h: str, named: str, length: int, out: PayloadCheck) -> None:
    try:
        cap.read_chunk(h, length)
    except KerncapError as exc:
        out.damaged.append(f"{named}: {exc.message}")
