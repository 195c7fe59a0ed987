"""The /metrics, /healthz and /readyz endpoints over real HTTP on loopback."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from common.messages import FetchOutcome
from common.metrics import HealthServer, Metrics, serve_health
from common.settings import MetricsSettings


class Flag:
    def __init__(self, value: bool) -> None:
        self.value = value

    def __call__(self) -> bool:
        return self.value


@pytest.fixture
async def client() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        yield session


async def _get(client: aiohttp.ClientSession, url: str,
               accept: str | None = None) -> tuple[int, str, str]:
    headers = {"Accept": accept} if accept else {}
    async with client.get(url, headers=headers) as resp:
        return resp.status, resp.headers.get("Content-Type", ""), await resp.text()


async def test_metrics_health_and_readiness(client: aiohttp.ClientSession) -> None:
    metrics = Metrics.create(("fetcher",))
    metrics.fetcher.record_fetch(404, FetchOutcome.HTTP_ERROR, nbytes=12, seconds=0.05)
    ready = Flag(False)
    async with HealthServer(metrics.registry, ready=ready) as server:
        await server.start("127.0.0.1", 0)
        base = f"http://127.0.0.1:{server.port}"

        status, ctype, body = await _get(client, base + "/metrics")
        assert status == 200
        assert ctype.startswith("text/plain")
        samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
                   for fam in text_string_to_metric_families(body) for s in fam.samples}
        key = ("crawler_fetcher_pages_fetched_total",
               (("outcome", "http_error"), ("status_class", "4xx")))
        assert samples[key] == 1
        assert ("process_resident_memory_bytes", ()) in samples

        assert (await _get(client, base + "/healthz"))[0] == 200
        status, _, text = await _get(client, base + "/readyz")
        assert (status, text.strip()) == (503, "not ready")
        ready.value = True
        status, _, text = await _get(client, base + "/readyz")
        assert (status, text.strip()) == (200, "ok")
        assert (await _get(client, base + "/nope"))[0] == 404


async def test_openmetrics_when_asked(client: aiohttp.ClientSession) -> None:
    metrics = Metrics.create(("dedup",), process=False)
    metrics.dedup.unique_pages.inc(3)
    async with HealthServer(metrics.registry, ready=lambda: True) as server:
        await server.start("127.0.0.1", 0)
        status, ctype, body = await _get(
            client, f"http://127.0.0.1:{server.port}/metrics",
            accept="application/openmetrics-text; version=1.0.0")
    assert status == 200
    assert ctype.startswith("application/openmetrics-text")
    assert "crawler_dedup_unique_pages_total 3.0" in body
    assert body.rstrip().endswith("# EOF")


async def test_failing_checks_answer_503_and_do_not_crash(
        client: aiohttp.ClientSession) -> None:
    def broken() -> bool:
        raise RuntimeError("store gone")

    metrics = Metrics.create((), process=False)
    alive = Flag(True)
    async with HealthServer(metrics.registry, ready=broken, alive=alive) as server:
        await server.start("127.0.0.1", 0)
        base = f"http://127.0.0.1:{server.port}"
        status, _, text = await _get(client, base + "/readyz")
        assert status == 503
        assert "RuntimeError" in text
        assert (await _get(client, base + "/healthz"))[0] == 200
        alive.value = False
        assert (await _get(client, base + "/healthz"))[0] == 503
        assert (await _get(client, base + "/metrics"))[0] == 200


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_serve_health_from_settings(client: aiohttp.ClientSession) -> None:
    metrics = Metrics.create(("parser",), process=False)
    assert await serve_health(MetricsSettings(port=0), metrics.registry,
                              ready=lambda: True) is None
    port = _free_port()
    server = await serve_health(MetricsSettings(port=port, host="127.0.0.1"),
                                metrics.registry, ready=lambda: True)
    assert server is not None
    try:
        assert server.port == port
        status, _, body = await _get(client, f"http://127.0.0.1:{port}/metrics")
        assert status == 200
        assert "crawler_parser_pages_parsed_total" in body
    finally:
        await server.stop()
    with pytest.raises(aiohttp.ClientConnectionError):
        await _get(client, f"http://127.0.0.1:{port}/healthz")


async def test_port_in_use_is_a_clear_error() -> None:
    metrics = Metrics.create((), process=False)
    async with HealthServer(metrics.registry, ready=lambda: True) as first:
        await first.start("127.0.0.1", 0)
        second = HealthServer(metrics.registry, ready=lambda: True)
        with pytest.raises(OSError, match=r"address already in use|Errno"):
            await second.start("127.0.0.1", first.port)
        with pytest.raises(RuntimeError, match="not started"):
            _ = second.port
