"""The declared shape of every JSON file of a reproducer and its storage (docs/capture-
format.md): the capture manifest, reproducer.json, source/build.json, the stored.json
marker and the pack index. Readers check against these before using the data
(kerncap.core.schema): one message naming the file and the field.

Bounds are what a real capture can hold, with room: they refuse absurd files (a
billion regions, a 2^60-byte allocation) before anything is allocated or reserved."""

from __future__ import annotations

from kerncap.core.schema import ANY, CHUNK_HASH, HEX, U64, Bool, Int, List, Map, Num, Obj, OneOf, Opt, Str

MAX_REGIONS = 1 << 20            # the scale tests capture 200k live allocations
MAX_REGION_BYTES = 1 << 44       # 16 TiB: more than any GPU's memory today
MAX_CHUNKS = 1 << 24
MAX_PARAMS = 1 << 12             # CUDA: 32 KiB of parameters
MAX_PARAM_BYTES = 1 << 15
DIM = List(Int(min=0, max=(1 << 31) - 1), min_len=1, max_len=3)
CHUNKS = List(Opt(CHUNK_HASH), max_len=MAX_CHUNKS)
# inside the capture directory: cubins/<sha256>.cubin as the interposer names them
CUBIN_PATH = Str(pattern=r"cubins/(?!\.\.?$)[0-9A-Za-z_.-]+", max_len=4096)

REGION = Obj({
    "id": Int(min=0, max=U64), "base": Int(min=0, max=U64), "size": Int(min=0, max=MAX_REGION_BYTES),
    "api?": Str(), "kind?": Str(), "written?": Bool(), "zero_fraction?": Num(min=0.0, max=1.0),
    "pre": CHUNKS, "post": CHUNKS,
    # a sequence's region allocated or freed inside its window (docs/sequences.md)
    "sequence_state?": Str(choices=("allocated", "freed")),
    # one physical allocation mapped at several regions (docs/capture-format.md, "Aliased mappings")
    "physical?": Obj({"allocation": Int(min=1, max=U64), "offset": Int(min=0, max=MAX_REGION_BYTES)}),
})
GLOBAL = Obj({
    "name": Str(), "section?": Str(), "size": Int(min=0, max=1 << 32), "address?": Int(min=0, max=U64),
    "written?": Bool(), "pre": CHUNKS, "post": CHUNKS,
    "module?": Int(min=0, max=1 << 16),  # a sequence's module (sequence.json modules[]) that holds it
})
# A pinned or registered host allocation (docs/capture-format.md, "Host regions"). Older
# captures list only base, size and api: recorded, not snapshotted.
HOST_REGION = Obj({
    "id?": Int(min=0, max=U64), "base": Int(min=0, max=U64), "size": Int(min=0, max=MAX_REGION_BYTES),
    "api?": Str(), "flags?": Int(min=0, max=(1 << 32) - 1), "device_pointer?": Opt(Int(min=0, max=U64)),
    "snapshotted?": Bool(), "why_not?": Str(), "written?": Bool(), "zero_fraction?": Num(min=0.0, max=1.0),
    "pre?": CHUNKS, "post?": CHUNKS,
})
# Parameter words pointing at nothing the capture holds (ClosureTargets in the interposer).
CLOSURE = Obj({
    "words_checked?": Int(min=0),
    # "launch": a sequence's launch (sequence.json launches[]) whose parameter it is
    "unresolved?": List(Obj({"launch?": Int(min=0, max=U64), "param": Int(min=0, max=MAX_PARAMS),
                             "at": Int(min=0, max=MAX_PARAM_BYTES),
                             "value": Int(min=0, max=U64), "reason?": Str(max_len=4096)}), max_len=1 << 16),
})
POINTER = Obj({"region": Int(min=0, max=U64), "offset?": Opt(Int(min=0, max=U64))})

