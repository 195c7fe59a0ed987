"""Logging for this project's aiohttp servers (the control API, the metrics server).

aiohttp answers a malformed request (a header line over 8190 bytes, raw ``\\xff`` or
non-ASCII bytes in the path, Content-Length with Transfer-Encoding, a bad version) with
400, and logs ``Error handling request`` at ERROR with the parser's traceback, whose
text quotes the offending bytes; a body it cannot decode (bad chunks, bad gzip) that it
reads to the end after the handler answered is an ``Unhandled exception`` traceback.
Anyone who can reach the port could fill the log, and a long Authorization header
would land in it. :func:`server_logger` gives the logger
to pass as ``AppRunner(..., logger=...)``: such a record becomes one WARNING line that
names the client, the status and the error's type (never the bytes), at most ``burst``
lines every ``interval`` seconds; the next line that gets through says how many were
left out. Every other record (a failure of the server itself) is logged unchanged.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestPayloadError

__all__ = ["BadRequestFilter", "server_logger"]

BURST = 10  # lines at most ...
INTERVAL = 60.0  # ... per this many seconds


class BadRequestFilter(logging.Filter):
    """Turns a record of a malformed request into one rate-limited line, or drops it."""

    def __init__(self, *, burst: int = BURST, interval: float = INTERVAL,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        if burst < 1 or interval <= 0:
            raise ValueError("burst must be at least 1 and interval positive")
        self.burst = burst
        self.interval = interval
        self._clock = clock
        self._lock = threading.Lock()
        self._window_start: float | None = None
        self._logged = 0  # lines let through in the current window
        self.suppressed = 0  # records dropped since the last line let through

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if exc is None or not _malformed(exc):
            return True
        now = self._clock()
        with self._lock:
            if self._window_start is None or now - self._window_start >= self.interval:
                self._window_start = now
                self._logged = 0
            if self._logged >= self.burst:
                self.suppressed += 1
                return False
            self._logged += 1
            left_out, self.suppressed = self.suppressed, 0
        try:
            what = record.getMessage()  # "Error handling request from <address>"
        except Exception:  # never let logging turn a 400 into a 500
            what = "malformed HTTP request"
        record.msg = "%s: malformed HTTP request (%s)%s"
        record.args = (what, type(exc).__name__,
                       f"; {left_out} more not logged" if left_out else "")
        record.exc_info = None
        record.exc_text = None
        record.stack_info = None
        if record.levelno > logging.WARNING:
            record.levelno = logging.WARNING
            record.levelname = logging.getLevelName(logging.WARNING)
        return True


def _malformed(exc: BaseException) -> bool:
    """A parser error about the request (in the head, or in a body that aiohttp reads
    to its end after the handler answered: RequestPayloadError caused by one)."""
    for _ in range(4):  # the error, its cause, ...
        if isinstance(exc, HttpProcessingError | RequestPayloadError):
            return True
        cause = exc.__cause__ or exc.__context__
        if cause is None:
            return False
        exc = cause
    return False


def server_logger(name: str, *, burst: int = BURST, interval: float = INTERVAL) -> logging.Logger:
    """The logger ``name`` with one :class:`BadRequestFilter` (added once)."""
    logger = logging.getLogger(name)
    if not any(isinstance(f, BadRequestFilter) for f in logger.filters):
        logger.addFilter(BadRequestFilter(burst=burst, interval=interval))
    return logger
