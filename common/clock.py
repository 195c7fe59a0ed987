"""The crawl's clock: the wall clock, or the wall clock plus an offset read from a file.

Every time the crawler schedules by (politeness timers, fetch times, refresh times,
robots.txt expiry) comes from one clock per process, made by :func:`wall_clock`. With
``crawl.clock_offset_file`` set, the clock adds the number of seconds that file holds
(re-read whenever the file changes), so a test or a simulation moves a crawl through
days by writing a larger number, without sleeping. The simulated web reads the same
file (``simweb --clock-offset-file``), so its pages change on the same clock.

The offset only ever grows: a clock that went back would hold hosts back for as long.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

from common.settings import Settings

Clock = Callable[[], float]


class OffsetClock:
    """``time.time()`` plus the seconds in ``path`` (0 while the file is missing or does
    not hold a number). The file is looked at (one ``stat``) on every call and read
    again when it was replaced or its modification time or size changed."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        self._stamp: tuple[int, int, int] | None = None
        self._offset = 0.0
        self._lock = threading.Lock()

    def offset(self) -> float:
        try:
            st = os.stat(self.path)
        except OSError:
            return self._offset
        stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
        if stamp != self._stamp:
            with self._lock:
                try:
                    text = Path(self.path).read_text().strip()
                    value = float(text) if text else 0.0
                except (OSError, ValueError):
                    return self._offset
                self._offset = max(self._offset, value)  # never backwards
                self._stamp = stamp
        return self._offset

    def __call__(self) -> float:
        return time.time() + self.offset()


def wall_clock(settings: Settings) -> Clock:
    """The clock of a crawl with ``settings``."""
    path = settings.crawl.clock_offset_file
    return OffsetClock(path) if path else time.time


def set_offset(path: str | Path, seconds: float) -> None:
    """Write ``seconds`` as the offset (atomically: readers see the old or the new
    number, never a part)."""
    target = Path(path)
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_text(repr(float(seconds)))
    os.replace(tmp, target)
