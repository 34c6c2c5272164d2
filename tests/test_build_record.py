"""kerncap.recompile.built: the record in the user's cache of which cubin of variants/
was compiled from which source, so that `kerncap build` without a GPU reuses it across
processes (end to end, with nvcc: test_recompile_inputs.py). A record is found only for
the same source, mode and --config, and only while the cubin is the one compiled."""

from __future__ import annotations

from pathlib import Path

import pytest

from kerncap.recompile import built
from kerncap.reproducer.variants import RecompileResult


@pytest.fixture
def repro(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    root = tmp_path / "repro"
    (root / "variants").mkdir(parents=True)
    return root


def compiled(repro: Path, name: str, data: bytes) -> RecompileResult:
    cubin = repro / "variants" / name
    cubin.write_bytes(data)
    return RecompileResult(cubin=cubin, seconds=1.5, command=["triton.compile", name], log="ok", mode="triton",
                           phases={"ptxas": 0.5})


def test_a_cubin_built_with_one_config_is_not_reused_for_another(repro):
    """`kerncap build --config num_warps=8` after a build with num_warps=4 of the same
    source compiles again: the two cubins differ. Mutation caught: the config left out
    of the record's key."""
    four = compiled(repro, "1.cubin", b"num_warps=4")
    built.remember(repro, "source-fp", four, config="num_warps=4")
    assert built.recall(repro, "source-fp", config="num_warps=8") is None
    assert built.recall(repro, "source-fp") is None  # no --config: the captured options, another build
    again = built.recall(repro, "source-fp", config="num_warps=4")
    assert again is not None and again.cubin == four.cubin and again.mode == "triton"
    eight = compiled(repro, "2.cubin", b"num_warps=8")
    built.remember(repro, "source-fp", eight, config="num_warps=8")
    assert built.recall(repro, "source-fp", config="num_warps=8").cubin == eight.cubin
    assert built.recall(repro, "source-fp", config="num_warps=4").cubin == four.cubin


def test_a_record_needs_the_same_source_and_mode_and_the_cubin_unchanged(repro):
    result = compiled(repro, "1.cubin", b"cubin")
    built.remember(repro, "fp", result, mode="reduced")
    assert built.recall(repro, "fp", mode="reduced").cubin == result.cubin
    assert built.recall(repro, "other-fp", mode="reduced") is None
    assert built.recall(repro, "fp", mode="full") is None
    result.cubin.write_bytes(b"cubiN")  # same size, another SHA-256
    assert built.recall(repro, "fp", mode="reduced") is None


def test_past_the_record_limit_the_newest_build_is_kept_and_the_oldest_dropped(repro):
    """A reproducer's record holds its latest MAX_ENTRIES builds: the build just compiled
    is always reusable, the oldest is the one forgotten. Mutation caught: the list cut
    at its front, so every build past the limit was never remembered."""
    n = built.MAX_ENTRIES + 2
    for i in range(1, n + 1):
        built.remember(repro, f"fp{i}", compiled(repro, f"{i}.cubin", f"cubin {i}".encode()))
        assert built.recall(repro, f"fp{i}").cubin == repro / "variants" / f"{i}.cubin"
    assert built.recall(repro, "fp1") is None and built.recall(repro, "fp2") is None
    assert built.recall(repro, "fp3").cubin == repro / "variants" / "3.cubin"
