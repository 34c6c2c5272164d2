"""The one manifest writer (native/capture/manifest_writer.cpp) as both capture kinds use
it, on the CPU: native/capture/test/manifest_units_test.cpp (AddressSanitizer) hands it a
single dispatch's view and a sequence's view (as capture_session.cpp and
sequence_capture.cpp build them) and prints both manifests and one sequence launch's
parameters. The engine's reader takes both the same way: neither LACKS anything
(`kerncap info`'s notes), host regions carry their contents, the closure check names
the stray word (in a sequence with its launch), aliases and a sequence's allocated and
freed regions are recorded. And the replay side: each sequence launch that passed a
texture object's handle gets the replay's handle there (sequence_replay.build over the
simulated core, tests/sequence_sim.py, with texture_small's real array and object). The
stand-in driver of tests/test_entry_hooks.py cannot drive a capture (no readable device
memory, no cubin behind its modules): the real captures run in
tests/gpu/test_sequence_sections_gpu.py."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import native_build
import pytest
from test_cubin_elf import NATIVE, TEST_SRC, _cuda_home, _run

from kerncap.core.schema import check
from kerncap.reproducer.closure_report import likely_causes
from kerncap.reproducer.format import Capture
from kerncap.reproducer.info import lacks
from kerncap.reproducer.schemas import MANIFEST

CAPTURE = NATIVE / "capture"


def _build_and_run():
    cuda = _cuda_home()
    cxx = native_build.compiler()
    if cuda is None or cxx is None:
        pytest.skip("needs cuda.h and a C++ compiler")
    exe = native_build.executable("manifest_units_test", cxx, [
        "-std=c++17", "-g1", "-O1", "-Wall", "-Wextra", "-Werror", "-Wno-maybe-uninitialized",
        "-fsanitize=address,undefined", "-fno-sanitize-recover=undefined",
        f"-I{NATIVE / 'common'}", f"-I{CAPTURE}", f"-I{cuda / 'include'}",
    ], [TEST_SRC / "manifest_units_test.cpp", *(CAPTURE / f"{n}.cpp" for n in
                                                ("manifest_writer", "closure_targets", "config"))])
    r = _run([str(exe)], env=native_build.env(ASAN_OPTIONS="detect_leaks=0"))
    assert r.returncode == 0, f"C++ checks failed:\n{r.stderr}\n{r.stdout}"
    return json.loads(r.stdout)


def PREBUILD():  # conftest starts it when this file's tests are selected
    native_build.start("manifest_units", _build_and_run)


@pytest.fixture(scope="module")
def facts():
    return native_build.result("manifest_units", _build_and_run)


def _capture(tmp_path, manifest, name):
    path = tmp_path / name
    path.mkdir()
    (path / "manifest.json").write_text(json.dumps(manifest))
    check(manifest, MANIFEST, path / "manifest.json", "written by the unit test")
    cap = Capture(root=path, manifest=manifest)
    cap._parse()
    return cap


def test_the_writer_checks_hold(facts):
    assert facts["failures"] == 0


def test_a_sequence_records_every_section_a_single_dispatch_does(facts, tmp_path):
    single, seq = facts["single"], facts["sequence"]
    assert set(seq) - set(single) == {"sequence"} and set(single) <= set(seq)
    for name in ("single", "sequence"):
        cap = _capture(tmp_path, facts[name], name)
        assert lacks(cap) == [], name  # no "this capture lacks …" note at info or replay
        (host,) = cap.snapshotted_host_regions
        assert host.pre and host.post and host.device_pointer == host.base
        assert [o for o in cap.texture_objects] == [] and cap.arrays == []
        assert "arrays" in cap.manifest and "texture_objects" in cap.manifest
        assert cap.regions[0].physical == (1, 0)  # the alias of a VMM mapping
    assert {k: v for k, v in seq["provenance"].items() if k not in ("pid", "capture_seconds")} == \
        {k: v for k, v in single["provenance"].items() if k not in ("pid", "capture_seconds")}
    assert seq["provenance"]["capture_seconds"]["window"] == 0.5


def test_the_closure_check_names_the_stray_word_and_its_launch(facts, tmp_path):
    stray = int.from_bytes(bytes.fromhex(facts["single"]["params"][2]["value"]), "little")
    (one,) = facts["single"]["closure"]["unresolved"]
    (two,) = facts["sequence"]["closure"]["unresolved"]
    assert (one["param"], one["value"], "launch" in one) == (2, stray, False)
    assert (two["launch"], two["param"], two["value"]) == (0, 2, stray)
    assert facts["sequence"]["closure"]["words_checked"] == 2 * facts["single"]["closure"]["words_checked"]
    causes = likely_causes(_capture(tmp_path, facts["sequence"], "seq"))
    assert causes[0].startswith(f"launch 0 parameter 2 holds {stray:#x}, outside the captured memory")


def test_a_sequences_regions_and_launch_parameters(facts):
    regions = facts["sequence"]["regions"]
    assert [r.get("sequence_state") for r in regions] == [None, "allocated", "freed"]
    allocated, freed = regions[1], regions[2]
    assert allocated["pre"] == [None] and allocated["written"]  # zeros before the window
    assert freed["post"] == freed["pre"] and not freed["written"]
    assert [g.get("module") for g in facts["sequence"]["globals"]] == [0]
    assert "module" not in facts["single"]["globals"][0]
    params = facts["launch_params"]["params"]
    assert params[0]["pointer"] == {"region": 0, "offset": 0x40}
    assert params[2]["pointer"] == {"region": 1, "offset": 0x10}  # into the region allocated inside the window
    assert params[1]["host_pointers"] == [{"at": 0, "host_region": 0, "offset": 8}]
    assert params[3]["handle"]["object"] == 0 and "pointer" not in params[3]


def test_both_capture_kinds_write_through_the_one_writer():
    """Neither capture writes manifest sections of its own: a second writer is how the
    sequence's manifest fell behind (issue 43)."""
    for name in ("capture_session.cpp", "sequence_capture.cpp"):
        text = (CAPTURE / name).read_text()
        assert "kc::manifest_json(v)" in text, name
        own = re.findall(r'w\.key\("(regions|host_regions|closure|provenance|params|arrays)"\)', text)
        assert own == [], f"{name} writes {own} itself"


