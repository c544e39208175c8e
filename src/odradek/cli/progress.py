"""A live progress display for long CLI operations (reset-offsets over many partitions).

Drawn with ``rich`` on standard error, and only when standard error is a terminal: the
results still go to standard output as plain lines, so ``odradek ... > file`` or a pipe
reads exactly what Kafka's tool prints, and a script or CI log (stderr not a terminal)
sees no progress at all. The display is transient: it is erased when the operation ends.
"""

from __future__ import annotations

import sys
from typing import Any


class StepProgress:
    """One bar per task (a group, a partition), each counting done of a total."""

    def __init__(self, unit: str, *, enabled: bool | None = None) -> None:
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self._unit = unit
        self._progress: Any = None
        self._tasks: dict[str, Any] = {}
        if not self.enabled:
            return
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        self._progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn(unit),
            TextColumn("{task.fields[detail]}"),
            TimeElapsedColumn(),
            console=Console(stderr=True),
            transient=True,
        )

    def __enter__(self) -> StepProgress:
        if self._progress is not None:
            self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()

    def update(self, name: str, completed: int, total: int, detail: str = "") -> None:
        """Show ``name`` at ``completed`` of ``total``; drawn at once (a step may be the
        last before the operation ends, and must still be seen)."""
        if self._progress is None:
            return
        task = self._tasks.get(name)
        if task is None:
            task = self._tasks[name] = self._progress.add_task(name, total=total, detail=detail)
        self._progress.update(task, completed=completed, total=total, detail=detail)
        self._progress.refresh()
