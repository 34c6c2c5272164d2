"""Texture and surface objects and CUDA arrays (issue 25) end to end on the GPU: the
capture records the arrays a live object reaches (contents before and after), the
objects' descriptors and which parameter holds which object's handle, through both
interception paths; the replay recreates arrays and objects, puts its own handles into
the launch and compares what a surface wrote like any output; an unmodified recompile
validates byte-exact; an edit of a surface write fails on the array. Bad input: a texture
whose array was freed and a table of handles in device memory are named at capture.

The apps (testapps/cuda/textures/) hold decoy texture objects while they make the target's
and destroy them after, so the captured handle (> 1) differs from the replay's (1): a
replay that did not patch the parameter would read no object.

Builds only its own test apps (KERNCAP_TESTAPPS_BUILD + KERNCAP_TESTAPPS_PREBUILT: a
shared build), so the whole file runs in about two minutes on one H200:
    python3 -m pytest -m gpu -o addopts="" -ra tests/gpu/test_textures.py
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from .apps import TESTAPPS, AppSpec, Once, app_env

pytestmark = pytest.mark.gpu

APPS = ("tex_bilinear", "tex_pitched", "surf_write", "tex_freed", "tex_table")
GOOD = {  # app -> (kernel, dispatch)
    "tex_bilinear": ("tex_bilinear", 1),
    "tex_pitched": ("tex_pitched", 1),
    "surf_write": ("surf_update", 2),
}


@pytest.fixture(scope="module")
def tex_build(tmp_path_factory) -> Path:
    build = os.environ.get("KERNCAP_TESTAPPS_BUILD")
    build_dir = Path(build) if build else tmp_path_factory.mktemp("tex-build")
    if build and os.environ.get("KERNCAP_TESTAPPS_PREBUILT"):
        return build_dir
    for step in (["cmake", "-S", str(TESTAPPS), "-B", str(build_dir), "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release"],
                 ["ninja", "-C", str(build_dir), *APPS]):
        proc = subprocess.run(step, capture_output=True, text=True)
        if proc.returncode != 0:
            pytest.fail(f"building the texture apps failed: {' '.join(step)}\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
    return build_dir


class TexCaptures:
    """One extract per (app, interception path) per module, with the app's sources."""

    def __init__(self, build: Path, root: Path):
        self.build, self.root, self.once = build, root, Once()

    def get(self, app: str, intercept: str | None = None):
        key = f"{app}-{intercept or 'default'}"
        return self.once.get(key, lambda: self._extract(app, intercept, key))

    def _extract(self, app: str, intercept: str | None, key: str):
        from kerncap.capture.extract import extract
        from kerncap.reproducer.format import Capture

        kernel, dispatch = GOOD.get(app, (app, 0))
        spec = AppSpec(app, kernel, dispatch=dispatch)
        work = self.root / key
        work.mkdir(parents=True)
        res = extract(spec.kernel, spec.command(self.build), output=work / "reproducer", dispatch=dispatch,
                      timeout=spec.timeout, env=app_env(spec, work), source_dir=TESTAPPS / "cuda",
                      build_dir=self.build, intercept=intercept)
        report = json.loads((work / "report.json").read_text())
        return Path(res.reproducer_dir), Capture.open(res.reproducer_dir), report


@pytest.fixture(scope="module")
def tex(tex_build, tmp_path_factory) -> TexCaptures:
    return TexCaptures(tex_build, tmp_path_factory.mktemp("textures"))


def failing(result) -> str:
    bad = [r for r in result.regions if not r.passed or r.unexpected_write]
    return ", ".join(f"{r.kind} {r.name}: {r.mismatched_bytes} bytes" for r in bad) or "(none listed)"


def handle_params(cap):
    return [(p.index, p.handle_object, p.handle_match) for p in cap.params if p.handle_object is not None]


# -- capture ------------------------------------------------------------------------------


@pytest.mark.parametrize("intercept", [None, "cupti"], ids=["default", "cupti"])
def test_bilinear_texture_is_captured(tex, intercept):
    np = pytest.importorskip("numpy")
    repro, cap, report = tex.get("tex_bilinear", intercept)
    w, h = report["w"], report["h"]
    assert report["handle"] > 1, "the decoys should have pushed the target's handle past 1"
    (obj,) = cap.texture_objects
    assert (obj.kind, obj.handle, obj.restorable, obj.params) == ("texture", report["handle"], True, [0])
    assert obj.texture["filter_mode"] == 1 and obj.texture["flags"] & 2, obj.texture  # linear, normalized
    assert obj.texture["address_mode"][:2] == [1, 2], obj.texture  # clamp, mirror
    (array,) = cap.arrays
    assert (array.width, array.height, array.format, array.channels, array.captured) == (w, h, 0x20, 1, True)
    assert not array.written and array.size == w * h * 4
    assert handle_params(cap) == [(0, obj.id, "signature")]
    assert cap.manifest["texture_instructions"] == "texture"
    assert not [x for x in cap.warnings if "texture" in x or "handle" in x], cap.warnings
    # Dispatch 1 read the array as the app wrote it for launch 1.
    texels = np.frombuffer(cap.read_bytes(array.pre, array.size), dtype=np.float32)
    i = np.arange(w * h, dtype=np.uint64)
    assert np.array_equal(texels, (((i * np.uint64(2654435761) + np.uint64(40503)) % np.uint64(10007))
                                   .astype(np.float32) / np.float32(1024.0)))
    out = cap.region_of(report["out"])
    assert out.written and cap.provenance["interception"] == ("cupti" if intercept else "entry points")


