"""CUDA arrays and texture/surface objects in the capture format and everything that reads
it, on the SYNTHETIC capture of tests/texture_capture.py (the real axpy_small capture
with array and object records added as the interposer writes them; the GPU suite makes
real ones, tests/gpu/test_textures.py): the typed records and their checks, `info`,
an older capture that lacks them, damaged descriptors and array payloads named by file
and field, pack/unpack, the store, prune, the Memory pane's map, and the specs the replay
server hands the native core (array items, objects, handle patches)."""

from __future__ import annotations

import struct
import types
from pathlib import Path

import pytest
from test_damaged_input import edit_manifest
from texture_capture import AXPY, TEXTURE_PARAM_OFFSETS, make_texture_capture

from kerncap import api
from kerncap.cli import main
from kerncap.errors import CaptureFormatError
from kerncap.prune.closure import compute_closure
from kerncap.prune.pruner import write_pruned
from kerncap.reproducer.format import Capture, capture_chunks
from kerncap.reproducer.info import lacks
from kerncap.reproducer.pack import pack, unpack
from kerncap.reproducer.payloads import check_payloads
from kerncap.reproducer.store import Store
from kerncap.reproducer.stored import hydrate, store_reproducer


@pytest.fixture
def repro(tmp_path) -> Path:
    return make_texture_capture(tmp_path / "tex")


def test_records_are_typed_and_their_payloads_are_the_capture_s(repro):
    cap = Capture.open(repro)
    assert [a.dims for a in cap.arrays] == ["64x32 float (surface)", "16x16 uint8x4, level 0 of mipmapped array 0",
                                            "8x8 uint8x4, level 1 of mipmapped array 0"]
    assert [a.written for a in cap.arrays] == [True, False, False] and cap.arrays[0].dtype == "float32"
    assert [(o.kind, o.handle, o.restorable) for o in cap.texture_objects] == [
        ("texture", 1, True), ("surface", 2, True), ("texture", 3, True), ("texture", 4, True), ("texture", 5, False)]
    assert [(p.index, p.handle_object) for p in cap.params if p.handle_object is not None] == [(4, 0), (5, 1)]
    assert lacks(cap) == []
    # The arrays' chunks are payloads like any region's: counted, verified, packed, stored.
    array_chunks = {h for a in cap.arrays for h in (*a.pre, *a.post)}
    assert array_chunks <= {h for h, _ in capture_chunks(cap)} and len(array_chunks) == 4
    cap.verify()
    assert check_payloads(cap, verify=True).ok


def test_info_lists_arrays_objects_and_the_handle_arguments(repro):
    summary = api.info(repro)
    assert [a["id"] for a in summary["arrays"]] == [0, 1, 2]
    assert summary["texture_objects"][3]["resource"].startswith("pitch2d float 1000x4, pitch 4096 at 0x")
    text = api.format_info(summary)
    assert "CUDA arrays (3)" in text and "texture and surface objects (5)" in text
    assert "texture object 0" in text and "texture object 1" in text  # the parameters' "points to"
    assert "no: its CUDA array 0x55559900 was destroyed" in text
    assert "lacks" not in text


# The axpy capture as the kerncap of 2026-11-30 wrote it (H200, before arrays, host memory
# contents and the closure check): a real older capture, kept as it was.
AXPY_OLDER = AXPY.parent / "axpy_older"


def test_an_older_capture_opens_and_says_what_it_lacks(capsys):
    AXPY = AXPY_OLDER
    cap = Capture.open(AXPY)
    assert cap.arrays == [] and cap.texture_objects == []
    assert sum("texture" in w for w in lacks(cap)) == 1  # (and the closure check, issue 25's other half)
    assert main(["info", str(AXPY)]) == 0
    assert "LACKS       CUDA arrays and texture/surface objects: this kerncap did not" in capsys.readouterr().out


