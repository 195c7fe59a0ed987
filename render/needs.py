"""What the render stage needs of the fetcher's parts, as protocols.

The renderer sends a page's subresource requests through the crawler's own HTTP
client (SSRF guard, size caps, time-outs), robots.txt cache and per-host gate; the
composition root (:mod:`crawler.embedded`, :mod:`crawler.roles.render`) hands it the
fetcher's objects. This stage names only the few members it calls, so it imports no
other stage.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from typing import Protocol

from common.messages import FetchOutcome


class Fetched(Protocol):
    """A response of the crawler's HTTP client (:class:`fetcher.http.Response`)."""

    @property
    def outcome(self) -> FetchOutcome: ...

    @property
    def status(self) -> int: ...

    @property
    def headers(self) -> tuple[tuple[str, str], ...]: ...

    @property
    def body(self) -> bytes: ...

    @property
    def truncated(self) -> object | None: ...

    @property
    def fetched_at(self) -> float: ...


class Http(Protocol):
    """The crawler's HTTP client (:class:`fetcher.http.HttpFetcher`)."""

    async def ssrf_refusal(self, url: str) -> str | None: ...

    async def fetch(self, url: str, *, accept_types: Sequence[str] | None = None
                    ) -> Fetched: ...


class RobotsRule(Protocol):
    """One origin's robots.txt answer (:class:`fetcher.robots_cache.RobotsDecision`)."""

    @property
    def fetched(self) -> bool: ...

    @property
    def fetched_at(self) -> float: ...

    @property
    def available(self) -> bool: ...

    def allowed(self, url: str) -> bool: ...


class Robots(Protocol):
    """The robots.txt cache (:class:`fetcher.robots_cache.RobotsCache`)."""

    async def for_url(self, url: str) -> RobotsRule: ...


class Gate(Protocol):
    """A per-host politeness gate (:class:`fetcher.gate.HostGate`)."""

    def done(self, host: str, ended_at: float, delay: float) -> None: ...

    def hold(self, host: str) -> AbstractAsyncContextManager[None]: ...

    async def wait(self, host: str, partition: int | None, delay: float) -> None: ...