# CUDA arrays and texture/surface objects (docs/capture-format.md, "Arrays and texture
# objects"). Bounds: CUDA arrays are at most 2^17 elements wide and 2^14 layers deep;
# the descriptor enums are small.
MAX_ARRAYS = 1 << 16
MAX_ARRAY_DIM = 1 << 20
ARRAY_DESC = {
    "format": Int(min=0, max=0xFF), "format_name?": Str(max_len=64), "channels": Int(min=1, max=4),
    "width": Int(min=1, max=MAX_ARRAY_DIM), "height": Int(min=0, max=MAX_ARRAY_DIM),
    "depth": Int(min=0, max=MAX_ARRAY_DIM), "flags": Int(min=0, max=0xFFFF),
}
ARRAY = Obj({
    "id": Int(min=0, max=MAX_ARRAYS), "handle?": Int(min=0, max=U64), "api?": Str(), **ARRAY_DESC,
    "size": Int(min=0, max=MAX_REGION_BYTES), "surface?": Bool(),
    "mipmap?": Opt(Obj({"id": Int(min=0, max=MAX_ARRAYS), "level": Int(min=0, max=31)})),
    "captured": Bool(), "why?": Str(), "written?": Bool(), "zero_fraction?": Num(min=0.0, max=1.0),
    "pre": CHUNKS, "post": CHUNKS,
})
MIPMAPPED_ARRAY = Obj({
    "id": Int(min=0, max=MAX_ARRAYS), "handle?": Int(min=0, max=U64), **ARRAY_DESC, "levels": Int(min=1, max=32),
    "level_arrays?": List(Int(min=0, max=MAX_ARRAYS), max_len=32),
})
F32 = OneOf(Num(min=-3.5e38, max=3.5e38), Str(choices=("nan", "inf", "-inf")))  # float_json in array_tracker.cpp
ENUM = Int(min=0, max=0xFF)
TEXTURE_DESC = Obj({
    "address_mode": List(ENUM, min_len=3, max_len=3), "filter_mode": ENUM, "flags": Int(min=0, max=0xFFFF),
    "max_anisotropy": Int(min=0, max=16), "mipmap_filter_mode": ENUM, "mipmap_level_bias": F32,
    "min_mipmap_level_clamp": F32, "max_mipmap_level_clamp": F32, "border_color": List(F32, min_len=4, max_len=4),
})
VIEW_DESC = Obj({
    "format": ENUM, "width": Int(min=0, max=MAX_ARRAY_DIM), "height": Int(min=0, max=MAX_ARRAY_DIM),
    "depth": Int(min=0, max=MAX_ARRAY_DIM), **{k: Int(min=0, max=1 << 14) for k in (
        "first_mipmap_level", "last_mipmap_level", "first_layer", "last_layer")},
})
RESOURCE = Obj({
    "type": Str(choices=("array", "mipmapped_array", "linear", "pitch2d", "unknown")),
    "array?": Int(min=0, max=MAX_ARRAYS), "mipmapped_array?": Int(min=0, max=MAX_ARRAYS),
    "address?": Int(min=0, max=U64), "format?": Int(min=0, max=0xFF), "channels?": Int(min=1, max=4),
    "size?": Int(min=0, max=MAX_REGION_BYTES), "width?": Int(min=0, max=1 << 31), "height?": Int(min=0, max=1 << 31),
    "pitch?": Int(min=0, max=1 << 31), "region?": Int(min=0, max=U64), "res_type?": Int(), "flags?": Int(min=0, max=0xFFFF),
})
TEXTURE_OBJECT = Obj({
    "id": Int(min=0, max=MAX_ARRAYS), "kind": Str(choices=("texture", "surface")), "handle": Int(min=0, max=U64),
    "resource": RESOURCE, "texture?": TEXTURE_DESC, "view?": VIEW_DESC,
    "params?": List(Int(min=0, max=MAX_PARAMS), max_len=MAX_PARAMS), "restorable": Bool(), "why?": Str(),
    "found_in?": List(Str(), max_len=64),
})
HANDLE = Obj({"object": Int(min=0, max=MAX_ARRAYS), "kind?": Str(choices=("texture", "surface")),
              "match?": Str(choices=("signature", "value")),
              "candidates?": List(Int(min=0, max=MAX_ARRAYS), max_len=MAX_ARRAYS)})

