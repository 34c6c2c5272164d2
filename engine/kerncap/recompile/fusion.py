"""Fusions (docs/sequences.md): a contiguous range of a sequence's launches replaced by one
kernel the user writes.

`skeleton(repro, first, last, name)` writes `fusions/<name>/fused.cu`, a kernel whose
parameters are every buffer the range's launches take (each distinct device pointer
once, typed from the kernels' signatures) and then each launch's scalar arguments, and
`fusions/<name>/fusion.json`: those parameters with the values the capture holds, and the
launch configuration (the first launch's, to edit). The user fills in the body and the
launch; `build(repro, name)` compiles fused.cu with the local toolkit's nvcc and writes
the sequence variant `variants/fuse-<name>.json` that `validate`/`replay --compare` take.

What the comparison then leaves out: buffers only carrying values inside the range,
*inferred* (written by a launch of the range through a non-const pointer, taken by a
later launch of it, taken by no launch after it) or *declared* (`--intermediate NAME`);
each is named in the variant and in every report. Its extent is the bytes from its
pointer to the next pointer any launch of the sequence passes into the same region
(or the region's end).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kerncap.core.confined import link_error, real_dir
from kerncap.core.fsio import scratch, write_atomic
from kerncap.core.schema import check
from kerncap.errors import KerncapError, UsageError
from kerncap.recompile.inputs import check_tree, include_problems
from kerncap.recompile.trust import ReadPlaces, local_nvcc, tool_env
from kerncap.reproducer.format import Capture, cubin_problem, read_json
from kerncap.reproducer.schemas import FUSION_JSON
from kerncap.reproducer.sequence_variant import write_variant
from kerncap.sources.attach import capture_arch
from kerncap.sources.names import classify_cxx_type, cxx_parameter_types

FUSIONS = "fusions"
KERNEL = "kc_fused"
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
SCALAR_TYPES = {1: "unsigned char", 2: "unsigned short", 4: "int", 8: "long long"}


@dataclass
class Buffer:
    name: str
    address: int
    region: int | None
    ctype: str             # "const float*", "float*", "void*"
    written: bool | None   # True: some use takes it through a non-const pointer; None: no signature says
    uses: list[str] = field(default_factory=list)  # "launch 3 arg 0"
    launches: list[int] = field(default_factory=list)


def _clean_ctype(text: str | None) -> tuple[str, bool | None]:
    """A parameter's C++ type as the skeleton declares it, and whether it may be written."""
    if not text or "*" not in text:
        return "void*", None
    base = text.split("*", 1)[0].strip()
    const = bool(re.search(r"\bconst\b", base))
    base = " ".join(w for w in base.replace("&", " ").split() if w not in ("const", "volatile", "__restrict__",
                                                                            "restrict"))
    if base in ("", "void") or "<" in base or "::" in base:
        base = "void"  # templates and classes: the skeleton spells them as bytes
    stars = "*" * max(1, text.count("*"))
    return f"{'const ' if const else ''}{base}{stars}", not const


def _fusion_dir(repro: Path, name: str, *, create: bool = False) -> Path:
    """fusions/<name>/ of the reproducer; a reproducer from someone else may hold a link there
    (to anywhere): refused, never written or read through (kerncap.core.confined)."""
    if not NAME_RE.fullmatch(name):
        raise UsageError(f"fusion name {name!r}", "letters, digits, '-' and '_' (e.g. --name norm-gemm)")
    return real_dir(repro, f"{FUSIONS}/{name}", create=create)


def _file(d: Path, name: str) -> Path:
    """A file of a fusion directory, refused when it is a link (fused.cu linking out of the
    reproducer would be compiled, its text returned to an agent)."""
    path = d / name
    if path.is_symlink():
        raise link_error(path, "read or write")
    return path


MAX_SOURCE_BYTES = 16 << 20


