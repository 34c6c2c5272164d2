"""Regenerate the workbench screenshots used by the README: one SVG per pane at
120×34 (and the 80×24 SSH view of the history), PNGs beside them when cairosvg is
installed. Runs headless on the bundled demo (kerncap_tui.demo.demo_path()).

    PYTHONPATH=engine:. python3 screenshots/make_screenshots.py
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
SHOTS = [  # file stem, keys pressed, terminal size
    ("profile", "1", (120, 34)),
    ("memory", "2", (120, 34)),
    ("source", "3", (120, 34)),
    ("history", "4", (120, 34)),
    ("history-80x24", "4", (80, 24)),
]


async def _shoot(root: Path, stem: str, keys: str, size: tuple[int, int]) -> Path:
    from kerncap_tui.app import KerncapApp

    app = KerncapApp(root, demo=True)
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        await pilot.press(*keys)
        await pilot.pause(0.5)  # workers (capture reads, git) finish well within this
        svg = HERE / f"{stem}.svg"
        app.save_screenshot(filename=svg.name, path=str(HERE))
    return svg


def main() -> int:
    from kerncap_tui import demo

    if not demo.available():
        print(f"make_screenshots: no demo capture at {demo.demo_path()}", file=sys.stderr)
        return 1
    try:
        import cairosvg
    except ImportError:
        cairosvg = None
        print("make_screenshots: cairosvg not installed; writing SVG only (pip install cairosvg for PNG)")
    with tempfile.TemporaryDirectory() as tmp:
        root = demo.materialize(Path(tmp) / "reproducer")
        for stem, keys, size in SHOTS:
            svg = asyncio.run(_shoot(root, stem, keys, size))
            print(f"wrote {svg.relative_to(HERE.parent)}")
            if cairosvg is not None:
                png = svg.with_suffix(".png")
                cairosvg.svg2png(url=str(svg), write_to=str(png))
                print(f"wrote {png.relative_to(HERE.parent)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