PARAM = Obj({
    "index": Int(min=0, max=MAX_PARAMS), "offset": Int(min=0, max=MAX_PARAM_BYTES),
    "size": Int(min=0, max=MAX_PARAM_BYTES), "value": HEX, "pointer?": Opt(POINTER),
    "pointers?": List(Obj({"at": Int(min=0, max=MAX_PARAM_BYTES), "region": Int(min=0, max=U64),
                           "offset?": Opt(Int(min=0, max=U64))})),
    "handle?": HANDLE,
    "host_pointers?": List(Obj({"at": Int(min=0, max=MAX_PARAM_BYTES), "host_region": Int(min=0, max=U64),
                                "offset?": Opt(Int(min=0, max=U64))})),
})

COMMAND = OneOf(List(Str()), Str())
SIZES = Obj({k + "?": Int(min=0) for k in ("logical", "snapshotted", "unchanged", "zero", "stored")})
BY_REASON = Map(Obj({"regions?": Int(min=0), "logical?": Int(min=0)}))  # kind of reason -> what it kept
PRUNED = Obj({
    "from?": Str(), "time?": Str(), "tool_version?": Str(), "reasons?": Map(Str()), "by_reason?": BY_REASON,
    **{k + "?": Int(min=0) for k in ("regions_full", "regions_dropped", "logical_full", "stored_full",
                                     "logical_pruned", "stored_pruned")},
})

MANIFEST = Obj({
    "format": Str(choices=("kerncap-capture",)),
    "format_version": Int(min=1),
    "complete": Bool(),
    "chunk_size": Int(min=4096, max=1 << 28),  # the interposer writes 4 MiB chunks
    "hash?": Str(choices=("xxh64",)),
    "provenance?": Obj({
        "tool_version?": Opt(Str()), "command?": Opt(COMMAND), "cwd?": Opt(Str()), "env?": Opt(Map(Str())),
        "host?": Opt(Str()), "pid?": Opt(Int()), "time?": Opt(Str()), "dispatch_index?": Opt(Int(min=0)),
        "synthetic?": Opt(OneOf(Bool(), Str(max_len=4096))),  # made by hand or a generator (tests), not a capture: true or what made it
        "match?": Opt(Obj({"pattern?": Opt(Str()), "mode?": Opt(Str())})),
        "gpu?": Opt(Obj({"name?": Opt(Str()), "cc?": Opt(List(Int(min=0, max=1000), max_len=2)),
                         "uuid?": Opt(Str()), "driver_version?": Opt(Int()), "ordinal?": Opt(Int(min=0))})),
        "capture_seconds?": Opt(Map(OneOf(Num(), ANY))),
        # the capturing process in its job (-1: not set) and a set member's bucket (docs/selection.md)
        "job?": Opt(Obj({"rank?": Opt(Int()), "rank_var?": Opt(Str()), "world_size?": Opt(Int()),
                         "local_rank?": Opt(Int())})),
        "bucket?": Opt(Int(min=0)),
        "bytes?": Opt(SIZES),
    }),
    "kernel": Obj({
        "name": Str(pattern=r".+", max_len=1 << 16),  # no NUL (as every Str): the replay passes it as a C string
        "demangled?": Opt(Str()),
        "handle_kind?": Opt(Str()),
        "launch_api?": Opt(Str()),
        "module": Obj({"cubin": CUBIN_PATH, "sha256?": Opt(Str()), "selection?": Opt(Str()),
                       "candidates?": Opt(Int(min=0)), "verified?": Opt(Map(Bool()))}),
        "attributes?": Opt(Map(OneOf(Int(), Num(), Str(), Bool()))),
    }),
    "launch": Obj({
        "grid": DIM, "block": DIM, "shared_mem_bytes?": Int(min=0, max=1 << 32),
        "stream?": Opt(Str()), "cooperative?": Bool(), "param_form?": Opt(Str()),
        "attributes?": List(Obj({"id": Int(), "value?": HEX}), max_len=64),
        "nvtx?": Opt(Obj({"path?": Str(), "stack?": List(Str(), max_len=1 << 12),
                          "ranges?": List(Str(), max_len=1 << 12)})),
    }),
    "params?": List(PARAM, max_len=MAX_PARAMS),
    "param_buffer?": HEX,
    "regions?": List(REGION, max_len=MAX_REGIONS),
    "host_regions?": List(HOST_REGION, max_len=MAX_REGIONS),
    "closure?": Opt(CLOSURE),
    "globals?": List(GLOBAL, max_len=1 << 16),
    "arrays?": List(ARRAY, max_len=MAX_ARRAYS),
    "mipmapped_arrays?": List(MIPMAPPED_ARRAY, max_len=MAX_ARRAYS),
    "texture_objects?": List(TEXTURE_OBJECT, max_len=MAX_ARRAYS),
    "texture_instructions?": Str(choices=("unknown", "none", "texture", "surface", "texture and surface")),
    "warnings?": List(Str()),
    "pruned?": Opt(PRUNED),
    # a sequence capture: its launches and steps are in sequence.json (SEQUENCE_JSON)
    "sequence?": Obj({"file": Str(choices=("sequence.json",)), "mode?": Str(), "launches?": Int(min=0),
                      "steps?": Int(min=0), "kernels?": Int(min=0), "modules?": Int(min=0)}),
})

