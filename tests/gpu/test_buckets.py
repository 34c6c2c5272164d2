"""Shape buckets and reproducer sets (issue 13) end to end on `buckets` (bk_scale at four
shapes: n = 2^20 x 24 launches, 2^18 x 8, 2^17 x 4, 2^16 x 2): `profile --buckets`, one
`extract --buckets` run yields every bucket, a --dispatch list, the workload-weighted
speedup of two byte-exact variants (fast only on the rare bucket, fast only on the
common one), one recompiled variant for every member, and a bucket that ran only in a
refused context. Prints the figures the issue asks for (docs/selection.md)."""

from __future__ import annotations

import pytest

from .apps import TESTAPPS, AppSpec, app_env

pytestmark = pytest.mark.gpu

BUCKETS = AppSpec("buckets", "bk_scale")
# grid (n / 256) -> launches per run
SHAPES = {4096: 24, 1024: 8, 512: 4, 256: 2}
COMMON, RARE = 4096, 256


@pytest.fixture(scope="module")
def bucket_set(testapps_build, tmp_path_factory):
    from kerncap.capture.extract import extract

    work = tmp_path_factory.mktemp("bucket-set")
    return extract(BUCKETS.kernel, BUCKETS.command(testapps_build), output=work / "set", buckets=True, timeout=180,
                   env=app_env(BUCKETS, work), source_dir=TESTAPPS / "cuda", build_dir=testapps_build)


def replay_set(s, *, cubin=None, validate: bool = False, replay: bool = True, iterations: int = 20):
    """Every member of the set `s` through its session: the captured cubin (and `cubin`)
    timed, and `cubin` validated with `validate` (SetSession.run_members)."""
    from kerncap import api

    with api.open(s.root) as session:
        return session.run_members(None if cubin is None else str(cubin),
                                   validate=api.ValidateRequest() if validate else None,
                                   replay=api.ReplayRequest(iterations=iterations) if replay else None)


def member_by_grid(s, grid: int):
    return next(m for m in s.members if m.bucket.grid[0] == grid)


def test_profile_buckets_groups_launches_by_signature(testapps_build):
    from kerncap.commands.profile import print_bucket_table
    from kerncap.capture.profile import run_profile

    result = run_profile(BUCKETS.command(testapps_build), buckets=True, timeout=120)
    print_bucket_table(result, top=3)
    mine = [b for b in result.buckets if "bk_scale" in b["kernel"]]
    assert {b["grid"][0]: b["launches"] for b in mine} == SHAPES
    assert all(b["timed"] == b["launches"] and b["total_ns"] > 0 for b in mine)
    # the scalar arguments are part of the signature; the pointers are not
    n_args = {b["grid"][0]: [s for s in b["scalars"] if s["size"] == 4] for b in mine}
    assert any(s["hex"] == (1 << 20).to_bytes(4, "little").hex() for s in n_args[COMMON])


def test_one_extract_run_yields_every_bucket(bucket_set):
    from kerncap.capture.set_extract import format_set_extract
    from kerncap.reproducer.set_info import format_set_info, summarize_set

    s = bucket_set.set
    print("\n" + format_set_extract(bucket_set))
    print(format_set_info(summarize_set(s)))
    assert {m.bucket.grid[0]: m.bucket.launches for m in s.members} == SHAPES
    assert sorted(m.dispatch for m in s.members) == [0, 1, 2, 3]  # the first launch of each shape
    weights = {m.bucket.grid[0]: m.weight for m in s.members}
    assert abs(sum(weights.values()) - 1) < 1e-9
    assert weights[COMMON] == max(weights.values()) and weights[RARE] == min(weights.values())
    assert not s.refused and s.manifest["times"] == "whole run"
    assert bucket_set.stored["chunks"] > 0  # the members' payloads live in the store, shared chunks once


def test_weighted_speedup_follows_the_weights(bucket_set, variant_cubins):
    """Each variant validates on every member, and its weighted speedup is the one the
    weights and the members' own speedups give. That fast-on-common beats fast-on-rare
    (a timing figure) is bench/speedups.py's `buckets` row."""
    from kerncap.api import format_set_run

    s = bucket_set.set
    runs = {}
    for name in ("bucket_fast_rare", "bucket_fast_common"):
        runs[name] = run = replay_set(s, cubin=variant_cubins / f"{name}.cubin", validate=True, iterations=30)
        print("\n" + format_set_run(run))
        assert run.passed, "every member must validate byte-exact with the variant"
    rare, common = runs["bucket_fast_rare"], runs["bucket_fast_common"]
    idx = {m.bucket.grid[0]: i for i, m in enumerate(s.members)}
    for run in (rare, common):
        assert [r.speedup > 0 for r in run.runs] == [True] * len(s.members)
        predicted = 1 / sum(m.weight / r.speedup for m, r in zip(s.members, run.runs))
        assert abs(run.workload.weighted - predicted) < 1e-9
    w_rare = s.members[idx[RARE]].weight
    print(f"weighted speedup: fast-on-rare {rare.workload.weighted:.3f}x (rare weight {100 * w_rare:.1f}%), "
          f"fast-on-common {common.workload.weighted:.3f}x (common weight "
          f"{100 * s.members[idx[COMMON]].weight:.1f}%)")


def test_recompile_builds_one_variant_every_member_uses(bucket_set):
    from kerncap.recompile.set_variant import recompile_set

    s = bucket_set.set
    v = recompile_set(s)
    print(f"\n{v.path}: {v.builds} build(s) in {v.seconds:.2f} s for {len(v.cubins)} members")
    assert v.builds == 1 and len(set(v.cubins.values())) == 1
    run = replay_set(s, cubin=v.path, validate=True, iterations=5)
    assert run.passed and run.workload is not None


def test_dispatch_list_captures_those_dispatches_in_one_run(testapps_build, tmp_path):
    from kerncap.capture.extract import extract

    res = extract(BUCKETS.kernel, BUCKETS.command(testapps_build), output=tmp_path / "set", dispatch=[0, 5, 30],
                  timeout=120, env=app_env(BUCKETS, tmp_path))
    s = res.set
    print(f"\n{[(m.dispatch, m.bucket.grid[0], round(m.weight, 3)) for m in s.members]}; times: {s.manifest['times']}")
    assert [m.dispatch for m in s.members] == [0, 5, 30]
    assert [m.bucket.grid[0] for m in s.members] == [COMMON, COMMON, 1024]
    assert s.members[0].weight == s.members[1].weight  # one bucket, two members: its weight split
    assert replay_set(s, replay=False, validate=True).passed


def test_a_bucket_that_ran_only_in_a_refused_context_is_named(testapps_build, tmp_path):
    from kerncap.capture.extract import extract

    spec = AppSpec("buckets", "bk_scale", args=("refused",))
    res = extract(spec.kernel, spec.command(testapps_build), output=tmp_path / "set", buckets=True, timeout=120,
                  env=app_env(spec, tmp_path))
    s = res.set
    print("\n" + "\n".join(res.notes))
    assert {m.bucket.grid[0] for m in s.members} == set(SHAPES)
    assert len(s.refused) == 1
    refused = s.refused[0]
    assert refused["bucket"]["grid"][0] == 2048 and "conditional" in refused["reason"]
    assert any("not captured" in n and "grid 2048" in n for n in res.notes)