# -- the replay of a sequence's texture handles (sequence_replay.build, over tests/sequence_sim.py) --

TEXTURE_FIXTURE = Path(__file__).parent / "fixtures" / "captures" / "texture_small" / "capture"


def _with_texture(seq_dir, handle_object: int):
    """The synthetic sequence with texture_small's array and texture object, launch 1's
    first parameter annotated as holding the object's handle (as the capture writes it)."""
    tex = json.loads((TEXTURE_FIXTURE / "manifest.json").read_text())
    cap = seq_dir / "capture"
    m = json.loads((cap / "manifest.json").read_text())
    m["arrays"], m["mipmapped_arrays"], m["texture_objects"] = tex["arrays"], [], tex["texture_objects"]
    for h in {c for a in tex["arrays"] for c in a["pre"] + a["post"] if c}:
        shutil.copy(TEXTURE_FIXTURE / "blobs" / f"{h}.bin", cap / "blobs" / f"{h}.bin")
    (cap / "manifest.json").write_text(json.dumps(m))
    s = json.loads((cap / "sequence.json").read_text())
    s["launches"][1]["params"][0]["handle"] = {"object": handle_object, "kind": "texture", "match": "signature"}
    (cap / "sequence.json").write_text(json.dumps(s))
    return seq_dir


def test_each_sequence_launch_gets_the_replays_handle_where_the_app_passed_one(monkeypatch, tmp_path):
    if not TEXTURE_FIXTURE.is_dir():
        pytest.skip("the small real captures are absent (docs/testing.md)")
    import sequence_sim as S

    from kerncap.replay.sequence_replay import build

    core = S.install(monkeypatch)
    cap = Capture.open(_with_texture(S.synthetic_sequence(tmp_path / "seq"), 0))
    spec, _ = build(core, cap, [], None, "streams")
    handles = [s.launch.handles for s in spec.steps if s.op == "launch"]
    assert handles[1] == [(0, 0)] and all(h == [] for i, h in enumerate(handles) if i != 1), handles


def test_a_sequence_launch_naming_an_unlisted_texture_object_is_refused(monkeypatch, tmp_path):
    if not TEXTURE_FIXTURE.is_dir():
        pytest.skip("the small real captures are absent (docs/testing.md)")
    import sequence_sim as S

    from kerncap.errors import CaptureFormatError
    from kerncap.replay.sequence_replay import build

    core = S.install(monkeypatch)
    cap = Capture.open(_with_texture(S.synthetic_sequence(tmp_path / "seq"), 5))
    with pytest.raises(CaptureFormatError, match="launch 1's parameter 0 names a texture object"):
        build(core, cap, [], None, "streams")
