"""A small HTTP client of the control API, for the ``crawler`` command."""

from __future__ import annotations

from typing import Any

import aiohttp
import msgspec

TIMEOUT = aiohttp.ClientTimeout(total=60)


class ApiCallError(Exception):
    """The API answered with an error, or could not be reached."""


async def call(base_url: str, token: str, method: str, path: str,
               body: Any = None) -> Any:
    """``method path`` with the bearer token; returns the decoded JSON answer."""
    url = base_url.rstrip("/") + path
    headers = {"Authorization": f"Bearer {token}"}
    data = None if body is None else msgspec.json.encode(body)
    if data is not None:
        headers["Content-Type"] = "application/json"
    try:
        async with aiohttp.ClientSession(timeout=TIMEOUT) as session, \
                session.request(method, url, data=data, headers=headers) as resp:
            raw = await resp.read()
            status = resp.status
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise ApiCallError(f"{method} {url}: {exc or type(exc).__name__}") from None
    try:
        answer = msgspec.json.decode(raw) if raw else None
    except msgspec.DecodeError:
        answer = None
    if status >= 400:
        message = answer.get("error") if isinstance(answer, dict) else None
        raise ApiCallError(f"{method} {url}: HTTP {status}: "
                           f"{message or raw[:200].decode(errors='replace')}")
    return answer
