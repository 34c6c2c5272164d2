"""kerncap.core.confined.Tree's temp files (hydrate, unpack): a Ctrl-C at any moment of a
`replace` create, before its caller can discard it, leaves no temp file once the tree is
closed (tests/test_adversarial.py's interrupted hydrate once found one left in a full run
on a loaded machine)."""

from __future__ import annotations

import os

import pytest

from kerncap.core import confined, fsio


def leftovers(d):
    return [p.name for p in d.iterdir() if fsio.is_leftover_name(p.name)]


def test_an_interrupt_inside_create_leaves_no_temp_file(tmp_path, monkeypatch):
    def interrupted(fd, mode):
        raise KeyboardInterrupt  # the file exists; its object never reaches the caller

    monkeypatch.setattr(confined.os, "fdopen", interrupted)
    with pytest.raises(KeyboardInterrupt):
        with confined.Tree(tmp_path) as tree:
            tree.create("a.bin", replace=True)
    assert leftovers(tmp_path) == [] and list(tmp_path.iterdir()) == []


def test_committed_and_discarded_files_are_left_as_they_are(tmp_path):
    (tmp_path / "old.bin").write_bytes(b"old")
    with confined.Tree(tmp_path) as tree:
        f = tree.create("old.bin", replace=True)
        f.write(b"new")
        tree.commit(f)
        g = tree.create("gone.bin", replace=True)
        tree.discard(g)
        h = tree.create("kept.bin")
        h.write(b"k")
        tree.commit(h)
    assert sorted(os.listdir(tmp_path)) == ["kept.bin", "old.bin"] and (tmp_path / "old.bin").read_bytes() == b"new"


@pytest.mark.parametrize("rel", ["../outside.bin", "sub/../../outside.bin", "../outside/deeper.bin"])
def test_a_path_through_dotdot_is_refused_and_nothing_lands_above_the_tree(tmp_path, rel):
    """A name climbing out with `..` (an index entry of a packed reproducer, a blob name) is
    refused however deep it starts, and nothing is written above the tree. Mutation
    caught: `..` let through as a directory name (os.open("..", dir_fd=...) climbs)."""
    root = tmp_path / "tree"
    root.mkdir()
    with confined.Tree(root) as tree:
        with pytest.raises(confined.TreeError, match="not a path inside the directory"):
            tree.create(rel)
        with pytest.raises(confined.TreeError):
            tree.dir_fd("..")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tree"]
