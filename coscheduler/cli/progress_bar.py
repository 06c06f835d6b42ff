"""A progress bar on stderr for long simulator runs, shown only once a run lasts a while.

Its own module so that both the CLI and the benchmarks use it without importing each other.
"""

from __future__ import annotations

import sys
import time

import click

# Show a progress bar only once a run has lasted this long (short runs stay quiet).
PROGRESS_AFTER_S = 2.0


class DelayedProgress:
    """A click progress bar on stderr that appears only after ``delay`` seconds.

    Called by the engine with the number of jobs finished in the current run; ``next_run``
    moves on to the next policy, so the bar covers all policies of one command.
    """

    def __init__(self, total: int, label: str, delay: float | None = None):
        self.total = total
        self.label = label
        self.delay = PROGRESS_AFTER_S if delay is None else delay
        self.t0 = time.monotonic()
        self.offset = 0
        self.shown = 0
        self.bar = None

    def __call__(self, finished_in_run: int) -> None:
        done = self.offset + finished_in_run
        if self.bar is None:
            if time.monotonic() - self.t0 < self.delay:
                return
            self.bar = click.progressbar(length=self.total, label=self.label, file=sys.stderr)
            self.bar.__enter__()
        self.bar.update(done - self.shown)
        self.shown = done

    def next_run(self, jobs_in_run: int) -> None:
        self.offset += jobs_in_run

    def close(self) -> None:
        if self.bar is not None:
            self.bar.__exit__(None, None, None)
            self.bar = None
