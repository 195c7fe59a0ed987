"""Where a cluster service reads sitemap files: a worker process of their own.

A service in cluster mode runs its page work on threads (:class:`common.pagework.ThreadPageWork`),
which have no time limit and share the service's memory. Reading a sitemap is bounded by
:mod:`common.sitemaps`, but a file of 50 MB still costs seconds and some hundred MiB,
and a bug in a bound would cost the whole service: a fetcher killed for memory, and the
task delivered again to kill the next one. So the fetcher (which parses inline) and the
parser read sitemaps in a lane of one worker process (:func:`sitemap_work`):

- the job has the page-job time limit (``CRAWLER_CRAWL_PAGE_JOB_TIMEOUT``): a read
  running longer is abandoned, the worker killed and replaced, and the sitemap recorded
  as ``parse_timeout``;
- the worker caps its own address space at what it has when set up plus
  :data:`ADDRESS_SPACE_HEADROOM` (``RLIMIT_AS``), so a read that asks for more fails
  with MemoryError, recorded as ``parse_error``, instead of growing the service's
  container into an out-of-memory kill; and it offers itself first to the kernel's
  out-of-memory killer (``oom_score_adj``), should the container run short anyway;
- the worker only reads: the service loads the stored body (from its memory of recent
  responses, or the blob store) and sends it, so the worker writes no file and keeps
  no blob store of its own beyond an unused local one.

The worker starts with the first sitemap, not with the service.
"""

from __future__ import annotations

import contextlib
import logging
import resource

from common.pagework import ProcessPageWork, WorkContext
from common.runtime import blob_root
from common.settings import Settings
from common.sitemaps import SitemapRead, read_sitemap

log = logging.getLogger(__name__)

LANE = "sitemap"
#: Address space a sitemap worker may take beyond what it has once set up: the body
#: (up to 50 MB, held twice while it arrives), 50,000 URLs of up to 2 KB and their
#: answer (about 100 MB each), with room to spare
ADDRESS_SPACE_HEADROOM = 768 * 1024 * 1024


def sitemap_work(settings: Settings, writer: str) -> ProcessPageWork:
    """One worker process, started on the first job, for :func:`read_job`. Its blob
    store is local whatever the settings say (it writes nothing, and a second S3
    uploader in the service's spool folder would compete with the service's own)."""
    local = settings.replace(blob={"backend": "local"})
    return ProcessPageWork(local, processes=1, root=str(blob_root(settings)),
                           writer=f"{writer}-{LANE}", cdx_name=f"index-{writer}-{LANE}.cdxj",
                           lanes=(LANE,), keep_recent=0, preload={LANE: (__name__,)})


def read_job(ctx: WorkContext, body: bytes, sitemap_url: str, *, now: float,
             vouched: frozenset[str]) -> SitemapRead:
    """Page work: read a sitemap body with the settings' caps."""
    sm = ctx.settings.sitemaps
    return read_sitemap(body, sitemap_url, now=now, vouched=vouched, max_urls=sm.max_urls,
                        max_bytes=sm.max_bytes, max_sitemaps=sm.max_files_per_host)


def address_space() -> int | None:
    """This process's address space in bytes (``/proc/self/statm``); None where unknown."""
    try:
        with open("/proc/self/statm", "rb") as f:
            pages = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return pages * resource.getpagesize()


def cap_address_space(headroom: int = ADDRESS_SPACE_HEADROOM) -> int | None:
    """Limit this process's address space to what it has now plus ``headroom`` (never
    above a hard limit set already); the limit set, or None where it could not be."""
    now = address_space()
    if now is None:
        return None
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = now + headroom
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    try:
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    except (ValueError, OSError) as exc:
        log.warning("sitemap worker: could not cap its memory: %r", exc)
        return None
    return limit


def warm_up() -> None:
    """Called by the sitemap worker once it imported this module (``preload``), in that
    process only: cap its memory and make it the first choice of the out-of-memory
    killer."""
    cap_address_space()
    with contextlib.suppress(OSError), open("/proc/self/oom_score_adj", "w") as f:
        f.write("1000")