SOURCES = Obj({
    "kind": Str(), "translation_unit?": Opt(Str()), "files?": List(Str()), "compile_command?": List(Str()),
    "method?": Opt(Str()), "confidence?": Opt(Str()), "notes?": List(Str()), "reason?": Str(),
    "warnings?": List(Str()),
})
PRUNE_RECORD = Obj({  # reproducer.json "prune" (kerncap.reproducer.prune_report)
    "kept?": Str(), "reason?": Str(), "validated?": Bool(), "output?": Opt(Str()), "reasons?": Map(Str()),
    "by_reason?": BY_REASON,
    "seconds?": Map(Num()), "notes?": List(Str()), "time?": Str(), "ratio?": OneOf(Num(), Str()),
    **{k + "?": Int(min=0) for k in ("regions_full", "regions_pruned", "logical_full", "logical_pruned",
                                     "stored_full", "stored_pruned")},
})
# reproducer.json "provenance" (kerncap.core.stack.provenance): the fields `info`, `check`
# and the stack comparison read, typed; a field they don't read may hold anything.
STACK_PROVENANCE = Obj({
    "kerncap?": Opt(Str()), "python?": Opt(Str()), "packages?": Opt(Map(Opt(Str()))),
    "driver?": Opt(Str()), "cuda_driver?": Opt(Int(min=0)), "host?": Opt(Str()),
    "gpu?": Opt(Obj({"name?": Opt(Str()), "uuid?": Opt(Str()), "clocks?": Opt(Map(Opt(Num())))})),
    "env_changes?": Opt(Map(Opt(Str()))), "env?": Opt(Map(Opt(Str()))),
})
REPRODUCER_JSON = Obj({
    "kerncap_version?": Str(),
    "kernel?": Opt(Str()),
    "demangled?": Opt(Str()),
    "match?": Opt(Obj({"pattern?": Str(), "mode?": Str()})),
    "dispatch?": Int(min=0),
    "command?": COMMAND,
    "created?": Str(),
    "sources?": Opt(SOURCES),
    "triton?": Opt(Map(ANY)),
    "notes?": List(Str()),
    "prune?": PRUNE_RECORD,
    "provenance?": Opt(STACK_PROVENANCE),  # the stack the capture ran on (kerncap.core.stack)
})

BUILD_JSON = Obj({
    "kernel": Str(),
    "compile_command": List(Str(max_len=1 << 16), min_len=1, max_len=4096),
    "cwd": Str(),
    "source_root?": Str(),
    "arch?": Opt(Str(pattern=r"sm_[0-9]+[af]?")),
    "tu": Str(pattern=r"(?!/)(?!.*(^|/)\.\.(/|$)).+", max_len=4096),  # relative, inside source/
    "include_dirs?": List(Str()),
    "files?": List(Str()),
})

STORED_JSON = Obj({"format": Str(choices=("kerncap-stored",)), "store": Str(pattern=r"[^\x00]+", max_len=4096),
                   "chunks?": Int(min=0), "time?": Str()})

