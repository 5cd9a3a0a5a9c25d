"""A progress bar for long commands: on a terminal only, so logs and pipes stay clean."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["progress_bar", "ProgressCallback"]

ProgressCallback = Callable[[int, int], None]
"""Called with (done, total)."""


class progress_bar:
    """``with progress_bar(enabled, "appending") as update:`` gives ``update(done, total)`` or None."""

    def __init__(self, enabled: bool, label: str) -> None:
        self.enabled = enabled
        self.label = label
        self._bar: Any = None

    def __enter__(self) -> ProgressCallback | None:
        if not self.enabled:
            return None
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

        self._bar = Progress(self.label, BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), transient=True)
        self._bar.start()
        task = self._bar.add_task(self.label, total=None)

        def update(done: int, total: int) -> None:
            self._bar.update(task, completed=done, total=total)

        return update

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()
