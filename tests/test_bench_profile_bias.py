"""bench/profile_bias.py's --variant parsing without a GPU: each variant is a sampled
profile with its own variables, named once; a malformed one is refused by name."""

from __future__ import annotations

import pytest

from bench_module import load_bench


def test_variants_follow_the_default_sampled_profile_with_their_variables():
    bias = load_bench("profile_bias")
    got = bias.parse_variants(["events:KERNCAP_PROFILE_TIMER=events",
                               "both:KERNCAP_PROFILE_TIMER=events,KERNCAP_PROFILE_CALIBRATE=own"])
    assert list(got) == ["sampled", "events", "both"]
    assert got["sampled"] == {} and got["events"] == {"KERNCAP_PROFILE_TIMER": "events"}
    assert got["both"] == {"KERNCAP_PROFILE_TIMER": "events", "KERNCAP_PROFILE_CALIBRATE": "own"}


@pytest.mark.parametrize("spec", ["", "noassign", "x:", "x:VAR", "x:=1", "sampled:A=1", "exact:A=1", "plain:A=1"])
def test_a_malformed_or_repeated_variant_is_refused_by_name(spec):
    bias = load_bench("profile_bias")
    with pytest.raises(ValueError, match="--variant"):
        bias.parse_variants([spec])


def test_a_variant_name_is_used_once():
    bias = load_bench("profile_bias")
    with pytest.raises(ValueError, match="'a:B=2'"):
        bias.parse_variants(["a:B=1", "a:B=2"])
