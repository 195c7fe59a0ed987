"""Shared pieces of the behaviour end-to-end tests: small scenarios, settings for short
crawls over loopback, and a read-back of everything the crawl recorded.

Each behaviour test starts the simulated web with its DNS responder, crawls it with
the embedded crawler and then looks from both sides: the crawler's url_state and hosts
rows (read from the SQLite state in the output folder) and the simulated web's request
log (what really reached the server, with server-side times).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from warcio.archiveiterator import ArchiveIterator

from common.adapters.sqlite_store import SqliteStateStore
from common.messages import Reason, UrlStatus
from common.ports import HostState, UrlState
from common.settings import Settings
from crawler.embedded import blob_root, crawl, state_path
from frontier.stats import CrawlStats
from simweb import Host, Page, SimWeb
from simweb.log import RequestRecord
from simweb.model import Robots, Scenario

DELAY = 0.05
"""Politeness gap of these tests (seconds): short, yet measurable at the server."""

BASE: dict[str, dict[str, Any]] = {
    "politeness": {"default_delay": DELAY, "response_time_factor": 0.0,
                   "backoff_base": 0.1, "backoff_max": 0.5, "max_attempts": 3},
    "fetcher": {"connect_timeout": 1.0, "total_timeout": 3.0},
}


def scenario(*hosts: Host, name: str = "behaviour") -> Scenario:
    """A scenario of ``hosts`` (seeds are passed to the crawl, not kept here)."""
    return Scenario(name=name, seed=11, hosts=tuple(hosts), dns_ttl=60)


def host(name: str, *pages: Page, robots: Robots | None = None, **kwargs: Any) -> Host:
    return Host(name=name, robots=robots or Robots(), pages=tuple(pages), **kwargs)


def settings_for(web: SimWeb, out: Path, **sections: Mapping[str, Any]) -> Settings:
    """Settings for a short loopback crawl; ``sections`` override :data:`BASE`."""
    merged: dict[str, dict[str, Any]] = {k: dict(v) for k, v in BASE.items()}
    for name, values in sections.items():
        merged.setdefault(name, {}).update(values)
    merged.setdefault("crawl", {})["out_dir"] = str(out)
    merged["fetcher"].update({"dns_servers": tuple(web.dns_servers),
                              "allow_networks": ("127.0.0.1/32",)})
    return Settings().replace(**merged)


@dataclass(slots=True)
class Outcome:
    """What one crawl run left behind."""

    stats: CrawlStats
    rows: dict[str, UrlState]  # canonical URL -> row
    hosts: dict[str, HostState]  # host key -> row
    settings: Settings

    def row(self, url: str) -> UrlState:
        assert url in self.rows, f"no url_state row for {url}; rows: {sorted(self.rows)}"
        return self.rows[url]

    def with_reason(self, reason: Reason) -> list[UrlState]:
        return [r for r in self.rows.values() if r.reason is reason]

    def with_status(self, status: UrlStatus) -> list[UrlState]:
        return [r for r in self.rows.values() if r.status is status]

    def pages(self) -> list[dict[str, Any]]:
        """The page records (pages.jsonl)."""
        import json

        path = blob_root(self.settings) / "pages.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line]

    def warc(self) -> list[WarcRecord]:
        """Records of the page archive (not the text files), in file order."""
        return warc_records(blob_root(self.settings))

    def texts(self, media: str = "text/plain") -> dict[str, str]:
        """Extracted text by URL (the conversion records of the text files of type
        ``media``: text/plain, or text/markdown for the Markdown records)."""
        out: dict[str, str] = {}
        for path in sorted(blob_root(self.settings).glob("*-text-*.warc.gz")):
            with path.open("rb") as fh:
                for rec in ArchiveIterator(fh):
                    kind = rec.rec_headers.get_header("Content-Type") or ""
                    if rec.rec_type == "conversion" and kind.startswith(media):
                        uri = rec.rec_headers.get_header("WARC-Target-URI") or ""
                        out[uri] = rec.content_stream().read().decode("utf-8")
        return out


@dataclass(frozen=True, slots=True)
class WarcRecord:
    type: str
    uri: str
    headers: dict[str, str]  # WARC headers
    http_status: int | None
    http_headers: dict[str, str]


def warc_records(root: Path) -> list[WarcRecord]:
    out: list[WarcRecord] = []
    for path in sorted(root.glob("*.warc.gz")):
        if "-text-" in path.name:
            continue
        with path.open("rb") as fh:
            for rec in ArchiveIterator(fh):
                http = rec.http_headers
                status = None
                if http is not None and rec.rec_type in ("response", "revisit"):
                    code = http.get_statuscode()
                    status = int(code) if code and code.isdigit() else None
                out.append(WarcRecord(
                    type=rec.rec_type, uri=rec.rec_headers.get_header("WARC-Target-URI") or "",
                    headers=dict(rec.rec_headers.headers), http_status=status,
                    http_headers=dict(http.headers) if http is not None else {}))
    return out


async def read_state(settings: Settings) -> tuple[dict[str, UrlState], dict[str, HostState]]:
    store = SqliteStateStore(state_path(settings))
    await store.open()
    try:
        rows: dict[str, UrlState] = {}
        for status in UrlStatus:
            for row in await store.urls_with_status(status, 1_000_000):
                rows[row.url] = row
        hosts = {h.host: h for h in await store.list_hosts()}
    finally:
        await store.close()
    return rows, hosts


async def run(web: SimWeb, out: Path, seeds: Iterable[str],
              **sections: Mapping[str, Any]) -> Outcome:
    """Crawl ``seeds`` (URLs, or 'host/path' without scheme and port) to the end."""
    settings = settings_for(web, out, **sections)
    stats = await crawl(settings, [absolute(web, s) for s in seeds])
    rows, hosts = await read_state(settings)
    return Outcome(stats=stats, rows=rows, hosts=hosts, settings=settings)


async def resume(outcome: Outcome) -> Outcome:
    """Run the crawl in the same output folder again, without new seeds."""
    stats = await crawl(outcome.settings, [])
    rows, hosts = await read_state(outcome.settings)
    return Outcome(stats=stats, rows=rows, hosts=hosts, settings=outcome.settings)


def absolute(web: SimWeb, where: str) -> str:
    """'lab.test/a' -> 'http://lab.test:PORT/a'; full URLs stay as they are."""
    if "://" in where:
        return where
    name, slash, path = where.partition("/")
    return web.url(name, slash + path if slash else "/")


def key(web: SimWeb, where: str) -> str:
    """The canonical URL the crawler keys 'host/path' under."""
    from common import urls

    return urls.canonicalize(absolute(web, where))


def host_key(web: SimWeb, name: str) -> str:
    """The key the crawler keeps ``name``'s hosts row under ('lab.test:PORT')."""
    from common import urls

    return urls.host_key(web.url(name))


def hits(web: SimWeb, name: str, *, robots: bool = False) -> list[RequestRecord]:
    """Requests that reached ``name``, robots.txt left out unless asked for."""
    return [r for r in web.log.records(name) if robots or r.path != "/robots.txt"]


def targets(web: SimWeb, name: str) -> list[str]:
    return [r.target for r in hits(web, name)]


def paths(records: Sequence[RequestRecord]) -> list[str]:
    return [r.path for r in records]
