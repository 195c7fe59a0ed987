"""The fetcher's page job: writing one exchange's WARC records in a page worker.

It lives apart from :mod:`fetcher.service` so that whatever runs the job imports the
archive and not the HTTP client, the DNS resolver and the rest of the stage: a job
crosses to a worker process by its module's name, and the worker imports that module.
Embedded mode's main process and the cluster fetcher write records on threads and call
:func:`warm_up` before their first one.
"""

from __future__ import annotations

from common.archive import Truncation, Written
from common.archive import warm_up as _warm_archive
from common.pagework import WorkContext


def warm_up() -> None:
    """Called by a page worker after it imported this module (``preload``), and by a
    fetcher before it reports ready: the archive's index library is loaded before the
    first record, not in it."""
    _warm_archive()


def write_exchange_job(ctx: WorkContext, *, url: str, request_headers: list[tuple[str, str]],
                       status: int, reason: str, response_headers: list[tuple[str, str]],
                       body: bytes, fetched_at: float, ip: str | None, http_version: str,
                       metadata: dict[str, object],
                       truncated: Truncation | None = None) -> Written:
    """Page work: the request, response and metadata records of one GET exchange."""
    return ctx.archive.write_exchange(
        url=url, method="GET", request_headers=request_headers, status=status,
        reason=reason, response_headers=response_headers, body=body,
        fetched_at=fetched_at, ip=ip, http_version=http_version, metadata=metadata,
        remember=ctx.keeper, truncated=truncated)