def _source_bytes(source: Path) -> bytes:
    """The fused kernel's text: a regular file (a FIFO there never blocks the read), bounded."""
    problem = cubin_problem(source, read=True)
    if problem is None and source.stat().st_size > MAX_SOURCE_BYTES:
        problem = f"is larger than {MAX_SOURCE_BYTES >> 20} MiB"
    if problem is not None:
        raise KerncapError(f"{source} {problem}", "write the skeleton again (kerncap fuse DIR --first A --last B "
                                                  "--name NAME --force)")
    return source.read_bytes()


def _config(root: Path, name: str) -> tuple[Path, dict[str, Any]]:
    """fusions/<name>/ and its fusion.json, checked (FUSION_JSON)."""
    d = _fusion_dir(root, name)
    path = _file(d, "fusion.json")
    hint = "write the skeleton again (kerncap fuse DIR --first A --last B --name NAME --force)"
    config = read_json(path, 16 << 20, f"no fusion {name} in {root}: write its skeleton first "
                       "(kerncap fuse DIR --first A --last B --name NAME)", hint)
    if not isinstance(config, dict) or config.get("format") != "kerncap-fusion":
        raise KerncapError(f"{path} is not a fusion description", hint)
    check(config, FUSION_JSON, path, hint)
    return d, config


def _open(repro: str | os.PathLike) -> tuple[Path, Capture]:
    cap = Capture.open(repro)
    if cap.sequence is None:
        raise UsageError(f"{repro} holds one dispatch, not a sequence",
                         "fuse launches of a reproducer made with `kerncap extract --sequence`")
    return cap.reproducer_dir, cap


def skeleton(repro: str | os.PathLike, first: int, last: int, name: str, *, force: bool = False) -> Path:
    """Writes the skeleton of a fusion of launches `first`..`last`; returns fused.cu."""
    root, cap = _open(repro)
    seq = cap.sequence
    n = len(seq.launches)
    if not 0 <= first <= last < n:
        raise UsageError(f"launches {first}-{last}: the sequence has launches 0-{n - 1}",
                         "kerncap info DIR lists them")
    if first == last:
        raise UsageError(f"launches {first}-{last} are one launch: a fusion replaces two or more",
                         "pass --first and --last of a range")
    d = _fusion_dir(root, name)
    if d.exists() and not force:
        raise KerncapError(f"{d} exists (maybe edited)", "pass another --name, or --force to write it again")
    for f in ("fused.cu", "fusion.json"):
        _file(d, f)
    buffers, scalars = _arguments(seq, first, last)
    params, decls, structs = _parameters(buffers, scalars)
    first_launch = seq.launches[first]
    kernels = ", ".join(f"{i}: {seq.kernel_of(i).demangled or seq.kernel_of(i).name}" for i in range(first, last + 1))
    between = [s for s in seq.steps if s.op != "launch"]
    step_of = {s.launch: j for j, s in enumerate(seq.steps) if s.op == "launch"}
    inside = [s.describe() for s in seq.steps[step_of[first]:step_of[last] + 1] if s.op != "launch"]
    text = "\n".join([
        # no path: the file travels with the reproducer (pack, unpack, another machine)
        f"// kerncap fusion skeleton '{name}': launches {first}-{last} of this reproducer's sequence",
        f"// ({kernels}),",
        "// replaced by this one kernel. Its parameters are every buffer those launches take (each",
        "// device pointer once), then each launch's scalar arguments: fusion.json passes the",
        "// captured values in this order. Keep the parameter list; write the body; set the launch",
        "// (grid, block, shared_mem_bytes) in fusion.json; then `kerncap fuse DIR --name "
        f"{name} --build`.",
        *(["// Between these launches the sequence also does: " + "; ".join(inside) + ". Those steps stay, before",
           "// the fused launch (which takes the place of the last replaced one): a copy or fill there that",
           "// reads what a replaced launch wrote needs a range that ends before it."] if inside else []),
        "// A buffer only the replaced launches use (an intermediate) is left out of the comparison",
        "// when kerncap infers it or you declare it (--intermediate NAME); reports name each one.",
        "#include <cstdint>",
        *structs,
        "",
        f'extern "C" __global__ void {KERNEL}(',
        *decls,
        ") {",
        "  // TODO: the work of the replaced launches",
        "}",
        "",
    ])
    config = {"format": "kerncap-fusion", "format_version": 1, "name": name, "first": first, "last": last,
              "kernel": KERNEL, "source": "fused.cu", "grid": list(first_launch.grid),
              "block": list(first_launch.block), "shared_mem_bytes": 0, "params": params,
              "intermediates": [], "steps_inside": inside, "other_steps": len(between)}
    _fusion_dir(root, name, create=True)
    write_atomic(d / "fused.cu", text)
    write_atomic(d / "fusion.json", json.dumps(config, indent=1) + "\n")
    return d / "fused.cu"