PACK_ENTRY = Obj({
    "path": Str(max_len=4096), "type": Str(choices=("file", "dir", "symlink")),
    "mode?": Int(min=0), "mtime?": Num(min=0, max=1e11), "size?": Int(min=0, max=1 << 40), "xxh64?": CHUNK_HASH, "target?": Str(),
})
PACK_INDEX = Obj({
    "format": Str(choices=("kerncap-pack",)),
    "format_version": Int(min=1),
    "blobs_dir": Str(max_len=4096),
    "entries": List(PACK_ENTRY, max_len=1 << 20),
    "blobs": List(Obj({"hash": CHUNK_HASH, "size": Int(min=0, max=1 << 32)}), max_len=MAX_CHUNKS),
})

# A shape bucket: one launch signature of a kernel with its count and times
# (kerncap.reproducer.buckets; the interposer's launch_buckets.cpp writes them).
BUCKET = Obj({
    "kernel": Str(max_len=1 << 16), "demangled?": Str(), "grid": DIM, "block": DIM,
    "shared_mem_bytes": Int(min=0, max=1 << 32),
    "scalars?": List(Obj({"index": Int(min=0, max=MAX_PARAMS), "size": Int(min=0, max=MAX_PARAM_BYTES),
                          "hex": Str(max_len=1 << 16)}), max_len=MAX_PARAMS),
    "scalars_known?": Bool(),
    **{k + "?": Int(min=0) for k in ("launches", "timed", "total_ns", "min_ns", "max_ns")},
    **{k + "?": Opt(Int()) for k in ("first_dispatch", "captured_dispatch", "id")},
    "capture_dir?": Opt(Str()), "refused?": Opt(Str()), "failed?": Bool(),
})

# A saved `kerncap profile` (kerncap.capture.profile.ProfileResult).
PROFILE = Obj({
    "format": Str(choices=("kerncap-profile",)),
    "format_version": Int(min=1),
    "kernels": List(Obj({
        "name": Str(), "demangled": Str(), "calls": Int(min=0), "total_ns": Int(min=0), "avg_ns": Num(min=0),
        "min_ns": Int(min=0), "max_ns": Int(min=0), "grid": DIM, "block": DIM, "percent": Num(min=0),
        # sampled timing (docs/interposer.md "Sampled profile"): launches timed, 90 % interval
        "timed?": Opt(Int(min=0)), "preempted?": Opt(Int(min=0)), "total_lo_ns?": Opt(Int(min=0)),
        "total_hi_ns?": Opt(Int(min=0)), "graph?": Bool(),
    })),
    "total_ns": Int(min=0), "dispatches": Int(min=0), "processes": Int(min=0),
    "timing?": Str(choices=("sampled", "exact")),
    "command?": List(Str()), "created?": Str(), "wall_seconds?": Num(), "exit_status?": Opt(Int()),
    "dropped_records?": Int(min=0), "warnings?": List(Str()), "kerncap_version?": Str(),
    "cupti_finalized?": Opt(Bool()),
    "nvtx?": Opt(Obj({"pattern": Str(), "match": Str()})),
    "nvtx_ranges?": List(Obj({"path": Str(), "kernel": Str(), "demangled": Str(), "calls": Int(min=0),
                              "total_ns": Int(min=0), "min_ns": Int(min=0), "max_ns": Int(min=0),
                              "percent": Num(min=0)})),
    "buckets?": List(BUCKET),
})

# determinism.json beside capture/: what `kerncap validate` found about the captured
# kernel's determinism (kerncap.replay.differential).
DETERMINISM_JSON = Obj({
    "format": Str(choices=("kerncap-determinism",)), "format_version": Int(min=1, max=1),
    "time?": Str(), "kernel?": Opt(Str()), "gpu?": ANY,
    "runs": Int(min=1), "deterministic": Bool(), "spread_factor?": Num(),
    "regions": List(Obj({"region": Int(min=0), "dtype": Opt(Str()), "differing_runs": Int(min=0),
                         "max_abs": Opt(Num()), "max_rel": Opt(Num()), "atol": Opt(Num())})),
    "capture_mismatch?": List(Str()),
})

