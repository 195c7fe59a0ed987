"""The proxy trap's label for what reached it (pure), and the trap itself on loopback."""

from __future__ import annotations

import asyncio

import pytest

from render.browser import ProxyTrap, trap_source


@pytest.mark.parametrize(("line", "source"), [
    ("CONNECT accounts.google.com:443 HTTP/1.1", "browser_services"),
    ("POST http://update.googleapis.com/service/update2/json?x=1 HTTP/1.1",
     "browser_services"),
    ("GET http://clients2.google.com/time/1/current HTTP/1.1", "browser_services"),
    ("CONNECT spa.test:443 HTTP/1.1", "other"),
    ("CONNECT notgoogle.com:443 HTTP/1.1", "other"),
    ("GET http://google.com.evil.test/ HTTP/1.1", "other"),
    ("POST http://127.0.0.2:8080/beacon HTTP/1.1", "other"),
    ("CONNECT [::1]:443 HTTP/1.1", "other"),
    ("(no request line)", "other"),
    ("", "other"),
])
def test_trap_source(line: str, source: str) -> None:
    assert trap_source(line) == source


async def test_the_trap_refuses_and_counts_what_arrives() -> None:
    seen: list[str] = []
    trap = ProxyTrap(on_refused=seen.append)
    port = await trap.start()
    try:
        for request in (b"GET http://127.0.0.2/ HTTP/1.1\r\nHost: 127.0.0.2\r\n\r\n",
                        b"CONNECT www.google.com:443 HTTP/1.1\r\n\r\n"):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(request)
            answer = await asyncio.wait_for(reader.read(), 5)
            writer.close()
            assert answer.startswith(b"HTTP/1.1 403 "), answer
        for _ in range(100):
            if trap.refused == 2 and len(seen) == 2:
                break
            await asyncio.sleep(0.02)
    finally:
        await trap.close()
    assert trap.refused == 2
    assert seen == ["other", "browser_services"]
    assert trap.refused_by == {"other": 1, "browser_services": 1}
