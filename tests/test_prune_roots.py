"""kerncap.prune.roots' own rules, each on a tiny stand-in capture: which regions a
memory operation's span overlaps (a span that only touches a region does not), which
states of an item are scanned, and which steps' host bytes are roots (an h2d copy's only).
Found by a random one-line operator scan (seventeenth session): the prune tests over real
captures never met these edges."""

from __future__ import annotations

from types import SimpleNamespace as NS

from kerncap.prune import roots as R

A = NS(id=0, base=0x1000, end=0x2000)
B = NS(id=1, base=0x3000, end=0x4000)


def test_a_span_overlaps_the_regions_it_covers_not_those_it_only_touches():
    spans = R._Spans(NS(regions=[B, A]))
    assert spans.overlapping(0x2000, 0x1000) == []          # from A's end up to B's base
    assert spans.overlapping(0x1fff, 2) == [0]               # A's last byte
    assert spans.overlapping(0x1800, 0x2000) == [0, 1]       # both
    assert spans.overlapping(0x3fff, 0x10000) == [1]         # past the last region
    assert spans.overlapping(0x5000, 16) == [] and spans.overlapping(0x1000, 0) == []


def test_an_items_post_state_is_scanned_only_when_asked_and_only_when_it_differs():
    assert R._states(["p"], ["q"], True) == (["p"], ["q"])
    assert R._states(["p"], ["q"], False) == (["p"],)
    assert R._states(["p"], ["p"], True) == (["p"],) and R._states(["p"], None, True) == (["p"],)


def test_only_a_host_to_device_copys_bytes_are_a_sequences_root():
    launch = NS(index=0, params=[], param_buffer=b"", attributes=[])
    steps = [NS(op="copy", kind="h2d", dst=0x1000, src=0, bytes=8, payload=("h2d",)),
             NS(op="copy", kind="d2h", dst=0, src=0x3000, bytes=8, payload=("d2h",)),
             NS(op="copy", kind="d2d", dst=0x1000, src=0x3000, bytes=8, payload=("d2d",)),
             NS(op="copy", kind="h2d", dst=0x1000, src=0, bytes=8, payload=())]
    cap = NS(sequence=NS(launches=[launch], steps=steps, launch_label=lambda i: "k"), regions=[A, B],
             texture_objects=[], globals=[], snapshotted_host_regions=[])
    roots = R.sequence_roots(cap)
    assert [i.states for i in roots.items] == [(["h2d"],)]
    assert [i.prefix for i in roots.items] == ["step 0: h2d copy's bytes"]
    assert {(n.region, n.why) for n in roots.direct if isinstance(n, R.Named)} == {
        (0, "step 0: h2d copy destination"), (1, "step 1: d2h copy source"), (0, "step 2: d2d copy destination"),
        (1, "step 2: d2d copy source"), (0, "step 3: h2d copy destination")}


def test_a_two_row_fill_spans_its_second_row_and_a_one_row_fill_its_width_only():
    """A 2-D fill of two rows ends one pitch past its first row's end: the region holding
    that second row is a root too (twenty-first audit: `rows > 2` kept only the first row)."""
    fill = NS(op="memset", dst=0x1f00, element=4, width=16, height=2, pitch=0x1400)
    assert R._touched(fill) == [(0x1f00, 0x1400 + 64, "fill")]
    launch = NS(index=0, params=[], param_buffer=b"", attributes=[])
    cap = NS(sequence=NS(launches=[launch], steps=[fill], launch_label=lambda i: "k"), regions=[A, B],
             texture_objects=[], globals=[], snapshotted_host_regions=[])
    assert {n.region for n in R.sequence_roots(cap).direct if isinstance(n, R.Named)} == {0, 1}
    assert R._touched(NS(op="memset", dst=0x1f00, element=4, width=16, height=1, pitch=0x1400)) == \
        [(0x1f00, 64, "fill")]
    assert R._touched(NS(op="memset", dst=0x1f00, element=2, width=16, height=0, pitch=0x1400)) == \
        [(0x1f00, 32, "fill")]


def test_a_pointer_in_the_parameter_buffer_is_named_by_the_argument_that_holds_it():
    """Two adjacent 8-byte arguments: the value at offset 8 is argument 1's, not "argument
    0+0x8" (twenty-second audit: an inclusive end bound named the byte just past an argument
    as that argument); offsets inside an argument keep their +offset, offsets past every
    argument name the buffer."""
    params = [NS(index=0, offset=0, size=8, region=None), NS(index=1, offset=8, size=8, region=None)]
    assert R.param_name(params, 0) == "argument 0"
    assert R.param_name(params, 4) == "argument 0+0x4"
    assert R.param_name(params, 8) == "argument 1"
    assert R.param_name(params, 16) == "parameter buffer+0x10"
    # a sequence launch's reason for a pointer found in its second argument
    launch = NS(index=0, params=params, param_buffer=bytes(8) + (0x1010).to_bytes(8, "little"), attributes=[])
    cap = NS(sequence=NS(launches=[launch], steps=[], launch_label=lambda i: "k"), regions=[A, B],
             texture_objects=[], globals=[], snapshotted_host_regions=[])
    words = [w for w in R.sequence_roots(cap).direct if isinstance(w, R.Words)]
    assert words[0].why(8) == "launch 0: argument 1"