# launches.json: the app's kernels by launches up to the capture (kerncap.reproducer.launches).
LAUNCHES_JSON = Obj({
    "format": Str(choices=("kerncap-launches",)),
    "kernels": List(Obj({"name": Str(max_len=1 << 16), "calls": Int(min=0), "captured?": Bool()}), max_len=1 << 20),
    "processes": Int(min=0), "launches": Int(min=0), "command?": List(Str()), "note?": Str(),
})

# set.json of a reproducer set (kerncap.reproducer.sets).
SET_JSON = Obj({
    "format": Str(choices=("kerncap-set",)), "format_version": Int(min=1, max=1),
    "kerncap_version?": Str(), "kernel?": Opt(Str()), "demangled?": Opt(Str()),
    "match?": Opt(Obj({"pattern?": Str(), "mode?": Str()})), "mode?": Str(choices=("buckets", "dispatches")),
    "dispatches?": Opt(List(Int(min=0))), "command?": COMMAND, "created?": Str(),
    "members": List(Obj({
        "index": Int(min=0, max=1 << 20), "dir": Str(pattern=r"members/[0-9]{1,9}"), "dispatch": Int(min=0),
        "weight": Num(min=0.0, max=1.0), "bucket?": Opt(BUCKET), "signature?": Opt(Str()),
        "launches?": Opt(Int(min=0)), "time_ns?": Opt(Num(min=0)),
    }), min_len=1, max_len=1 << 16),
    "refused?": List(Obj({"bucket?": Opt(BUCKET), "signature?": Opt(Str()), "launches?": Opt(Int(min=0)),
                          "reason?": Opt(Str())}), max_len=1 << 20),
    "buckets_total?": Int(min=0), "dispatches_counted?": Opt(Int(min=0)), "times?": Str(),
    "coverage?": Opt(Num(min=0.0, max=1.0)), "notes?": List(Str()),
})
SET_VARIANT_JSON = Obj({
    "format?": Str(choices=("kerncap-set-variant",)), "config?": Opt(Str()), "created?": Str(),
    "cubins": Map(Str(pattern=r".+", max_len=4096), max_len=1 << 16),
})

# history.json: the variant history (kerncap.reproducer.history), written by every front
# end's build (kerncap.session); it travels with the reproducer.
VALIDATIONS = ("pass", "fail", "inconclusive", "error", "skipped")
_MS = Opt(Num(min=0.0, max=1e9))
_RATIO = Opt(Num(min=0.0, max=1e9))
HISTORY_VARIANT = Obj({
    "id": Int(min=0, max=1 << 31), "time": Str(max_len=64), "median_ms": _MS, "min_ms?": _MS,
    "spread_pct?": Opt(Num(min=0.0, max=1e9)), "validation?": Str(choices=VALIDATIONS),
    "commit?": Opt(Str(pattern=r"[0-9a-f]{4,64}")), "cubin?": Opt(Str(pattern=r"[^\x00]+", max_len=4096)),
    "build_seconds?": Opt(Num(min=0.0, max=1e9)), "note?": Str(max_len=1 << 16),
    "source_hash?": Opt(Str(pattern=r"[0-9a-f]{64}")), "validation_detail?": Str(max_len=256),
    "speedup?": _RATIO, "speedup_low?": _RATIO, "speedup_high?": _RATIO,
    "confidence?": Opt(Num(min=0.0, max=1.0)), "significant?": Opt(Bool()), "speedup_bound?": _RATIO,
    "timer?": Opt(Str(choices=("events", "kernel"))),
    "kernel?": Opt(Int(min=0, max=1 << 16)), "launch_ms?": Opt(List(_MS, max_len=1 << 20)),
    # a sequence's fusion (kerncap.session.fusions): the range replaced, what was not compared
    "fusion?": Opt(Obj({
        "name": Str(pattern=r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}"), "first": Int(min=0, max=1 << 20),
        "last": Int(min=0, max=1 << 20),
        "excluded?": List(Obj({"name": Str(max_len=256), "address?": Int(min=0, max=U64),
                               "bytes?": Int(min=0, max=U64), "why?": Str(max_len=64)}), max_len=1 << 12),
        "fused_ms?": _MS, "replaced_ms?": _MS,
    })),
    # the last `kerncap apply` of the row's cubin (kerncap.capture.apply.ApplyResult.in_app)
    "in_app?": Opt(Obj({
        "time": Str(max_len=64), "command": Str(max_len=4096), "launches": Int(min=0), "substituted": Int(min=0),
        "check": Opt(Str(choices=("pass", "fail", "unsteady", "nothing"))), "compared": Opt(Int(min=0)), "mismatch_launch": Opt(Int(min=0)),
        "kernel_speedup": _RATIO, "kernel_low": _RATIO, "kernel_high": _RATIO,
        "app_speedup": _RATIO, "app_low": _RATIO, "app_high": _RATIO, "share": Opt(Num(min=0.0, max=1.0)),
    })),
})
HISTORY_JSON = Obj({"version": Int(min=1, max=1), "variants": List(HISTORY_VARIANT, max_len=1 << 20)})

