"""Pure logic of the inspect views: the memory map's layout, the history plot, finding
the captured kernel's definition, the per-variant tool results."""

from __future__ import annotations

import json

from kerncap.reproducer.format import Capture
from kerncap_tui import regions as R
from kerncap_tui import variant_inspect as VI
from kerncap.api import History, Variant
from kerncap_tui.regions import MapRow
from kerncap.sources.locate import locate_kernel
from kerncap_tui.widgets.history_plot import plot_lines
from kerncap_tui.widgets.memory_map import layout

GiB, MiB = 1 << 30, 1 << 20


def _row(i: int, base: int, size: int, *, arg=False, written=False, zero=False) -> MapRow:
    return MapRow(f"r{i}", f"region {i}", base, size, "device", arg, written, zero)


def test_map_of_the_demo_fits_and_keeps_sizes_to_scale(demo_root):
    rows = R.map_rows(Capture.open(demo_root))
    view = layout(rows, 76)
    strip = "".join(g for g, _ in view.cells)
    assert len(strip) <= 76 and view.labels.startswith("#0")
    # regions 0 and 1 are 256 KiB each, region 2 256 B: equal halves and one cell
    n0, n1, n2 = (sum(1 for _, k in view.cells if k == key) for key in ("r0", "r1", "r2"))
    assert abs(n0 - n1) <= 1 and n2 == 1
    assert set(strip[:n0]) == {"▓"} and set(strip[n0:n0 + n1]) == {"█"}  # argument / written


def test_map_cuts_huge_gaps_and_zooms_around_the_focus():
    rows = [_row(0, 0x7F0000000000, GiB, arg=True), _row(1, 0x7F8000000000, 16 * MiB, written=True),
            _row(2, 0x7F9000000000, 4 * GiB, zero=True)]
    view = layout(rows, 80)
    strip = "".join(g for g, _ in view.cells)
    assert strip.count("≈") == 2 and len(strip) <= 80
    assert strip.count("░") > 3 * strip.count("▓")  # 4 GiB against 1 GiB
    zoomed = layout(rows, 80, zoom=16, focus="r1")
    assert zoomed.total_cells > 80 and any(k == "r1" for _, k in zoomed.cells)
    assert zoomed.start > 0x7F0000000000


def test_a_window_zoomed_on_the_last_region_ends_at_the_maps_end():
    """Zoomed in on a small region at the top of the range: the window is still `width`
    cells and ends with that region (it cannot be centred past the map's end). Mutation
    caught: the window's first cell not held to `total - width` (a short, clipped strip)."""
    rows = [_row(0, 0x7F0000000000, GiB, arg=True), _row(1, 0x7F0040000000, 4 * GiB, zero=True),
            _row(2, 0x7F0140000000, 16 * MiB, written=True)]
    view = layout(rows, 80, zoom=16, focus="r2")
    assert view.total_cells > 80 and len(view.cells) == 80
    assert view.cells[-1][1] == "r2" and view.end == 0x7F0140000000 + 16 * MiB
    assert "#2" in view.labels and view.start > 0x7F0040000000  # inside region 1, the window's first cell


def _axpy_with_host_region(tmp_path, offset: int):
    """The committed axpy capture with a mapped host region `offset` bytes from y's base."""
    import shutil
    from pathlib import Path

    src = Path(__file__).parents[1] / "fixtures" / "captures" / "axpy_small"
    shutil.copytree(src, tmp_path / "axpy")
    path = tmp_path / "axpy" / "capture" / "manifest.json"
    m = json.loads(path.read_text())
    y = m["regions"][1]
    m["host_regions"] = [{"id": 0, "base": y["base"] + offset, "size": 16384, "api": "cuMemHostAlloc",
                          "device_pointer": y["base"] + offset, "written": True, "zero_fraction": 0.0,
                          "pre": y["pre"], "post": y["post"]}]
    m["params"][2]["host_pointers"] = [{"at": 0, "host_region": 0, "offset": 0}]
    path.write_text(json.dumps(m))
    return Capture.open(tmp_path / "axpy"), m


def test_the_region_table_lists_host_and_device_regions_by_address(tmp_path):
    """A host region below every device region comes first in the table (the Memory pane
    lists map_rows in order), globals and arrays after. Mutation caught: the rows not
    sorted (host regions listed after every device region)."""
    from pathlib import Path

    m = json.loads((Path(__file__).parents[1] / "fixtures" / "captures" / "axpy_small" / "capture"
                    / "manifest.json").read_text())
    lowest = min(r["base"] for r in m["regions"])
    cap, _ = _axpy_with_host_region(tmp_path, lowest - m["regions"][1]["base"] - 0x100000)
    rows = R.map_rows(cap)
    assert [r.key for r in rows][:3] == ["h0", "r0", "r1"]
    assert [r.base for r in rows if r.on_map] == sorted(r.base for r in rows if r.on_map)


