"""Reproducer sets (kerncap.reproducer.sets and the modules that run them) on the CPU: a fake app publishes two captures in the
run directory the way the capture library does for `--dispatch 3,17` (the `fake_set`
fixture of tests/conftest.py, with a real H200 capture from tests/fixtures/captures/).
The GPU suite (tests/gpu/test_buckets.py) runs the real thing."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from kerncap.errors import KerncapError

FIXTURE = Path(__file__).parent / "fixtures" / "captures" / "axpy_small" / "capture"
KERNEL = "_Z12axpy_inplacefPKfPfi"


def test_dispatch_list_becomes_a_set_with_weights_and_the_refused_bucket_named(fake_set, tmp_path):
    from kerncap.capture.set_extract import format_set_extract
    from kerncap.reproducer.set_info import format_set_info, summarize_set
    from kerncap.reproducer.sets import ReproducerSet, is_set

    out = tmp_path / "set"
    res = fake_set(out)
    assert is_set(out) and res.set_dir == out
    s = ReproducerSet.open(out)
    assert [m.dispatch for m in s.members] == [3, 17]
    assert [m.path for m in s.members] == [out / "members" / "0", out / "members" / "1"]
    assert [round(m.weight, 6) for m in s.members] == [0.75, 0.25]  # 3 ms vs 1 ms in the app
    assert s.members[0].signature == "grid 16 block 256 smem 0 | #0=0.5 #3=4096"
    assert s.kernel == KERNEL and s.manifest["times"] == "until the capture ended the app"
    assert s.manifest["coverage"] == 1.0  # the refused bucket ran no timed launch
    assert len(s.refused) == 1 and "conditional" in s.refused[0]["reason"]
    assert any("grid 32 block 256" in n and "not captured" in n for n in res.notes)
    text = format_set_extract(res)
    assert "#0  75.0%  grid 16 block 256" in text and "not captured: grid 32" in text
    info = format_set_info(summarize_set(s))
    assert "members     2 of 3 bucket(s)" in info and "75.0%" in info
    assert sorted(p.name for p in tmp_path.iterdir()) == ["app.py", "libkerncap_inject.so", "set"]
    # Both members' payloads moved into the set's own store: the shared chunks once.
    assert res.stored["chunks"] == 2 * len({h for h in _chunks(FIXTURE)})
    assert res.stored["objects_added"] == len(_chunks(FIXTURE))
    assert not list((out / "members").glob("*/capture/blobs/*.bin"))
    assert (out / "store" / "objects").is_dir()


def test_the_app_is_stopped_only_once_its_bucket_table_is_written(fake_set, tmp_path):
    """The capture library writes the bucket table (the members' in-app times) after the
    last capture lands; extract waits for a table that counts past the last dispatch before
    it stops the app. It used to stop the app on the captures alone, and a table written
    a moment later was lost: equal weights (this suite's weights test failed so under load)."""
    from kerncap.reproducer.sets import ReproducerSet

    res = fake_set(tmp_path / "set", buckets_after=1.5)
    assert [round(m.weight, 6) for m in ReproducerSet.open(res.set_dir).members] == [0.75, 0.25]


def test_two_members_of_one_bucket_share_its_weight(fake_set, tmp_path):
    """A dispatch list that hits one bucket twice (dispatches 3 and 17 both of bucket 0,
    3 ms of the kernel's 4 ms): each member stands for half of that bucket, the weights
    still sum to 1 and the coverage is the bucket's share (mutation caught: each member
    of one bucket given the bucket's whole share)."""
    from kerncap.capture.set_extract import format_set_extract
    from kerncap.reproducer.sets import ReproducerSet

    res = fake_set(tmp_path / "set", member_buckets=(0, 0))
    s = ReproducerSet.open(res.set_dir)
    assert [m.dispatch for m in s.members] == [3, 17]
    assert [round(m.weight, 6) for m in s.members] == [0.5, 0.5]
    assert s.members[0].signature == s.members[1].signature == "grid 16 block 256 smem 0 | #0=0.5 #3=4096"
    assert s.manifest["coverage"] == 0.75  # bucket 1 (1 ms) has no member
    assert "#0  50.0%  grid 16 block 256" in format_set_extract(res)


def _chunks(capture_dir: Path) -> set[str]:
    from kerncap.reproducer.format import Capture

    return set(Capture.open(capture_dir).iter_blobs())


def test_hydrating_a_set_links_the_chunks_members_share(fake_set, tmp_path):
    from kerncap.reproducer.format import Capture
    from kerncap.reproducer.sets import ReproducerSet, hydrate_set

    s = ReproducerSet.open(fake_set(tmp_path / "set").set_dir)
    hydrate_set(s)
    caps = [Capture.open(m.path) for m in s.members]
    for h in caps[0].iter_blobs():
        a, b = caps[0].blob_path(h), caps[1].blob_path(h)
        assert a.read_bytes() == b.read_bytes() and os.stat(a).st_ino == os.stat(b).st_ino
    caps[1].verify()


def test_member_cubins_take_one_cubin_or_a_set_variant(fake_set, tmp_path):
    from kerncap.reproducer.sets import ReproducerSet, member_cubins

    s = ReproducerSet.open(fake_set(tmp_path / "set").set_dir)
    assert member_cubins(s, None) == [None, None]
    one = tmp_path / "v.cubin"
    one.write_bytes(b"\x7fELF")
    assert member_cubins(s, one) == [one, one]
    (s.variants_dir).mkdir()
    variant = s.variants_dir / "1.json"
    variant.write_text(json.dumps({"cubins": {"0": "members/0/variants/1.cubin", "1": "members/1/variants/2.cubin"}}))
    assert member_cubins(s, variant) == [s.root / "members/0/variants/1.cubin", s.root / "members/1/variants/2.cubin"]
    with pytest.raises(KerncapError, match="does not exist"):
        member_cubins(s, tmp_path / "nope.cubin")
    (s.variants_dir / "2.json").write_text("{}")
    with pytest.raises(KerncapError, match="is not a set variant"):
        member_cubins(s, s.variants_dir / "2.json")


def test_source_sync_keeps_each_members_own_launch_files(fake_set, tmp_path):
    from kerncap.recompile.set_variant import sync_source
    from kerncap.reproducer.sets import ReproducerSet

    s = ReproducerSet.open(fake_set(tmp_path / "set").set_dir)
    with pytest.raises(KerncapError, match="no editable source"):
        sync_source(s)
    (s.source_dir / "k").mkdir(parents=True)
    (s.source_dir / "k" / "kernel.cu").write_text("edited")
    (s.source_dir / "triton.json").write_text("{\"set\": 1}")
    for m in s.members:
        (m.path / "source").mkdir()
        (m.path / "source" / "triton.json").write_text(f"{{\"member\": {m.index}}}")
    sync_source(s)
    for m in s.members:
        assert (m.path / "source" / "k" / "kernel.cu").read_text() == "edited"
        assert json.loads((m.path / "source" / "triton.json").read_text()) == {"member": m.index}


def test_source_sync_replaces_a_link_in_a_member_and_writes_nothing_outside(fake_set, tmp_path):
    """A member's source/ file that is a symbolic link (to anywhere: a set from someone
    else) is replaced by the set's file; the file it pointed to is not written. Mutation
    caught: the link kept, the set's source copied through it onto the file outside."""
    from kerncap.recompile.set_variant import sync_source
    from kerncap.reproducer.sets import ReproducerSet

    s = ReproducerSet.open(fake_set(tmp_path / "set").set_dir)
    (s.source_dir / "k").mkdir(parents=True)
    (s.source_dir / "k" / "kernel.cu").write_text("edited")
    outside = tmp_path / "outside.cu"
    outside.write_text("someone else's file")
    for m in s.members:
        (m.path / "source" / "k").mkdir(parents=True)
        (m.path / "source" / "k" / "kernel.cu").symlink_to(outside)
    sync_source(s)
    assert outside.read_text() == "someone else's file"
    for m in s.members:
        dst = m.path / "source" / "k" / "kernel.cu"
        assert not dst.is_symlink() and dst.read_text() == "edited"

def test_source_sync_writes_nothing_through_a_linked_directory_of_a_member(fake_set, tmp_path):
    """A member's source/ (or a directory in it) that is a link to a directory elsewhere:
    the sync refuses it, naming the link, and writes nothing there (the member's own
    file beside the link check included). Was: copied through the link onto the files
    outside (only a link at the file itself was replaced)."""
    from kerncap.recompile.set_variant import sync_source
    from kerncap.reproducer.sets import ReproducerSet

    s = ReproducerSet.open(fake_set(tmp_path / "set").set_dir)
    (s.source_dir / "k").mkdir(parents=True)
    (s.source_dir / "k" / "kernel.cu").write_text("edited")
    outside = tmp_path / "outside"
    (outside / "k").mkdir(parents=True)
    (outside / "k" / "kernel.cu").write_text("someone else's file")
    first, *rest = s.members
    (first.path / "source").symlink_to(outside)
    with pytest.raises(KerncapError, match="is a symbolic link .*does not write through it"):
        sync_source(s)
    (first.path / "source").unlink()
    (first.path / "source").mkdir()
    (first.path / "source" / "k").symlink_to(outside / "k")
    with pytest.raises(KerncapError, match=f"{first.path / 'source' / 'k'} is a symbolic link"):
        sync_source(s)
    assert (outside / "k" / "kernel.cu").read_text() == "someone else's file"
    (first.path / "source" / "k").unlink()
    sync_source(s)
    assert all((m.path / "source" / "k" / "kernel.cu").read_text() == "edited" for m in s.members)
    assert (outside / "k" / "kernel.cu").read_text() == "someone else's file"

def test_replay_set_reports_each_member_even_when_replay_is_unavailable(fake_set, tmp_path, monkeypatch):
    """Without the replay core (this CPU machine), every member says so; none is skipped."""
    from kerncap.api import ReplayRequest, ValidateRequest, format_set_run, open

    with open(fake_set(tmp_path / "set").set_dir) as s:
        run = s.run_members(validate=ValidateRequest(), replay=ReplayRequest())
    assert not run.passed and [r.member.index for r in run.runs] == [0, 1]
    assert all(r.error for r in run.runs)
    assert "not passed: member(s) 0, 1" in format_set_run(run)
    assert json.loads(json.dumps(run.to_dict()))["members"][1]["error"]



def test_a_set_run_with_a_member_that_fails_its_validation_has_not_passed(fake_set, tmp_path, monkeypatch):
    """Every member ran (no error), one member's variant differs: the set run has not
    passed (exit status 3, `passed: false` in its JSON) and its text names that member;
    with a variant right on both members it has passed (exit status 0)."""
    import replay_sim as sim
    from kerncap.api import ValidateRequest, format_set_run, open

    def last(m, s):
        sim.axpy(m, s)
        m.f32(1)[-64:] = 0
    sim.install(monkeypatch)
    monkeypatch.setattr(sim, "KERNELS", {"captured": sim.axpy, "good.cubin": sim.axpy, "bad.cubin": last})
    monkeypatch.setattr("kerncap.replay.client.ReplayClient", sim.InProcessClient)
    root = fake_set(tmp_path / "set").set_dir
    (root / "variants").mkdir()
    for name, cubins in (("1", ("good", "bad")), ("2", ("good", "good"))):
        for i, c in enumerate(cubins):
            (root / "members" / str(i) / f"{c}.cubin").write_bytes(c.encode())
        (root / "variants" / f"{name}.json").write_text(json.dumps(
            {"format": "kerncap-set-variant", "cubins": {str(i): f"members/{i}/{c}.cubin" for i, c in enumerate(cubins)}}))
    with open(root) as s:
        run = s.run_members(root / "variants" / "1.json", validate=ValidateRequest(runs=1), replay=None)
        right = s.run_members(root / "variants" / "2.json", validate=ValidateRequest(runs=1), replay=None)
    assert [r.error for r in run.runs] == [None, None]
    assert [r.validation.verdict for r in run.runs] == ["pass", "fail"]
    assert not run.passed and run.exit_code == 3 and run.to_dict()["passed"] is False
    assert "not passed: member(s) 1" in format_set_run(run)
    assert right.passed and right.exit_code == 0 and right.to_dict()["passed"] is True


def test_a_sets_row_says_inconclusive_when_a_member_could_not_tell_and_fail_when_one_differs(tmp_path):
    """The History row of a set's build or baseline takes its verdict over every member's
    inputs (session.sets.verdict): a member whose check could not tell (a region varying
    with no dtype known) makes the row inconclusive, not fail; a member that differs
    makes it fail whatever the others say."""
    from kerncap.replay.differential import InputVerdict, ReproducerReport, TrustReport
    from kerncap.replay.set_run import MemberRun, SetRun
    from kerncap.reproducer.sets import Member
    from kerncap.session.sets import verdict

    def member(i: int, status: str) -> MemberRun:
        report = ReproducerReport(f"members/{i}", KERNEL, None, [],
                                  [InputVerdict("captured input", status, "byte-exact", changed_bytes=4096)])
        return MemberRun(Member(i, tmp_path / "members" / str(i), 3 + i, 0.5, None),
                         validation=TrustReport("v.cubin", 0, 0, [report]))

    passing, unsure, wrong = member(0, "pass"), member(1, "inconclusive"), member(2, "fail")
    assert verdict(SetRun(None, [passing, passing])) == ("pass", "")
    v, detail = verdict(SetRun(None, [passing, unsure]))
    assert v == "inconclusive" and detail.startswith("member(s) #1: inconclusive (INCONCLUSIVE on 2 inputs"), detail
    v, detail = verdict(SetRun(None, [unsure, wrong]))
    assert v == "fail" and detail.startswith("member(s) #1, #2 differ (FAIL on 2 inputs"), detail


def test_a_set_is_refused_where_one_reproducer_is_needed(fake_set, tmp_path):
    with pytest.raises(KerncapError, match="--prune works on one reproducer"):
        fake_set(tmp_path / "set", prune=True)


def test_opening_something_that_is_no_set(tmp_path):
    from kerncap.reproducer.sets import ReproducerSet

    with pytest.raises(KerncapError, match="is not a reproducer set"):
        ReproducerSet.open(tmp_path)
    (tmp_path / "set.json").write_text(json.dumps({"format": "kerncap-set", "format_version": 99}))
    with pytest.raises(KerncapError, match="upgrade kerncap"):
        ReproducerSet.open(tmp_path)


def test_kerncap_list_shows_a_sets_members(fake_set, tmp_path):
    from kerncap.reproducer.listing import list_captures
    from kerncap.reproducer.workspace import Workspace

    ws = Workspace(tmp_path / "ws")
    fake_set(ws.reproducers_dir / "axpy-set")
    rows = list_captures(ws.root)
    assert [Path(r["path"]).name for r in rows] == ["0", "1"] and all(r["error"] is None for r in rows)


def test_a_set_json_cannot_point_outside_the_set(fake_set, tmp_path):
    """set.json and set variants travel with the set: a member directory or a cubin
    outside it is refused before anything replays or is copied."""
    from kerncap.reproducer.sets import ReproducerSet, member_cubins

    root = fake_set(tmp_path / "set").set_dir
    manifest = json.loads((root / "set.json").read_text())
    s = ReproducerSet.open(root)
    (root / "variants").mkdir()
    variant = root / "variants" / "1.json"
    variant.write_text(json.dumps({"cubins": {"0": "../../etc/x.cubin", "1": "members/1/v.cubin"}}))
    with pytest.raises(KerncapError, match="outside the set"):
        member_cubins(s, variant)
    manifest["members"][1]["dir"] = "../elsewhere"
    (root / "set.json").write_text(json.dumps(manifest))
    with pytest.raises(KerncapError, match=r"members\[1\]\.dir is malformed"):
        ReproducerSet.open(root)
    manifest["members"][1]["dir"] = "members/1"
    manifest["members"][1]["weight"] = "heavy"
    (root / "set.json").write_text(json.dumps(manifest))
    with pytest.raises(KerncapError, match="weight"):
        ReproducerSet.open(root)


def test_the_set_schema_itself_admits_format_version_1_only(fake_set, tmp_path):
    """SET_JSON is the declared shape of set.json (docs/capture-format.md): version 1. The
    schema refuses a later version on its own, not only through ReproducerSet.open's
    "upgrade kerncap" check before it (which a reader that checks a set.json against
    the schema alone would not have)."""
    from kerncap.core.schema import problem
    from kerncap.reproducer.schemas import SET_JSON

    manifest = json.loads((fake_set(tmp_path / "set").set_dir / "set.json").read_text())
    assert manifest["format_version"] == 1 and problem(manifest, SET_JSON) is None
    for version in (2, 99):
        found = problem({**manifest, "format_version": version}, SET_JSON)
        assert found is not None and "format_version" in found, (version, found)


def test_a_members_weight_is_a_share_between_0_and_1(fake_set, tmp_path):
    """A member's weight is its share of the kernel's in-app time: an edited set.json with a
    weight above 1 (or below 0) would skew the weighted speedup, and is refused on open."""
    from kerncap.reproducer.sets import ReproducerSet

    root = fake_set(tmp_path / "set").set_dir
    manifest = json.loads((root / "set.json").read_text())
    for weight in (1.5, -0.25):
        manifest["members"][1]["weight"] = weight
        (root / "set.json").write_text(json.dumps(manifest))
        with pytest.raises(KerncapError, match=r"members\[1\]\.weight"):
            ReproducerSet.open(root)
    manifest["members"][1]["weight"] = 1.0
    (root / "set.json").write_text(json.dumps(manifest))
    assert ReproducerSet.open(root).weights()[1] == 1.0


def test_a_set_counts_as_its_members_for_validation(fake_set, tmp_path):
    """`validate SET` (its SetSession) checks every member: the set expands
    to its members (hydrated), a set variant to each member's cubin."""
    from kerncap.reproducer.sets import ReproducerSet, expand

    root = fake_set(tmp_path / "set").set_dir
    s = ReproducerSet.open(root)
    dirs, cubins = expand([root], None)
    assert dirs == [m.path for m in s.members] and cubins is None
    assert all(list((m.path / "capture" / "blobs").glob("*.bin")) for m in s.members), "hydrated for replay"
    (root / "variants").mkdir()
    variant = root / "variants" / "1.json"
    variant.write_text(json.dumps({"format": "kerncap-set-variant",
                                   "cubins": {"0": "members/0/v.cubin", "1": "members/1/v.cubin"}}))
    dirs, cubins = expand([root], variant)
    assert cubins == [root / "members/0/v.cubin", root / "members/1/v.cubin"]
    with pytest.raises(KerncapError, match="is a set variant"):
        expand([s.members[0].path], variant)


def test_the_api_and_cli_take_a_set_where_they_take_a_reproducer(fake_set, tmp_path, capsys):
    from kerncap import api
    from kerncap.cli import main

    root = fake_set(tmp_path / "set").set_dir
    assert api.is_set(root) and not api.is_set(root / "members" / "0")
    info = api.set_info(root, verify=True)
    assert info["payloads_ok"] and [m["payloads"] for m in info["members"]] == ["ok", "ok"]
    assert main(["info", str(root)]) == 0
    assert "reproducer set" in capsys.readouterr().out
    (tmp_path / "x.cubin").write_bytes(b"x")
    assert main(["replay", str(root), "--compare", str(tmp_path / "x.cubin")]) == 2
    assert "works on one reproducer" in capsys.readouterr().err  # the set's session refuses it itself
    assert main(["replay", str(root), "--timer", "kernel"]) == 2
    assert "the set's speedups are timed between CUDA events" in capsys.readouterr().err
    assert main(["replay", str(root), "--ncu"]) == 2
    assert "Nsight Compute profiles one reproducer's launch" in capsys.readouterr().err


def test_check_finds_a_sets_members(fake_set, tmp_path):
    """`kerncap check SET` (and a directory holding sets) checks every member."""
    from kerncap.fleet.check import find_corpus

    root = fake_set(tmp_path / "set").set_dir
    assert [k for k, _ in find_corpus([root])] == ["members/0", "members/1"]
    assert [k for k, _ in find_corpus([tmp_path])] == ["set/members/0", "set/members/1"]


def test_a_set_in_a_workspace_stores_its_members_in_the_workspaces_store(fake_set, tmp_path):
    """A set extracted to WORKSPACE/reproducers/<set> moves its members' payloads into
    WORKSPACE/store, the store every other reproducer of the workspace uses (so a
    reproducer stored there later adds nothing the set holds); elsewhere into <set>/store.
    Mutation caught: the store one level too shallow (reproducers/store)."""
    import shutil

    from kerncap.reproducer.format import Capture
    from kerncap.reproducer.sets import ReproducerSet, store_for_set
    from kerncap.reproducer.stored import store_reproducer

    ws = tmp_path / "ws"
    out = ws / "reproducers" / "set"
    res = fake_set(out)
    assert res.stored["store"] == str((ws / "store").absolute()) and (ws / "store" / "objects").is_dir()
    assert store_for_set(out) == (ws / "store").absolute()
    assert store_for_set(tmp_path / "set") == (tmp_path / "set" / "store").absolute()
    assert sorted(p.name for p in ws.iterdir()) == ["reproducers", "store"]
    assert sorted(p.name for p in (ws / "reproducers").iterdir()) == ["set"] and not (out / "store").exists()
    for m in ReproducerSet.open(out).members:
        assert not list((m.path / "capture" / "blobs").glob("*.bin"))
        Capture.open(m.path).verify()  # read from the workspace's store
    # an ordinary reproducer of the same kernel in the workspace shares the set's chunks
    other = ws / "reproducers" / "axpy"
    (other / "capture").mkdir(parents=True)
    shutil.copytree(FIXTURE, other / "capture", dirs_exist_ok=True)
    r = store_reproducer(other)
    assert r.store == ws / "store" and r.chunks > 0 and r.objects_added == 0


def test_a_set_with_one_member_missing_its_cubin_is_not_complete(fake_set, tmp_path, capsys):
    """`payloads_ok` of a set is every member's: one member's cubin gone makes the set's info
    say so (`payloads_ok` false, the member's line names it) and `kerncap info SET` exit 3,
    while the other member stays "ok"."""
    from kerncap import api
    from kerncap.cli import main

    root = fake_set(tmp_path / "set").set_dir
    (cubin,) = (root / "members" / "1" / "capture" / "cubins").glob("*.cubin")
    cubin.unlink()
    info = api.set_info(root)
    assert [m["payloads"] == "ok" for m in info["members"]] == [True, False]
    assert "cubin missing" in info["members"][1]["payloads"] and not info["payloads_ok"]
    assert main(["info", str(root)]) == 3
    assert "     payloads: cubin missing" in capsys.readouterr().out
    assert main(["info", str(root), "--json"]) == 3
    assert json.loads(capsys.readouterr().out)["payloads_ok"] is False


def test_a_set_json_listing_one_member_index_twice_is_refused(tmp_path):
    """Member indexes key a set variant's cubins and every per-member report: an edited
    set.json that gives two members one index (one's variant cubin would run on both) is
    refused on open. Mutation caught: the duplicate-index check skipped."""
    from kerncap.reproducer.sets import ReproducerSet

    member = {"dir": "members/0", "dispatch": 3, "weight": 0.5}
    doc = {"format": "kerncap-set", "format_version": 1,
           "members": [{**member, "index": 0}, {**member, "index": 1, "dir": "members/1", "dispatch": 17}]}
    (tmp_path / "set.json").write_text(json.dumps(doc))
    assert [m.index for m in ReproducerSet.open(tmp_path).members] == [0, 1]
    doc["members"][1]["index"] = 0
    (tmp_path / "set.json").write_text(json.dumps(doc))
    with pytest.raises(KerncapError, match="lists a member index twice"):
        ReproducerSet.open(tmp_path)


def _set_run_dir(tmp_path: Path, table: list[dict]) -> Path:
    """A run directory as the capture library leaves it for a set: capture-3 (bucket 0),
    an unfinished capture-9 (no manifest yet) and the bucket table of process 42."""
    import shutil

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    shutil.copytree(FIXTURE, run_dir / "capture-3")
    m = json.loads((run_dir / "capture-3" / "manifest.json").read_text())
    m["provenance"]["dispatch_index"], m["provenance"]["bucket"] = 3, 0
    (run_dir / "capture-3" / "manifest.json").write_text(json.dumps(m))
    (run_dir / "capture-9").mkdir()
    (run_dir / "buckets-42.json").write_text(json.dumps(
        {"pid": 42, "kernel": KERNEL, "final": True, "dispatches_counted": 20, "buckets": table}))
    return run_dir


def _bucket_row(i: int, grid: int, launches: int, total: int, **kw) -> dict:
    b = {"id": i, "kernel": KERNEL, "grid": [grid, 1, 1], "block": [256, 1, 1], "shared_mem_bytes": 0,
         "scalars_known": True, "scalars": [], "launches": launches, "timed": launches, "total_ns": total,
         "min_ns": 1, "max_ns": total, "first_dispatch": -1, "captured_dispatch": -1, "capture_dir": None,
         "refused": None, "failed": False}
    b.update(kw)
    return b


def test_buckets_mode_names_every_bucket_no_member_stands_for_and_skips_an_unfinished_capture(tmp_path):
    """extract --buckets: a bucket the app ran but no capture landed for (the app ended
    first) is listed as refused, with its reason and a note, beside one the library refused;
    a capture directory without its manifest is no member (mutations caught: uncaptured
    buckets listed only when the library refused them; a manifest-less capture taken)."""
    from kerncap.capture.assemble import captured_dirs
    from kerncap.capture.set_extract import assemble_set

    table = [_bucket_row(0, 16, 30, 3_000_000, captured_dispatch=3), _bucket_row(1, 64, 2, 1_000_000),
             _bucket_row(2, 32, 0, 0, refused="executable graph #1: inside a conditional")]
    run_dir = _set_run_dir(tmp_path, table)
    assert [d.name for d in captured_dirs(run_dir)] == ["capture-3"]
    res = assemble_set("axpy", "substring", [], True, ["app"], tmp_path / "set", run_dir, None, None, False,
                       [{"pid": 42, "captured": True}])
    s = res.set
    assert [m.dispatch for m in s.members] == [3] and s.manifest["mode"] == "buckets"
    reasons = sorted(r["reason"] for r in s.refused)
    assert reasons == ["executable graph #1: inside a conditional", "not captured before the app ended"]
    assert s.manifest["coverage"] == 0.75
    assert any("grid 64" in n and "not captured before the app ended" in n for n in res.notes)