# sequence.json of a sequence capture (docs/capture-format.md "Sequences"; written by
# native/capture/sequence_capture.cpp, read by kerncap.reproducer.sequence). A whole decode
# step is a few thousand launches; a million steps is far past any real window.
MAX_STEPS = 1 << 20
MAX_SEQ_ITEMS = 1 << 16
SEQ_ID = Int(min=0, max=MAX_STEPS)
SEQUENCE_STEP = Obj({
    "op": Str(choices=("launch", "copy", "memset", "record", "wait", "sync")), "api?": Str(max_len=256),
    "stream?": Int(min=0, max=MAX_SEQ_ITEMS), "launch?": SEQ_ID,
    "kind?": Str(choices=("d2d", "h2d", "d2h")), "dst?": Int(min=0, max=U64), "src?": Int(min=0, max=U64),
    "bytes?": Int(min=0, max=MAX_REGION_BYTES), "payload?": CHUNKS,
    "value?": Int(min=0, max=0xFFFFFFFF), "element?": Int(min=1, max=4), "width?": Int(min=0, max=MAX_REGION_BYTES),
    "height?": Int(min=0, max=1 << 31), "pitch?": Int(min=0, max=1 << 40),
    "event?": SEQ_ID, "scope?": Str(choices=("context", "stream", "event")),
})
_SEQUENCE_STEPS = {
    "streams": List(Obj({"id": Int(min=0, max=MAX_SEQ_ITEMS), "kind": Str(choices=("legacy", "per-thread", "user")),
                         "blocking": Bool()}), max_len=MAX_SEQ_ITEMS),
    "events": Int(min=0, max=MAX_STEPS), "dropped_waits?": Int(min=0),
    "steps": List(SEQUENCE_STEP, min_len=1, max_len=MAX_STEPS),
}
SEQUENCE_STEPS = Obj(_SEQUENCE_STEPS)
SEQUENCE_LAUNCH = Obj({
    "index": SEQ_ID, "kernel": Int(min=0, max=MAX_SEQ_ITEMS), "launch_api?": Str(max_len=256),
    "stream_id": Int(min=0, max=MAX_SEQ_ITEMS), "grid": DIM, "block": DIM,
    "shared_mem_bytes?": Int(min=0, max=1 << 32), "stream?": Str(), "cooperative?": Bool(),
    "attributes?": List(Obj({"id": Int(), "value?": HEX}), max_len=64),
    "param_form?": Str(choices=("array", "extra")), "nvtx?": Str(max_len=1 << 16),
    "params": List(PARAM, max_len=MAX_PARAMS), "param_buffer": HEX,
})
SEQUENCE_JSON = Obj({
    "format": Str(choices=("kerncap-sequence",)), "format_version": Int(min=1, max=1),
    "mode": Str(choices=("nvtx", "graph", "run")), "selection?": Map(ANY), "graph?": Opt(Map(ANY)),
    "device?": Int(min=0),
    "modules": List(Obj({"id": Int(min=0, max=MAX_SEQ_ITEMS), "cubin": CUBIN_PATH, "sha256?": Str(),
                         "selection?": Str(), "candidates?": Int(min=0),
                         "globals?": List(Int(min=0, max=MAX_SEQ_ITEMS), max_len=MAX_SEQ_ITEMS)}),
                    min_len=1, max_len=MAX_SEQ_ITEMS),
    "kernels": List(Obj({"id": Int(min=0, max=MAX_SEQ_ITEMS), "module": Int(min=0, max=MAX_SEQ_ITEMS),
                         "name": Str(pattern=r".+", max_len=1 << 16), "demangled?": Opt(Str()),
                         "handle_kind?": Opt(Str()), "attributes?": Opt(Map(OneOf(Int(), Num(), Str(), Bool())))}),
                    min_len=1, max_len=MAX_SEQ_ITEMS),
    "launches": List(SEQUENCE_LAUNCH, min_len=1, max_len=MAX_STEPS),
    **_SEQUENCE_STEPS,
    "notes?": List(Str()), "seconds?": Map(Num()), "payload_bytes?": Int(min=0),
})