def _arguments(seq, first: int, last: int) -> tuple[dict[int, Buffer], list[dict[str, Any]]]:
    """The launches' arguments: each device pointer once as a buffer (by address: what the
    launches use it for, whether one writes it), and every scalar argument."""
    buffers: dict[int, Buffer] = {}
    scalars: list[dict[str, Any]] = []
    for i in range(first, last + 1):
        launch = seq.launches[i]
        k = seq.kernels[launch.kernel]
        types = cxx_parameter_types(k.demangled) or []
        if len(types) != len(launch.params):
            types = [None] * len(launch.params)
        for p, t in zip(launch.params, types):
            raw = launch.param_buffer[p.offset:p.offset + p.size]
            pointer = p.size == 8 and (p.region is not None or (t is not None and "*" in t))
            if pointer:
                address = int.from_bytes(raw, "little")
                ctype, written = _clean_ctype(t)
                b = buffers.get(address)
                if b is None:
                    b = buffers[address] = Buffer(f"buf{len(buffers)}", address, p.region, ctype, written)
                elif written and not b.written:
                    b.ctype, b.written = ctype, True
                b.uses.append(f"launch {i} ({k.demangled or k.name}) argument {p.index}")
                b.launches.append(i)
                continue
            ctype = t if t and classify_cxx_type(t)[1] != "unknown" and "*" not in t else SCALAR_TYPES.get(p.size)
            scalars.append({"name": f"l{i}_arg{p.index}", "size": p.size, "value": raw.hex(), "ctype": ctype,
                            "launch": i, "index": p.index})
    return buffers, scalars


def _parameters(buffers: dict[int, Buffer], scalars: list[dict[str, Any]]
                ) -> tuple[list[dict[str, Any]], list[str], list[str]]:
    """fusion.json's parameters, the kernel's parameter declarations and the structs that
    stand for scalars of no known type."""
    params: list[dict[str, Any]] = []
    decls = []
    structs = []
    for b in buffers.values():
        role = "written" if b.written else "read" if b.written is False else "read/written?"
        params.append({"name": b.name, "kind": "buffer", "size": 8, "value": b.address.to_bytes(8, "little").hex(),
                       "address": b.address, "region": b.region, "role": role, "uses": b.uses,
                       "launches": b.launches, "ctype": b.ctype})
        decls.append(f"    {b.ctype} {b.name},  // {role}; {'; '.join(b.uses)}"
                     + (f"; region {b.region}" if b.region is not None else ""))
    for s in scalars:
        ctype = s["ctype"]
        if ctype is None:
            ctype = f"kc_arg_{s['name']}"
            structs.append(f"struct alignas({min(8, 1 << (s['size'] - 1).bit_length())}) {ctype} "
                           f"{{ unsigned char bytes[{s['size']}]; }};")
        params.append({"name": s["name"], "kind": "scalar", "size": s["size"], "value": s["value"], "ctype": ctype})
        decls.append(f"    {ctype} {s['name']},  // launch {s['launch']} argument {s['index']}, captured "
                     f"value 0x{s['value']}")
    if decls:
        decls[-1] = decls[-1].replace(",  //", "   //", 1)
    return params, decls, structs