@pytest.mark.parametrize("change, field", [
    (lambda m: m["arrays"][0].update(size=8000), "field arrays[0].size is 8000 bytes; a 64x32 float (surface) array holds 8192"),
    (lambda m: m["arrays"][0].update(format=0xB0), "field arrays[0].format 0xb0 with 1 channel(s) is not a format"),
    (lambda m: m["arrays"][0].update(channels=3), "field arrays[0].channels 3 does not fit format float (0x20)"),
    (lambda m: m["arrays"][0].update(width=0), "field arrays[0].width must be >= 1"),
    (lambda m: m["arrays"][0].update(height=1 << 30), "field arrays[0].height must be <="),
    (lambda m: m["arrays"][1].update(pre=[]), "field arrays[1].pre/post list 0/1 chunks, expected 1"),
    (lambda m: m["arrays"][1].update(mipmap={"id": 7, "level": 0}), "field arrays[1].mipmap.id names mipmapped array 7"),
    (lambda m: m["arrays"][2].update(id=1), "field arrays lists an id twice"),
    (lambda m: m["mipmapped_arrays"][0].update(levels=0), "field mipmapped_arrays[0].levels must be >= 1"),
    (lambda m: m["texture_objects"][0]["resource"].update(array=9), "texture_objects[0].resource.array names array 9"),
    (lambda m: m["texture_objects"][0]["texture"].update(address_mode=[1, 1]),
     "field texture_objects[0].texture.address_mode"),
    (lambda m: m["texture_objects"][0]["texture"].update(mipmap_level_bias="x"),
     "field texture_objects[0].texture.mipmap_level_bias"),
    (lambda m: m["texture_objects"][0].update(kind="sampler"), "field texture_objects[0].kind"),
    (lambda m: m["texture_objects"][1]["resource"].update(type="linear"), "texture_objects[1].resource.type is linear"),
    (lambda m: m["texture_objects"][3]["resource"].update(pitch=1 << 20),
     "field texture_objects[3].resource.address"),
    (lambda m: m["texture_objects"][3]["resource"].update(region=5), "texture_objects[3].resource.region names region 5"),
    (lambda m: m["params"][4]["handle"].update(object=17), "field params[4].handle.object names texture object 17"),
    (lambda m: m["params"][0].update(handle={"object": 0}), "field params[0].handle is on a 4-byte parameter"),
])
def test_damaged_descriptors_are_named_by_file_and_field(repro, change, field):
    path = edit_manifest(repro, change)
    with pytest.raises(CaptureFormatError) as err:
        Capture.open(repro)
    assert str(path) in err.value.message and field in err.value.message, err.value.message


def test_a_damaged_descriptor_through_the_cli_is_one_message_and_status_3(repro, capsys):
    edit_manifest(repro, lambda m: m["arrays"][0].update(size=8000))
    assert main(["info", str(repro)]) == 3
    err = capsys.readouterr().err
    assert "arrays[0].size" in err and "manifest.json" in err and "Traceback" not in err


def test_a_damaged_array_payload_is_named(repro):
    cap = Capture.open(repro)
    h = cap.arrays[0].post[0]
    blob = cap.blob_path(h)
    blob.write_bytes(blob.read_bytes()[:-4])  # truncated
    check = check_payloads(Capture.open(repro))
    assert not check.ok and check.damaged == [f"{h} (array 0 post-state chunk 0): {h}.bin holds 8188 bytes, expected 8192"]
    blob.write_bytes(b"\x01" * 8192)  # right size, wrong bytes
    with pytest.raises(CaptureFormatError) as err:
        Capture.open(repro).verify()
    assert str(blob) in err.value.message and "does not match its hash" in err.value.message


def test_pack_unpack_and_the_store_carry_the_array_payloads(repro, tmp_path):
    packed = pack(repro, tmp_path / "t.kcap")
    restored = unpack(tmp_path / "t.kcap", tmp_path / "restored")
    assert restored.blobs == packed.blobs == len(set(Capture.open(repro).iter_blobs()))
    back = Capture.open(tmp_path / "restored")
    back.verify()
    assert back.read_bytes(back.arrays[0].post, back.arrays[0].size) == struct.pack("<2048f", *map(float, range(2048)))
    r = store_reproducer(tmp_path / "restored", Store(tmp_path / "store"))
    assert r.chunks == len(list(capture_chunks(back))) and not list((back.root / "blobs").glob("*.bin"))
    Capture.open(tmp_path / "restored").verify()  # array chunks read from the store
    assert hydrate(tmp_path / "restored").chunks == r.chunks


def test_prune_keeps_the_arrays_and_the_memory_of_a_pitched_texture(repro, tmp_path):
    out = write_pruned(repro, compute_closure(Capture.open(repro)), tmp_path / "pruned")
    pruned = Capture.open(out)
    assert [a.id for a in pruned.arrays] == [0, 1, 2] and len(pruned.texture_objects) == 5
    pruned.verify()  # the array chunks were linked along

    def no_pointer_arguments(m):  # region 0 is then reached only as texture object 3's memory
        m["param_buffer"] = "00" * len(bytes.fromhex(m["param_buffer"]))
        for p in m["params"]:
            p["value"] = "00" * p["size"]
            p.pop("pointer", None)
            p.pop("handle", None)
    edit_manifest(repro, no_pointer_arguments)
    closure = compute_closure(Capture.open(repro))
    assert closure.reasons == {0: "texture object 3"}
    assert "region 1" in closure.refusal  # written, reached by nothing: not prunable


def test_the_memory_map_draws_arrays_as_a_kind_of_their_own(repro):
    from kerncap_tui.regions import map_rows, preview_bytes
    from kerncap_tui.widgets.memory_map import layout, mark_of

    cap = Capture.open(repro)
    rows = map_rows(cap)
    arrays = [r for r in rows if r.key.startswith("a")]
    assert [r.label for r in arrays][0] == "array 0 (64x32 float (surface))"
    assert [mark_of(r) for r in arrays] == ["array written", "array", "array"]
    assert [r.by_argument for r in arrays] == [True, False, False]  # only array 0's objects are arguments
    view = layout(rows, 80)
    glyphs = "".join(g for g, _ in view.cells)
    assert "│" in glyphs and glyphs.index("│") < glyphs.index("▦") < glyphs.index("▤")
    assert "a0" in view.labels and view.end == max(r.base + r.size for r in cap.regions)
    pre, post = preview_bytes(cap, "a0")
    assert pre[:8] == struct.pack("<2f", 0.0, 0.25) and post[:8] == struct.pack("<2f", 0.0, 1.0)


