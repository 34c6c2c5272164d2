"""Every workbench action in the command palette (ctrl+p), with its key."""

from __future__ import annotations

from functools import partial

from textual.command import DiscoveryHit, Hit, Hits, Provider


def palette_entries(app) -> list[tuple[str, str, object]]:
    """(title, help, callback) for each app and pane binding that has an id."""
    entries = []
    for binding in app.BINDINGS:
        if getattr(binding, "id", None):
            entries.append((binding.description or binding.id, f"{binding.id} · {binding.key}", partial(app.run_action, binding.action)))
    for tab, pane_cls in app.PANES.items():
        for binding in pane_cls.BINDINGS:
            if getattr(binding, "id", None):
                entries.append((
                    f"{tab.title()}: {binding.description}", f"{binding.id} · {binding.key}",
                    partial(app.pane_action, tab, binding.action),
                ))
    return entries


class KerncapCommands(Provider):
    async def discover(self) -> Hits:
        for title, help_text, callback in palette_entries(self.app):
            yield DiscoveryHit(title, callback, help=help_text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for title, help_text, callback in palette_entries(self.app):
            score = matcher.match(title)
            if score > 0:
                yield Hit(score, matcher.highlight(title), callback, help=help_text)
