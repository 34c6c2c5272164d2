"""House themes (themes/*.toml shipped with kerncap) and user themes
($XDG_CONFIG_HOME/kerncap/themes/*.toml, default ~/.config/kerncap/themes), plus a
user keymap ($XDG_CONFIG_HOME/kerncap/keymap.toml: binding id = "keys")."""

from __future__ import annotations

import os
from pathlib import Path

from textual.theme import Theme

from kerncap.errors import KerncapError

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

PACKAGE_DIR = Path(__file__).resolve().parent
DEFAULT_THEME = "kerncap-dark"
THEME_KEYS = {"name", "primary", "secondary", "warning", "error", "success", "accent", "foreground",
              "background", "surface", "panel", "boost", "dark", "luminosity_spread", "text_alpha", "variables"}


def themes_dir() -> Path:
    """Installed wheels carry themes inside the package; a source checkout has them at the top."""
    for candidate in (PACKAGE_DIR / "themes", PACKAGE_DIR.parent / "themes"):
        if (candidate / "kerncap.tcss").is_file():
            return candidate
    raise KerncapError(
        f"kerncap's themes/ folder is missing (looked in {PACKAGE_DIR / 'themes'} and {PACKAGE_DIR.parent / 'themes'})",
        "reinstall kerncap; the package is incomplete",
    )


def config_dir() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "kerncap"


def stylesheet() -> Path:
    return themes_dir() / "kerncap.tcss"


def load_theme(path: Path) -> Theme:
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise KerncapError(f"theme {path} is unreadable ({exc})", "fix the TOML or remove the file") from None
    unknown = set(data) - THEME_KEYS
    if unknown:
        raise KerncapError(f"theme {path} has unknown keys: {', '.join(sorted(unknown))}",
                           f"allowed keys: {', '.join(sorted(THEME_KEYS))}")
    if "primary" not in data:
        raise KerncapError(f"theme {path} has no `primary` colour", "every theme needs at least name and primary")
    data.setdefault("name", path.stem)
    return Theme(**data)


def house_themes() -> list[Theme]:
    return [load_theme(p) for p in sorted(themes_dir().glob("*.toml"))]


def user_themes() -> tuple[list[Theme], list[KerncapError]]:
    """User themes, and the errors of those that did not load (shown, never fatal)."""
    themes, errors = [], []
    for p in sorted((config_dir() / "themes").glob("*.toml")):
        try:
            themes.append(load_theme(p))
        except KerncapError as exc:
            errors.append(exc)
    return themes, errors


def user_keymap() -> dict[str, str]:
    path = config_dir() / "keymap.toml"
    if not path.is_file():
        return {}
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise KerncapError(f"keymap {path} is unreadable ({exc})", "fix the TOML or remove the file") from None
    return {str(k): str(v) for k, v in data.items()}