def test_pitched_texture_is_captured_over_its_region(tex):
    repro, cap, report = tex.get("tex_pitched")
    (obj,) = cap.texture_objects
    image = cap.region_of(report["image"])
    r = obj.resource
    assert (r["type"], r["region"], r["address"], r["pitch"], r["width"], r["height"]) == (
        "pitch2d", image.id, report["image"], report["pitch"], report["w"], report["h"])
    assert report["pitch"] > report["w"] * 4 and obj.restorable and cap.arrays == []
    assert handle_params(cap) == [(0, obj.id, "signature")]


@pytest.mark.parametrize("intercept", [None, "cupti"], ids=["default", "cupti"])
def test_surface_write_is_captured_as_a_written_array(tex, intercept):
    repro, cap, report = tex.get("surf_write", intercept)
    (obj,) = cap.texture_objects
    (array,) = cap.arrays
    assert obj.kind == "surface" and obj.handle == report["handle"] and obj.resource["array"] == array.id
    assert array.surface and array.written and array.flags & 2  # cudaArraySurfaceLoadStore
    assert handle_params(cap) == [(0, obj.id, "signature")]
    assert cap.manifest["texture_instructions"] in ("surface", "texture and surface")
    assert not any(r.written for r in cap.regions), "the array is the kernel's only output"


# -- replay -----------------------------------------------------------------------------------


@pytest.mark.parametrize("app", sorted(GOOD))
def test_validate_is_byte_exact(tex, app):
    from kerncap.replay.client import ReplayClient

    repro, cap, _ = tex.get(app)
    with ReplayClient(repro) as rc:
        result = rc.validate()
    assert result.passed, f"{app}: {failing(result)}"
    arrays = [r for r in result.regions if r.kind == "array"]
    assert len(arrays) == len(cap.arrays) and all(r.mismatched_bytes == 0 for r in arrays)
    print(f"{app}: {len(result.regions)} items compared, {len(arrays)} of them CUDA arrays; notes {result.notes}")


@pytest.mark.parametrize("app", sorted(GOOD))
def test_unmodified_recompile_validates(tex, app):
    from kerncap.recompile.cuda import recompile
    from kerncap.replay.client import ReplayClient

    repro, _, _ = tex.get(app)
    built = recompile(repro)
    with ReplayClient(repro) as rc:
        result = rc.validate(cubin=built.cubin)
    assert result.passed, f"{app} recompiled unmodified: {failing(result)}"


def test_an_edit_of_the_surface_write_fails_on_the_array(tex, tmp_path):
    """Surface writes are compared like any output: an edit that changes the written value
    fails validation on the array, and nowhere else."""
    from kerncap.recompile.cuda import recompile
    from kerncap.replay.client import ReplayClient

    repro, cap, _ = tex.get("surf_write")
    work = tmp_path / "edited"
    shutil.copytree(repro, work)
    (source,) = [p for p in (work / "source").rglob("surf_write.cu")]
    text = source.read_text()
    assert text.count("* 0.0625f") == 1
    source.write_text(text.replace("* 0.0625f", "* 0.125f"))
    with ReplayClient(work) as rc:
        result = rc.validate(cubin=recompile(work).cubin)
    assert not result.passed
    bad = [r for r in result.regions if not r.passed]
    assert [r.kind for r in bad] == ["array"] and bad[0].mismatched_bytes > 0, failing(result)
    print(f"edited surf_update: {bad[0].mismatched_bytes} bytes of {bad[0].size} differ in {bad[0].name}")


# -- bad input ----------------------------------------------------------------------------------


def test_a_texture_whose_array_was_freed_is_named_at_capture(tex):
    from kerncap.replay.client import ReplayClient

    repro, cap, report = tex.get("tex_freed")
    (obj,) = cap.texture_objects
    assert not obj.restorable and "destroyed (cuArrayDestroy) before the dispatch" in obj.why, obj.why
    named = [w for w in cap.warnings if "parameter 0 holds the handle of texture object" in w]
    assert named and "cannot be replayed faithfully" in named[0], cap.warnings
    assert cap.arrays == []
    # The dispatch does not sample (the app passes sample=0): it replays, and says what it left out.
    with ReplayClient(repro) as rc:
        result = rc.validate()
    assert result.passed, failing(result)
    assert any("is not recreated" in n for n in result.notes), result.notes


def test_a_table_of_handles_in_device_memory_is_named_at_capture(tex):
    from kerncap.errors import KerncapError
    from kerncap.replay.client import ReplayClient

    repro, cap, report = tex.get("tex_table")
    table = cap.region_of(report["table"])
    assert cap.manifest["texture_instructions"] == "texture"
    assert handle_params(cap) == []
    (warning,) = [w for w in cap.warnings if "table of texture/surface handles" in w]
    assert warning.startswith(f"region {table.id} + 0x0 holds a table"), warning
    assert "cannot be replayed faithfully" in warning
    handles = {report[f"handle{t}"] for t in range(4)}
    objects = [o for o in cap.texture_objects if o.handle in handles]
    assert len(objects) == 4 and all(not o.restorable and o.found_in for o in objects), objects
    # The replay cannot restore the table's handles: it must not pass silently.
    try:
        with ReplayClient(repro) as rc:
            result = rc.validate()
        assert not result.passed, "a replay reading handles it never created passed"
        print(f"tex_table replay: {failing(result)}")
    except KerncapError as exc:
        print(f"tex_table replay failed as it should: {exc}")


def test_replay_handles_differ_from_the_captured_ones(tex):
    """The premise of the apps: the captured handle is not what the replay hands out (1 for
    its first object), so a passing validate proves the parameter was patched."""
    _, cap, report = tex.get("tex_bilinear")
    value = struct.unpack("<Q", next(p.value for p in cap.params if p.index == 0))[0]
    assert value == report["handle"] and value != 1