def _pointers_into(seq, region_id: int) -> list[tuple[int, int]]:
    """(address, launch) of every pointer argument of the sequence into `region_id`."""
    out = []
    for l in seq.launches:
        for p in l.params:
            if p.size == 8 and p.region == region_id:
                out.append((int.from_bytes(l.param_buffer[p.offset:p.offset + 8], "little"), l.index))
    return out


def infer_intermediates(cap: Capture, config: dict[str, Any], declared: tuple[str, ...]) -> list[dict[str, Any]]:
    """The spans a comparison of the fused sequence leaves out, each inferred or declared."""
    seq = cap.sequence
    first, last = config["first"], config["last"]
    regions = {r.id: r for r in cap.regions}
    buffers = {p["name"]: p for p in config["params"] if p.get("kind") == "buffer"}
    for name in declared:
        if name not in buffers:
            raise UsageError(f"--intermediate {name}: the skeleton has no buffer {name}",
                             f"its buffers are {', '.join(buffers) or 'none'}")
    out = []
    for b in buffers.values():
        region = regions.get(b.get("region")) if b.get("region") is not None else None
        if region is None:
            continue
        pointers = sorted({a for a, _ in _pointers_into(seq, region.id)})
        above = [a for a in pointers if a > b["address"]]
        end = min(above[0] if above else region.end, region.end)
        launches = b.get("launches", [])
        later_use = any(l > last and b["address"] <= a < end for a, l in _pointers_into(seq, region.id))
        inferred = (b.get("role") == "written" and len(set(launches)) >= 2 and launches[0] < max(launches)
                    and not later_use)
        if b["name"] in declared or inferred:
            why = "declared" if b["name"] in declared else "inferred"
            detail = (f"written by launch {launches[0]} and taken by launch {max(launches)} of the range; no launch "
                      f"after launch {last} takes it" if why == "inferred" else "--intermediate")
            out.append({"name": b["name"], "address": b["address"], "bytes": end - b["address"], "why": why,
                        "detail": detail})
    return out


def build(repro: str | os.PathLike, name: str, *, intermediates: tuple[str, ...] = (),
          timeout: float = 600.0) -> Path:
    """Compiles fusions/<name>/fused.cu and writes variants/fuse-<name>.json; returns it."""
    return compile_fusion(repro, name, intermediates=intermediates, timeout=timeout).variant


@dataclass
class Compiled:
    """One fusion compiled: the variant written, the cubin, the nvcc command, its output
    (warnings) and how long it took."""

    variant: Path
    cubin: Path
    command: list[str]
    log: str
    seconds: float


