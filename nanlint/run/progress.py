"""A progress bar on stderr for runs that take more than a moment, only on a terminal."""

from __future__ import annotations

import sys
import time
from typing import IO, Any, Optional

import click

# A run shorter than this shows nothing (a bar that flashes and vanishes is noise).
DELAY_S = 0.5


class Progress:
    """Counts files done; draws click's bar once the run has lasted DELAY_S."""

    def __init__(self, total: int, stream: Optional[IO[str]] = None, delay: Optional[float] = None):
        self.total = total
        self.done = 0
        self.stream = stream if stream is not None else sys.stderr
        self.delay = DELAY_S if delay is None else delay
        self.started = time.monotonic()
        self._bar: Any = None

    def update(self, n: int) -> None:
        self.done += n
        if self._bar is None:
            if time.monotonic() - self.started < self.delay or self.done >= self.total:
                return
            self._bar = click.progressbar(
                length=self.total, label="Linting", file=self.stream, show_pos=True, show_eta=True
            )
            self._bar.__enter__()
            self._bar.update(self.done)
        else:
            self._bar.update(n)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.__exit__(None, None, None)
            self._bar = None


def progress_for(quiet: bool, stream: Optional[IO[str]] = None):
    """A factory of progress bars for `runner.run`, or None when nothing may be drawn:
    with --quiet, or when stderr is not a terminal (piped, redirected, CI logs)."""
    stream = stream if stream is not None else sys.stderr
    if quiet or not _isatty(stream):
        return None
    return lambda total: Progress(total, stream)


def _isatty(stream: IO[str]) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