# variants/<name>.json of a sequence (kerncap.reproducer.sequence_variant): modules rebuilt
# from source and/or one fusion (a contiguous range of launches replaced by one kernel).
VARIANT_PATH = Str(pattern=r"(?!/)(?!.*(^|/)\.\.(/|$))[^\x00\\]+", max_len=4096)  # relative, inside the reproducer
FUSED_PARAM = Obj({
    "name": Str(pattern=r"[A-Za-z_][A-Za-z0-9_]{0,127}"), "size": Int(min=1, max=MAX_PARAM_BYTES), "value": HEX,
    "kind?": Str(choices=("buffer", "scalar")),
})
EXCLUDED_SPAN = Obj({
    "name": Str(max_len=256), "address": Int(min=0, max=U64), "bytes": Int(min=1, max=MAX_REGION_BYTES),
    "why": Str(choices=("inferred", "declared")), "detail?": Str(max_len=4096),
})
# fusions/<name>/fusion.json (kerncap.recompile.fusion): the skeleton's parameters with their
# captured values, the range it replaces and the launch the user edits.
FUSION_PARAM = Obj({
    "name": FUSED_PARAM.field("name"), "kind": Str(choices=("buffer", "scalar")),
    "size": Int(min=1, max=MAX_PARAM_BYTES), "value": HEX, "address?": Int(min=0, max=U64),
    "region?": Opt(Int(min=0, max=U64)), "launches?": List(SEQ_ID, max_len=MAX_STEPS),
})
FUSION_JSON = Obj({
    "format": Str(choices=("kerncap-fusion",)), "format_version": Int(min=1, max=1), "name?": Str(max_len=256),
    "first": SEQ_ID, "last": SEQ_ID, "kernel": Str(pattern=r"[A-Za-z_][A-Za-z0-9_]{0,255}"),
    "source": Str(pattern=r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"), "grid": DIM, "block": DIM,
    "shared_mem_bytes?": Int(min=0, max=1 << 32), "params": List(FUSION_PARAM, max_len=MAX_PARAMS),
    "intermediates?": List(Str(max_len=256), max_len=1 << 12),
})
SEQUENCE_VARIANT_JSON = Obj({
    "format": Str(choices=("kerncap-sequence-variant",)), "format_version": Int(min=1, max=1),
    "created?": Str(), "note?": Str(max_len=1 << 16),
    "modules?": Map(VARIANT_PATH, max_len=MAX_SEQ_ITEMS),
    "fuse?": Obj({
        "first": SEQ_ID, "last": SEQ_ID, "cubin": VARIANT_PATH, "kernel": Str(pattern=r".+", max_len=1 << 16),
        "grid": DIM, "block": DIM, "shared_mem_bytes?": Int(min=0, max=1 << 32),
        "params": List(FUSED_PARAM, max_len=MAX_PARAMS), "excluded?": List(EXCLUDED_SPAN, max_len=1 << 12),
        "name?": Str(max_len=256),
    }),
})
