"""The parser and dedup stages run inside a cluster fetcher (``parse_inline``).

A fetcher that stored a page parses it at once, while its response is still in memory,
judges it for near-duplicates, publishes its outlinks and page record, and sends the
verdict to the frontier with the fetch result. Against separate parser and dedup
services this saves, per page, two topics (parsed and status: two messages produced
and two consumed), reading the response back from the WARC file, and a second store
write of the URL's row in the frontier. The stages are the same classes as in embedded
mode and in the separate services; only where they run differs. The composition lives
here, beside embedded mode's, so the service packages never import each other.
"""

from __future__ import annotations

from common.archive import ArchiveWriter
from common.messages import FetchResult, StatusUpdate
from common.metrics import Metrics
from common.pagework import PageWork
from common.ports import BlobStore, Bus, StateStore
from common.settings import Settings
from dedup.service import DedupStage
from fetcher.service import PageJudge
from parser.service import ParserStage


def page_judge(settings: Settings, bus: Bus, store: StateStore, blobs: BlobStore,
               archive: ArchiveWriter, work: PageWork, metrics: Metrics,
               sitemap_work: PageWork | None = None) -> PageJudge:
    """Parse a stored page (``work``: where the fetcher wrote it, so the response is
    recalled from memory), judge it, and return its verdict (the fetcher turns a
    failure that is not an outage into a parse_error verdict). With rendering on, a page
    the render rules choose goes to the render service instead (no verdict here).
    Sitemap files are read in ``sitemap_work`` where given (:mod:`common.sitemap_work`)."""
    parser = ParserStage(settings, bus, blobs, archive, metrics=metrics, work=work,
                         defer_render=settings.render.enabled,
                         control=store if settings.render.enabled else None,
                         sitemap_work=sitemap_work)
    # a unique page's near-duplicate index entries go with its verdict in the fetch
    # result, and its frontier owner writes them in the result's store write
    dedup = DedupStage(settings, bus, store, metrics=metrics,
                       link_linger=settings.dedup.link_linger, defer_index=True)

    async def judge(result: FetchResult) -> StatusUpdate | None:
        assert result.record is not None
        page = await parser.parse(result, result.record)
        if page is None:
            return None  # the render service sends its verdict (topic status)
        return await dedup.judge(page)

    return judge
