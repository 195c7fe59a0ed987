"""What the rendering tests share (end to end and in a cluster): the browser check and
the 127.0.0.2 listener the SSRF guard must keep every browser request away from."""

from __future__ import annotations

import asyncio
from typing import Any

from render.browser import find_browser
from tests.conftest import unavailable


def require_browser() -> None:
    """Skip (fail under CI=true) without Debian's Chromium or the Playwright driver."""
    if find_browser() is None:
        unavailable("chromium not installed (scripts/apt-install chromium)")
    try:
        import playwright.async_api  # noqa: F401
    except ImportError:
        unavailable("playwright not installed (pip install -e '.[render]')")


class ForbiddenListener:
    """A TCP listener on 127.0.0.2 that counts connections (it must see none)."""

    def __init__(self) -> None:
        self.connections = 0
        self.server: asyncio.Server | None = None

    async def start(self) -> int:
        async def accept(_r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            self.connections += 1
            w.close()

        self.server = await asyncio.start_server(accept, "127.0.0.2", 0)
        return int(self.server.sockets[0].getsockname()[1])

    async def stop(self) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()


class ForbiddenUdp(asyncio.DatagramProtocol):
    """A UDP socket on 127.0.0.2 that counts datagrams (WebRTC's STUN must send none)."""

    def __init__(self) -> None:
        self.datagrams = 0
        self.transport: asyncio.DatagramTransport | None = None

    def datagram_received(self, data: bytes, addr: tuple[str | Any, int]) -> None:
        self.datagrams += 1

    async def start(self, port: int = 0) -> int:
        loop = asyncio.get_running_loop()
        transport, _ = await loop.create_datagram_endpoint(lambda: self,
                                                           local_addr=("127.0.0.2", port))
        self.transport = transport
        return int(transport.get_extra_info("sockname")[1])

    def stop(self) -> None:
        if self.transport is not None:
            self.transport.close()