def compile_fusion(repro: str | os.PathLike, name: str, *, intermediates: tuple[str, ...] = (),
                   timeout: float = 600.0) -> Compiled:
    """`build`, with what a front end reports of the compile (kerncap.session's fusion build)."""
    started = time.monotonic()
    root, cap = _open(repro)
    d, config = _config(root, name)
    source = _file(d, config["source"])
    _source_bytes(source)  # what nvcc is given: a regular file (a FIFO would hold it until the timeout)
    arch = capture_arch(cap)
    if arch is None:
        raise KerncapError("the capture does not say which GPU it ran on", "extract again")
    cubin = _file(d, "fused.cubin")
    nvcc = local_nvcc("nvcc", root)
    # what nvcc may read: regular files of the fusion's directory, and includes inside the
    # reproducer, the toolkit or the system's headers (a fusion has no --trust)
    files = check_tree(d, root)
    places = ReadPlaces(root, cwd=d, toolkit=Path(os.path.realpath(nvcc)).parent.parent)
    problems = include_problems([f for f in files if f.suffix != ".cubin" and f.name != "fusion.json"], places)
    if problems:
        raise KerncapError(f"{source} includes files outside the reproducer:\n" + "\n".join(f"  {p}" for p in problems),
                           "include headers of the reproducer, the CUDA toolkit or the system only")
    cmd = [nvcc, "-cubin", f"-arch=sm_{arch}", "-O3", "-lineinfo", "-o", str(cubin), str(source)]
    try:
        with scratch("fuse") as work:
            p = subprocess.run(cmd, cwd=d, env=tool_env(root, work), capture_output=True, text=True, timeout=timeout,
                               check=False)
    except subprocess.TimeoutExpired:
        raise KerncapError(f"nvcc did not finish compiling {source} within {timeout:g} s") from None
    if p.returncode != 0:
        raise KerncapError(f"nvcc could not compile {source}:\n{(p.stderr or p.stdout)[-3000:]}",
                           "fix the fused kernel and build again")
    excluded = infer_intermediates(cap, config, tuple(intermediates) + tuple(config.get("intermediates") or ()))
    fuse = {"name": name, "first": config["first"], "last": config["last"], "cubin": str(cubin.relative_to(root)),
            "kernel": config["kernel"], "grid": config["grid"], "block": config["block"],
            "shared_mem_bytes": int(config.get("shared_mem_bytes", 0)),
            "params": [{"name": q["name"], "size": q["size"], "value": q["value"], "kind": q.get("kind", "scalar")}
                       for q in config["params"]],
            "excluded": excluded}
    variant = write_variant(root, f"fuse-{name}", fuse=fuse,
                            note=f"launches {config['first']}-{config['last']} fused into {config['kernel']}")
    return Compiled(variant, cubin, cmd, (p.stderr or p.stdout or "").strip(), time.monotonic() - started)


def describe(repro: str | os.PathLike, name: str) -> dict[str, Any]:
    """A fusion as the front ends report it (`kerncap fuse --json`, MCP's fuse_skeleton): the
    range, the skeleton's path and text, fusion.json's path, the launch to edit, and every
    parameter (buffers with their address, role and uses; scalars with the captured value)."""
    root, _cap = _open(repro)
    d, config = _config(root, name)
    source = _file(d, config["source"])
    text = _source_bytes(source).decode(errors="replace")
    return {"name": name, "first": config["first"], "last": config["last"], "kernel": config["kernel"],
            "source": str(source), "config": str(d / "fusion.json"), "grid": config["grid"],
            "block": config["block"], "shared_mem_bytes": config.get("shared_mem_bytes", 0),
            "params": config["params"], "steps_inside": config.get("steps_inside", []), "text": text}


def edit(repro: str | os.PathLike, name: str, *, source: str | None = None, grid: list[int] | None = None,
         block: list[int] | None = None, shared_mem_bytes: int | None = None) -> None:
    """Writes the fused kernel's text (fused.cu) and/or its launch (fusion.json's grid, block,
    shared_mem_bytes) for a front end that edits no files itself (MCP's fuse_build)."""
    root, _cap = _open(repro)
    d, config = _config(root, name)
    launch = {k: v for k, v in (("grid", grid), ("block", block), ("shared_mem_bytes", shared_mem_bytes))
              if v is not None}
    if launch:
        # a grid or block of fewer than 3 sizes: the others are 1, as in CUDA's dim3
        updated = {**config, **{k: [*v, *[1] * (3 - len(v))] if isinstance(v, (list, tuple)) and len(v) <= 3
                                else v for k, v in launch.items()}}
        check(updated, FUSION_JSON, d / "fusion.json", "grid and block: 1 to 3 sizes each; shared_mem_bytes >= 0")
        if any(x < 1 for x in (*updated["grid"], *updated["block"])):
            raise UsageError(f"launch grid {updated['grid']} block {updated['block']}: every size must be >= 1",
                             "e.g. grid [4096, 1, 1], block [256, 1, 1]")
        write_atomic(_file(d, "fusion.json"), json.dumps(updated, indent=1) + "\n")
    if source is not None:
        write_atomic(_file(d, config["source"]), source)


