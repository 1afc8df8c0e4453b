"""A progress bar (rich) for long scans: tasks done, ops, rate. Only on a TTY."""
from __future__ import annotations

import sys
import time


class Progress:
    def __init__(self, enabled: bool | None = None):
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self.bar = None

    def stage(self, what: str, total: int):
        if not self.enabled:
            return _Stage(None, None)
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress as RichProgress, TextColumn, TimeElapsedColumn
        if self.bar is None:
            self.bar = RichProgress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                    TextColumn("{task.fields[ops]}"), TextColumn("{task.fields[rate]}"),
                                    TimeElapsedColumn(), transient=True, console=Console(stderr=True))
            self.bar.start()
        return _Stage(self.bar, self.bar.add_task(what, total=total, ops="", rate=""))

    def close(self):
        if self.bar is not None:
            self.bar.stop()


class _Stage:
    def __init__(self, bar, task):
        self.bar, self.task = bar, task
        self.ops, self.t0 = 0, time.perf_counter()

    def advance(self, ops: int = 0):
        if self.bar is None:
            return
        self.ops += ops
        rate = self.ops / max(time.perf_counter() - self.t0, 1e-9)
        self.bar.update(self.task, advance=1, ops=f"{self.ops:,} ops" if self.ops else "",
                        rate=f"{rate / 1e6:.2f} M ops/s" if self.ops else "")