class _Spec(types.SimpleNamespace):
    pass


def _fake_core(calls: list):
    """The pieces of kerncap._replay NativeSession builds specs from: plain records."""
    class Session:
        def load_arrays(self, mipmaps, arrays, objects):
            calls.append((mipmaps, arrays, objects))

    names = ("ArrayDescSpec", "MipmapSpec", "ArraySpec", "ObjectSpec", "ItemSpec", "LaunchSpec")
    return types.SimpleNamespace(**{n: _Spec for n in names}), Session()


def test_the_replay_specs_recreate_what_was_captured(repro):
    """NativeSession's glue to the native core: array items point at the recreated arrays,
    objects keep their descriptors (float32 bits exact), the launch patches the handle
    parameters, an object the capture could not restore is handed over as "none"."""
    from kerncap.replay.native_session import NativeSession, item_label

    calls: list = []
    ns = NativeSession.__new__(NativeSession)
    ns.capture = Capture.open(repro)
    ns.core, ns.session = _fake_core(calls)
    index = ns._load_arrays()
    ((mipmaps, arrays, objects),) = calls
    assert index == {0: 0, 1: 1, 2: 2} and [m.levels for m in mipmaps] == [2]
    assert [(a.mipmap, a.level, a.desc.width) for a in arrays] == [(-1, 0, 64), (0, 0, 16), (0, 1, 8)]
    assert [o.resource for o in objects] == ["array", "array", "mipmapped_array", "pitch2d", "none"]
    assert objects[1].surface and objects[3].pitch == 4096 and objects[3].address == ns.capture.regions[0].base
    assert struct.pack("<f", objects[0].mipmap_level_bias) == struct.pack("<f", 0.1)
    assert objects[2].has_view and objects[2].last_mipmap_level == 1
    assert "destroyed" in objects[4].why
    ns._array_index = index
    item = ns._item_spec(ns.capture.arrays[0])
    assert (item.label, item.array, item.size, item.base) == ("array 0", 0, 8192, 0)
    assert item_label(ns.capture.arrays[2]) == "array 2"
    spec = ns._launch_spec()
    assert spec.handles == [(TEXTURE_PARAM_OFFSETS[0], 0), (TEXTURE_PARAM_OFFSETS[1], 1)]


def test_dump_and_mismatch_maps_see_arrays_as_items(repro):
    """kerncap dump / the mismatch report number the replay's items as the server does:
    arrays after the regions and globals, laid out as rows of texels."""
    from kerncap.replay import tensor_view as tv

    cap = Capture.open(repro)
    items = tv.replay_items(cap)
    arrays = [i for i in items if i.kind == "array"]
    assert [(i.id, i.index, i.key) for i in arrays] == [(0, 2, "array0"), (1, 3, "array1"), (2, 4, "array2")]
    ((picked, _),) = tv.select_items(cap, ["array:0"])
    layout = tv.item_layout(cap, picked)
    assert (layout.dtype, layout.shape, layout.strides) == ("float32", (32, 64), (64, 1))
    level = tv.item_layout(cap, arrays[1])
    assert (level.dtype, level.shape) == ("uint8", (16, 64))  # 16 texels of 4 channels a row
    assert [i.name for i, _ in tv.select_items(cap, [])] == ["region 1", "array 0"]  # the written items


def test_a_mipmapped_array_missing_one_level_is_not_recreated_nor_its_captured_level(repro):
    """A mipmapped array is recreated only when every level was captured: with level 1
    not captured, neither it nor its captured level 0 is a replay item or a native array,
    and the texture over it is handed over as "none", saying why. Mutation caught: one
    captured level was enough (`all` -> `any`)."""
    from kerncap.replay import tensor_view as tv
    from kerncap.replay.native_session import NativeSession
    from kerncap.reproducer.arrays import replayed_arrays

    edit_manifest(repro, lambda m: m["arrays"][2].update(captured=False, pre=[], post=[], why="too large"))
    cap = Capture.open(repro)
    arrays, mipmaps = replayed_arrays(cap.arrays, cap.mipmapped_arrays)
    assert [a.id for a in arrays] == [0] and mipmaps == []
    assert [(i.id, i.index) for i in tv.replay_items(cap) if i.kind == "array"] == [(0, 2)]
    calls: list = []
    ns = NativeSession.__new__(NativeSession)
    ns.capture = cap
    ns.core, ns.session = _fake_core(calls)
    assert ns._load_arrays() == {0: 0}
    ((mipmap_specs, array_specs, objects),) = calls
    assert mipmap_specs == [] and [a.desc.width for a in array_specs] == [64]
    assert objects[2].resource == "none" and objects[2].why == "its mipmapped array 0 was not captured"
