"""Malformed HTTP requests to the control API and the metrics server, sent as raw
bytes over a socket on loopback: each is answered with a 4xx and logged as one short
line, never a traceback, and a flood of them logs a bounded number of lines."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import pytest
from prometheus_client import CollectorRegistry

from common.adapters.memory_bus import MemoryBus
from common.httplog import BURST, BadRequestFilter
from common.metrics import HealthServer
from common.settings import Settings
from crawler.api import ControlApi

TOKEN = "malformed-test-token"
SECRET_LOOKING = b"Bearer " + b"s3cr3t" * 20_000  # a 120 KB Authorization header

BAD_REQUESTS: dict[str, tuple[bytes, bytes]] = {  # name: (request, status line start)
    "100 KB Authorization header": (
        b"GET /v1/stats HTTP/1.1\r\nHost: x\r\nAuthorization: " + SECRET_LOOKING
        + b"\r\n\r\n", b"HTTP/1.0 400"),
    "raw \\xff bytes in the path": (
        b"GET /v1/\xff\xfe HTTP/1.1\r\nHost: x\r\n\r\n", b"HTTP/1.0 400"),
    "non-ASCII path": ("GET /v1/hosts/bücher.de HTTP/1.1\r\nHost: x\r\n\r\n".encode(),
                       b"HTTP/1.0 400"),
    "Content-Length with Transfer-Encoding": (
        b"POST /v1/seeds HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n", b"HTTP/1.0 400"),
    "bad chunk size": (
        b"POST /v1/seeds HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"zz\r\nabc\r\n0\r\n\r\n", b"HTTP/1.0 400"),
    "unknown HTTP version": (b"GET /v1/health HTTP/9.9\r\nHost: x\r\n\r\n", b"HTTP/1.0 400"),
    "body that is not the gzip it claims": (  # answered 401, then read to its end
        b"POST /v1/seeds HTTP/1.1\r\nHost: x\r\nContent-Encoding: gzip\r\n"
        b"Content-Length: 3\r\n\r\nabc", b"HTTP/1.1 401"),
}


async def send_raw(port: int, request: bytes) -> bytes:
    """Send ``request`` and return everything the server wrote before closing."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request)
        await writer.drain()
        out = b""
        async with asyncio.timeout(10):
            while chunk := await reader.read(65536):
                out += chunk
                if b"401" in out[:20] and b"\r\n\r\n" in out:  # a keep-alive answer
                    break
        return out
    finally:
        writer.close()
        await writer.wait_closed()


def _logged_lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    # the control API logs its own start and stop at INFO; every other line counts
    return [r for r in caplog.records if r.levelno >= logging.WARNING]


def _check_no_tracebacks(caplog: pytest.LogCaptureFixture) -> None:
    for record in caplog.records:
        assert record.exc_info is None and record.exc_text is None, (
            f"{record.name}: {record.getMessage()} logged with a traceback")
        assert record.levelno < logging.ERROR, f"{record.name}: {record.getMessage()}"
        assert "s3cr3t" not in record.getMessage()  # the header's bytes stay out



@pytest.fixture(params=["control API", "metrics server"])
async def server(request: pytest.FixtureRequest,
                 monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[tuple[str, int]]:
    """A server on 127.0.0.1 whose bad-request log budget starts full."""
    name: str = request.param
    logger = logging.getLogger("crawler.api.http" if name == "control API"
                               else "common.metrics.http")
    # a filter of our own, so the budget of other tests in this process does not count
    monkeypatch.setattr(logger, "filters", [BadRequestFilter()])
    if name == "control API":
        settings = Settings().replace(api={"token": TOKEN, "host": "127.0.0.1"})
        api = ControlApi(settings, MemoryBus(), store=None)  # type: ignore[arg-type]
        await api.start("127.0.0.1", 0)
        try:
            yield name, api.port
        finally:
            await api.stop()
    else:
        health = HealthServer(CollectorRegistry(), ready=lambda: True)
        await health.start("127.0.0.1", 0)
        try:
            yield name, health.port
        finally:
            await health.stop()


@pytest.mark.parametrize("case", list(BAD_REQUESTS))
async def test_a_malformed_request_is_a_4xx_and_one_line_without_traceback(
        server: tuple[str, int], case: str, caplog: pytest.LogCaptureFixture) -> None:
    name, port = server
    request, status = BAD_REQUESTS[case]
    with caplog.at_level(logging.DEBUG):
        answer = await send_raw(port, request)
        await asyncio.sleep(0.05)  # the server logs after it answered
    if name == "metrics server" and status.endswith(b"401"):
        status = b"HTTP/1.1 404"  # no such route there, no token either
    assert answer.startswith(status), answer[:100]
    _check_no_tracebacks(caplog)
    lines = _logged_lines(caplog)
    assert len(lines) == 1, [r.getMessage() for r in lines]
    assert lines[0].levelno == logging.WARNING
    assert "malformed HTTP request" in lines[0].getMessage()


async def test_many_malformed_requests_log_a_bounded_number_of_lines(
        server: tuple[str, int], caplog: pytest.LogCaptureFixture) -> None:
    _, port = server
    requests = [request for request, _ in BAD_REQUESTS.values()] * 10
    with caplog.at_level(logging.DEBUG):
        for request in requests:
            await send_raw(port, request)
        await asyncio.sleep(0.05)
    _check_no_tracebacks(caplog)
    lines = _logged_lines(caplog)
    assert 1 <= len(lines) <= BURST < len(requests), [r.getMessage() for r in lines]