def variant_summary(variant: str | os.PathLike) -> dict[str, Any]:
    """A fused variant as the front ends report it (`kerncap fuse --build --json`, MCP's
    fuse_build): its path, the range and the fused launch, and every buffer the comparison
    leaves out (name, extent, inferred or declared, why)."""
    path = Path(variant)
    doc = read_json(path, 64 << 20, f"no sequence variant at {path}", "build the fusion again")
    fuse = doc.get("fuse") or {}
    return {"variant": str(path), "name": fuse.get("name"), "first": fuse.get("first"), "last": fuse.get("last"),
            "kernel": fuse.get("kernel"), "cubin": fuse.get("cubin"), "grid": fuse.get("grid"),
            "block": fuse.get("block"), "shared_mem_bytes": fuse.get("shared_mem_bytes", 0),
            "excluded": fuse.get("excluded", []), "note": doc.get("note", "")}


# -- what a front end that edits fusions in place needs (the workbench) ---------------------------


def existing(repro: str | os.PathLike) -> list[dict[str, Any]]:
    """The fusions written so far (name, first, last), by name; one whose fusion.json cannot
    be read is left out (describe/build name what is wrong with it)."""
    root = Path(repro)
    d = root / FUSIONS
    if d.is_symlink() or not d.is_dir():
        return []
    out = []
    for entry in sorted(d.iterdir()):
        if not NAME_RE.fullmatch(entry.name):
            continue
        try:
            _d, config = _config(root, entry.name)
        except KerncapError:
            continue
        out.append({"name": entry.name, "first": config["first"], "last": config["last"]})
    return out


def suggest_name(repro: str | os.PathLike, first: int, last: int) -> str:
    """A free fusion name for launches first..last, from the kernels at its ends
    ("sp_add-sp_combine", then "-2", "-3" …)."""
    _root, cap = _open(repro)
    seq = cap.sequence
    n = len(seq.launches)

    def short(i: int) -> str:
        if not 0 <= i < n:
            return str(i)
        k = seq.kernel_of(i)
        text = (k.demangled or k.name).split("(")[0].split("<")[0].split("::")[-1].split()[-1:] or [str(i)]
        return re.sub(r"[^A-Za-z0-9_-]", "", text[0])[:28] or str(i)

    base = f"{short(first)}-{short(last)}"
    if not NAME_RE.fullmatch(base):
        base = f"l{first}-l{last}"
    d = Path(repro) / FUSIONS
    taken = {p.name for p in d.iterdir()} if d.is_dir() and not d.is_symlink() else set()
    name, i = base, 2
    while name in taken:
        name, i = f"{base}-{i}", i + 1
    return name


def of_source(repro: str | os.PathLike, path: str | os.PathLike) -> str | None:
    """The fusion whose kernel `path` is (fusions/<name>/<its fusion.json's source>), else
    None (fusion.json, the fused cubin, an editor's dropping)."""
    root = Path(repro)
    try:
        rel = Path(path).resolve().relative_to((root / FUSIONS).resolve())
    except (ValueError, OSError):
        return None
    if len(rel.parts) != 2 or not NAME_RE.fullmatch(rel.parts[0]):
        return None
    try:
        _d, config = _config(root, rel.parts[0])
    except KerncapError:
        return None
    return rel.parts[0] if rel.parts[1] == config["source"] else None


def source_hash(repro: str | os.PathLike, name: str, intermediates: tuple[str, ...] = ()) -> str:
    """The fingerprint a fusion's History row keeps: its kernel's text, its launch and the
    intermediates declared (equal fingerprints: nothing to build again)."""
    import hashlib

    root, _cap = _open(repro)
    d, config = _config(root, name)
    text = _source_bytes(_file(d, config["source"]))
    h = hashlib.sha256(f"fusion {name}:{config['first']}-{config['last']}:".encode())
    h.update(json.dumps([config["grid"], config["block"], config.get("shared_mem_bytes", 0),
                         sorted({*intermediates, *(config.get("intermediates") or ())})]).encode())
    h.update(text)
    return h.hexdigest()
