"""The simulated web's clock: the wall clock plus an offset a test or a simulation moves.

Pages with ``change_every`` (see :class:`simweb.model.Page`) change on this clock. The
offset is the number of seconds held in a file (the same file the crawler reads with
``CRAWLER_CRAWL_CLOCK_OFFSET_FILE``), so both sides move through simulated days
together without sleeping. The file is looked at on every call and read again when it
changed; a missing file or one without a number means no offset. It mirrors the
crawler's ``common.clock.OffsetClock`` on purpose rather than importing it: the
simulated web shares no code with the crawler it is there to test.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path


class FileOffsetClock:
    """``time.time()`` plus the seconds held in ``path``."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        self._stamp: tuple[int, int, int] | None = None
        self._offset = 0.0

    def offset(self) -> float:
        try:
            st = os.stat(self.path)
        except OSError:
            return self._offset
        stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
        if stamp != self._stamp:
            try:
                text = Path(self.path).read_text().strip()
                self._offset = float(text) if text else 0.0
            except (OSError, ValueError):
                return self._offset
            self._stamp = stamp
        return self._offset

    def __call__(self) -> float:
        return time.time() + self.offset()


def clock_for(path: str | None) -> Callable[[], float]:
    """The clock of a simulated web: with an offset file, :class:`FileOffsetClock`."""
    return FileOffsetClock(path) if path else time.time
