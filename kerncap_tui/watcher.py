"""A watchdog observer on <reproducer>/source (a sequence: kernels/, and fusions/ once it
has one), in its own thread, posting SourceChanged; and on the reproducer's history.json
(not recursive), posting HistoryChanged.

Debouncing happens in the app (one timer on the event loop), so bursts of editor
writes (temp file + rename + chmod) become one build."""

from __future__ import annotations

from pathlib import Path

from kerncap import api
from kerncap_tui.messages import HistoryChanged, SourceChanged


def is_source_event(path: str, source_dir: Path | None = None) -> bool:
    """A write to one of the sources (kerncap.api.is_source_file), not an editor's dropping."""
    return api.is_source_file(path, source_dir)


class SourceWatcher:
    def __init__(self, source_dir: Path | None, post) -> None:
        self.source_dir = source_dir
        self.watched: list[Path] = []
        self._post = post
        self._observer = None

    def _handler(self, source_dir: Path):
        from watchdog.events import FileSystemEventHandler

        post = self._post

        class Handler(FileSystemEventHandler):
            def on_any_event(self, event) -> None:
                if event.is_directory or event.event_type not in ("modified", "created", "moved", "closed"):
                    return
                path = getattr(event, "dest_path", "") or event.src_path
                if is_source_event(path, source_dir):
                    post(SourceChanged(Path(path)))

        return Handler()

    def start(self) -> None:
        from watchdog.observers import Observer

        self._observer = Observer()
        self._observer.daemon = True
        self._observer.start()
        if self.source_dir is not None:
            self.watch(self.source_dir)

    def watch_history(self, history_file: Path) -> None:
        """The reproducer's history.json, written by replacing it (kerncap.core.fsio.write_atomic):
        its directory alone, not recursive (capture/ may hold a million files)."""
        from watchdog.events import FileSystemEventHandler

        if self._observer is None or history_file in self.watched:
            return
        post, name = self._post, history_file.name

        class Handler(FileSystemEventHandler):
            def on_any_event(self, event) -> None:
                path = getattr(event, "dest_path", "") or event.src_path
                if not event.is_directory and Path(path).name == name:
                    post(HistoryChanged())

        self._observer.schedule(Handler(), str(history_file.parent), recursive=False)
        self.watched.append(history_file)

    def watch(self, directory: Path) -> None:
        """Watch one more directory (a sequence's fusions/ once the first skeleton is written)."""
        if self._observer is None or directory in self.watched:
            return
        self._observer.schedule(self._handler(directory), str(directory), recursive=True)
        self.watched.append(directory)

    @property
    def running(self) -> bool:
        return self._observer is not None and self._observer.is_alive()

    def stop(self) -> None:
        if self._observer is not None:
            self._observer.stop()
            self._observer.join(timeout=2)
            self._observer = None
