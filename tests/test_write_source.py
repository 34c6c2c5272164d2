"""kerncap.reproducer.editable.write_source (MCP's write_source): what a rewrite keeps."""

from __future__ import annotations

import os
import stat

from kerncap.reproducer.editable import list_sources, write_source


def test_a_rewritten_source_keeps_its_mode(tmp_path):
    """The atomic replace writes a fresh file: the old file's mode (an executable build
    script, a read-only header kept by the user) must carry over, not become the default."""
    source = tmp_path / "repro" / "source"
    source.mkdir(parents=True)
    script = source / "build.sh"
    script.write_text("#!/bin/sh\nnvcc -cubin k.cu\n")
    os.chmod(script, 0o750)
    wrote = write_source(tmp_path / "repro", "build.sh", "#!/bin/sh\nnvcc -O3 -cubin k.cu\n")
    assert wrote.path == "build.sh" and wrote.editable
    assert stat.S_IMODE(script.stat().st_mode) == 0o750
    assert script.read_text().startswith("#!/bin/sh\nnvcc -O3")
    assert [f.path for f in list_sources(tmp_path / "repro")] == ["build.sh"]  # no temporary file left