def test_host_regions_are_drawn_as_their_own_kind(tmp_path):
    """Synthetic: the committed axpy capture with a mapped host region 0x100000 above y."""
    cap, _ = _axpy_with_host_region(tmp_path, 0x100000)
    rows = R.map_rows(cap)
    host = next(r for r in rows if r.key == "h0")
    assert host.label == "host region 0" and host.kind == "host/cuMemHostAlloc" and host.by_argument and host.written
    assert [r.key for r in rows] == ["r0", "r1", "h0"]  # by address, globals after
    view = layout(rows, 60)
    strip = "".join(g for g, k in view.cells if k == "h0")
    assert strip and set(strip) == {"▞"} and "h0" in view.labels
    pre, post = R.preview_bytes(cap, "h0")
    assert len(pre) == R.PREVIEW_BYTES and pre != post


def _variants(n: int) -> list[Variant]:
    return [Variant(id=i, time="", median_ms=0.010 / (1 + 0.1 * i), min_ms=0.009 / (1 + 0.1 * i),
                    validation="fail" if i == 2 else "pass") for i in range(n)]


def test_plot_marks_each_variant_and_the_baseline():
    lines = [line.plain for line in plot_lines(_variants(4), 60, 9)]
    assert len(lines) == 9 and all(len(line) <= 60 for line in lines)
    assert sum(line.count("●") for line in lines) == 3 and sum(line.count("✗") for line in lines) == 1
    assert any("┄" in line for line in lines)
    assert lines[-1].split() == ["b", "1", "2", "3"]
    assert lines[0].strip().startswith("10.") and "µs" in lines[0]


def test_plot_scale_reaches_the_fastest_run():
    """The y axis spans every variant's fastest run, not only the medians: its bottom label
    is at or below the fastest run and that run's line reaches the bottom rows. Mutation
    caught: the scale from the medians alone (the fastest runs' lines clamped at the bottom)."""
    variants = [Variant(id=i, time="", median_ms=0.010 - 0.0002 * i, min_ms=0.005 - 0.0002 * i, validation="pass")
                for i in range(4)]
    height = 12
    lines = [line.plain for line in plot_lines(variants, 60, height)]
    rows = height - 2
    bottom = lines[rows - 1].split("┤")[0].strip()
    assert bottom.endswith(" µs") and float(bottom[:-3]) <= 1e3 * min(v.min_ms for v in variants), bottom
    top = lines[0].split("┤")[0].strip()
    assert float(top[:-3]) >= 1e3 * max(v.median_ms for v in variants), top
    # each line runs from its median (top half) to its fastest run (bottom rows): over half the plot
    assert sum("│" in line.split("┤")[1] for line in lines[:rows]) >= rows // 2


def test_plot_keeps_the_latest_variants_when_narrow():
    lines = [line.plain for line in plot_lines(_variants(30), 40, 8)]
    assert lines[-1].split()[-1] == "29" and all(len(line) <= 40 for line in lines)


def test_kernel_site_cuda_and_triton(demo_root, tmp_path):
    cap = Capture.open(demo_root)
    site = locate_kernel(demo_root, cap.kernel)
    assert site.path.name == "smooth_kernel.cuh" and site.line == 7
    triton = tmp_path / "triton"
    (triton / "source").mkdir(parents=True)
    (triton / "source" / "kernel.py").write_text("import triton\n\n@triton.jit\ndef add_kernel(x, y):\n    pass\n")
    assert locate_kernel(triton, {"name": "add_kernel"}).line == 4
    # blank lines right above the def (a decorator, then a blank line; or none) are not its line
    (triton / "source" / "kernel.py").write_text("import triton\n\n@triton.jit\n\n\ndef add_kernel(x, y):\n    pass\n")
    assert locate_kernel(triton, {"name": "add_kernel"}).line == 6
    assert locate_kernel(tmp_path, {"name": "x"}) is None



