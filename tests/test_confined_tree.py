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


def test_real_dir_refuses_dotdot_links_and_files_in_the_way(tmp_path):
    """real_dir: '..' anywhere is refused; a linked or non-directory component is named
    (the link's target too); missing directories are made only with create."""
    from kerncap.errors import KerncapError

    root = tmp_path / "repro"
    (root / "a").mkdir(parents=True)
    with pytest.raises(KerncapError, match="leaves"):
        confined.real_dir(root, "a/../../x", create=True)
    assert not (tmp_path / "x").exists()
    outside = tmp_path / "outside"
    outside.mkdir()
    (root / "a" / "link").symlink_to(outside)
    with pytest.raises(KerncapError, match=r"a/link is a symbolic link \(to .*outside\): kerncap does not write"):
        confined.real_dir(root, "a/link/deeper", create=True)
    assert list(outside.iterdir()) == []
    (root / "file").write_text("")
    with pytest.raises(KerncapError, match="file is not a directory"):
        confined.real_dir(root, "file/sub", create=True)
    assert confined.real_dir(root, "b/c") == root / "b" / "c" and not (root / "b").exists()
    assert confined.real_dir(root, "b/c", create=True).is_dir()


def test_a_tree_never_follows_a_link_and_replaces_only_through_commit(tmp_path):
    """Tree: a directory component that is a link, or a file name taken by a link, is a
    TreeError and nothing is written through it; `replace` leaves the old file whole until
    commit renames the new one over it; modes lose set-ID and group/other write bits."""
    outside = tmp_path / "outside"
    outside.mkdir()
    root = tmp_path / "tree"
    root.mkdir()
    (root / "d").symlink_to(outside)
    (root / "f").symlink_to(outside / "planted")
    (root / "old").write_bytes(b"old")
    with confined.Tree(root) as tree:
        with pytest.raises(confined.TreeError, match="a symbolic link or not a directory"):
            tree.create("d/x.bin")
        with pytest.raises(confined.TreeError, match="already there"):
            tree.create("f")
        with pytest.raises(confined.TreeError, match="not a path inside"):
            tree.dir_fd("..")
        f = tree.create("old", replace=True)
        f.write(b"new")
        assert (root / "old").read_bytes() == b"old"
        tree.commit(f, mode=0o6777)
    assert list(outside.iterdir()) == [] and (root / "old").read_bytes() == b"new"
    assert (root / "old").stat().st_mode & 0o7777 == 0o755
    assert leftovers(root) == []
    assert confined.safe_mode(0o000) == 0o400 and confined.safe_mode(0o000, directory=True) == 0o700
