"""The log filter of the HTTP servers: a malformed request is one rate-limited line."""

from __future__ import annotations

import logging
import sys

import pytest
from aiohttp.http_exceptions import BadHttpMessage, LineTooLong
from aiohttp.web_protocol import RequestPayloadError

from common.httplog import BadRequestFilter, server_logger


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _record(exc: BaseException | None, level: int = logging.ERROR,
            msg: str = "Error handling request from %s") -> logging.LogRecord:
    info = (type(exc), exc, exc.__traceback__) if exc is not None else None
    args = ("10.0.0.1",) if "%s" in msg else ()
    return logging.LogRecord("crawler.api.http", level, __file__, 1, msg, args, info)


def _raised(exc: BaseException) -> BaseException:
    try:
        raise exc
    except BaseException as caught:
        return caught


def test_a_malformed_request_becomes_one_warning_line_without_the_bytes() -> None:
    f = BadRequestFilter(clock=Clock())
    record = _record(_raised(LineTooLong(b"Bearer s3cr3t...", "8190")))
    assert f.filter(record)
    assert record.levelno == logging.WARNING and record.levelname == "WARNING"
    assert record.exc_info is None and record.exc_text is None
    text = record.getMessage()
    assert text == ("Error handling request from 10.0.0.1: malformed HTTP request "
                    "(LineTooLong)")
    assert "s3cr3t" not in text


def test_a_debug_record_stays_debug() -> None:
    record = _record(_raised(BadHttpMessage("x")), level=logging.DEBUG)
    assert BadRequestFilter(clock=Clock()).filter(record)
    assert record.levelno == logging.DEBUG and record.exc_info is None


def test_a_body_error_caused_by_the_parser_counts_as_malformed() -> None:
    try:
        try:
            raise BadHttpMessage("Can not decode content-encoding: gzip")
        except BadHttpMessage as inner:
            raise RequestPayloadError("bad body") from inner
    except RequestPayloadError as exc:
        record = _record(exc, msg="Unhandled exception")
    assert BadRequestFilter(clock=Clock()).filter(record)
    assert record.exc_info is None
    assert record.getMessage() == "Unhandled exception: malformed HTTP request " \
                                  "(RequestPayloadError)"


@pytest.mark.parametrize("exc", [None, RuntimeError("a bug in a handler"),
                                 ValueError("not HTTP")])
def test_other_records_pass_unchanged(exc: BaseException | None) -> None:
    f = BadRequestFilter(burst=1, clock=Clock())
    for _ in range(5):
        record = _record(_raised(exc) if exc is not None else None)
        assert f.filter(record)
        assert record.levelno == logging.ERROR
        assert (record.exc_info is None) == (exc is None)


def test_lines_are_limited_per_interval_and_the_left_out_are_counted() -> None:
    clock = Clock()
    f = BadRequestFilter(burst=3, interval=60.0, clock=clock)
    kept = [f.filter(_record(_raised(BadHttpMessage("x")))) for _ in range(50)]
    assert kept == [True] * 3 + [False] * 47
    assert f.suppressed == 47
    clock.now += 59.0
    assert not f.filter(_record(_raised(BadHttpMessage("x"))))
    clock.now += 1.0  # a new interval
    record = _record(_raised(BadHttpMessage("x")))
    assert f.filter(record)
    assert record.getMessage().endswith("; 48 more not logged")
    assert f.suppressed == 0


def test_server_logger_adds_its_filter_once() -> None:
    name = f"test.httplog.{id(sys)}"
    logger = server_logger(name)
    assert server_logger(name) is logger
    assert sum(isinstance(f, BadRequestFilter) for f in logger.filters) == 1
    logger.filters.clear()


def test_bad_limits_are_refused() -> None:
    with pytest.raises(ValueError, match="burst must be at least 1"):
        BadRequestFilter(burst=0)
    with pytest.raises(ValueError, match="burst must be at least 1"):
        BadRequestFilter(interval=0)