def test_kernel_site_prefers_the_file_the_line_table_names(demo_root):
    """Two files of source/ define the captured kernel (an older copy kept beside it, a
    second instantiation): the Source pane opens at the one the cubin's line table named
    (reproducer.json's line_table_files, relative to source/), not at the first in path
    order. Mutation caught: the line table's relative names compared with absolute paths."""
    cap = Capture.open(demo_root)
    assert (demo_root / "source" / "common").is_dir()  # sorts before smooth/
    (demo_root / "source" / "common" / "old_smooth.cuh").write_text(
        "#pragma once\n__global__ void smooth(const float* x, float* y, const float* w, int n, int taps) {}\n")
    site = locate_kernel(demo_root, cap.kernel)
    assert site.path == demo_root / "source" / "smooth" / "smooth_kernel.cuh" and site.line == 7
    record = json.loads((demo_root / "reproducer.json").read_text())
    record["sources"]["line_table_files"] = ["common/old_smooth.cuh"]
    (demo_root / "reproducer.json").write_text(json.dumps(record))
    site = locate_kernel(demo_root, cap.kernel)
    assert site.path == demo_root / "source" / "common" / "old_smooth.cuh" and site.line == 2

def test_tool_results_by_variant(demo_root):
    from inspect_helpers import store_tool_results

    store_tool_results(demo_root)
    history = History.load(demo_root)
    found = VI.load_all(demo_root, history.variants)
    assert sorted(found) == [0, 1, 2]
    assert found[0].ncu.metrics["duration_ns"] == 80256.0 and found[0].latest_sanitize.clean
    assert VI.metric_cell("dram_read_bytes", 16793600.0) == "16.8M" and VI.metric_cell("registers", None) == "—"
    (demo_root / "variants" / "2.ncu.json").write_text(json.dumps({"broken": True}))
    assert 2 not in VI.load_all(demo_root, history.variants)


def test_a_variants_sanitizer_cell_shows_its_latest_run_whichever_tool_it_was(demo_root):
    """A clean memcheck of v1, then a racecheck that found hazards: v1's cell is the racecheck's
    (the later run), and swapped in time it is the memcheck's."""
    from kerncap.replay import sanitize

    from inspect_helpers import TOOLS_DIR

    history = History.load(demo_root)
    cubin = demo_root / "variants" / "1.cubin"

    def store(tool: str, log: str, created: str) -> None:
        errors, count = sanitize.parse_report((TOOLS_DIR / log).read_text())
        r = sanitize.SanitizeResult(tool=tool, kernel="_Z6smoothPKfPfS0_ii", cubin=str(cubin), label="variants/1.cubin",
                                    captured=False, errors=errors, reported_count=count, log=f"{tool}.log",
                                    validation="pass", created=created)
        sanitize.stored_path(demo_root, cubin, tool).write_text(json.dumps(r.to_dict()))

    store("memcheck", "clean.memcheck.log", "2026-11-30T10:00:00+0000")
    store("racecheck", "race.racecheck.log", "2026-11-30T11:00:00+0000")
    found = VI.load_all(demo_root, history.variants)
    assert sorted(found[1].sanitize) == ["memcheck", "racecheck"] and found[1].latest_sanitize.tool == "racecheck"
    cell = VI.sanitize_cell(found[1])
    assert cell.plain.startswith("✗ racecheck ") and cell.plain != "✗ racecheck 0", cell.plain
    store("memcheck", "clean.memcheck.log", "2026-11-30T12:00:00+0000")
    assert VI.sanitize_cell(VI.load_all(demo_root, history.variants)[1]).plain == "✓ memcheck"


def test_the_source_pane_opens_a_triton_kernels_python_source_first(tmp_path):
    """The Source pane opens a reproducer's primary source: build.json's translation unit,
    else the first C++ or Python file by name (a Triton kernel's source/ is Python), never
    a README or a data file. Mutation caught: only C++ was primary (a Triton reproducer's
    editor stayed empty)."""
    from kerncap_tui.widgets.source_pane import SourcePane

    triton = tmp_path / "triton" / "source"
    triton.mkdir(parents=True)
    (triton / "README.md").write_text("notes\n")
    (triton / "a.json").write_text("{}\n")
    (triton / "kernel.py").write_text("import triton\n\n@triton.jit\ndef add_kernel(x, y):\n    pass\n")
    assert SourcePane.primary_source(triton) == triton / "kernel.py"
    cuda = tmp_path / "cuda" / "source"
    (cuda / "src").mkdir(parents=True)
    (cuda / "a.py").write_text("print()\n")
    (cuda / "src" / "main.cu").write_text("__global__ void k() {}\n")
    assert SourcePane.primary_source(cuda) == cuda / "a.py"  # by name
    (cuda / "build.json").write_text(json.dumps({"tu": "src/main.cu"}))
    assert SourcePane.primary_source(cuda) == cuda / "src" / "main.cu"
    (cuda / "build.json").write_text(json.dumps({"tu": "src/gone.cu"}))  # a tu no longer there
    assert SourcePane.primary_source(cuda) == cuda / "a.py"
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "README.md").write_text("notes\n")
    assert SourcePane.primary_source(empty) is None
