"""What the simulated web answers: a pure responder, no sockets.

:class:`Site` turns a :class:`SimRequest` (host, target, method, headers) into a
:class:`Reply` (status, headers, body and how slowly to send it). The HTTP server only
carries replies out, so every behaviour can be checked here without a server.

The only state is a visit counter per page (for pages that change between visits or
recover after errors) and a bounded cache of rendered bodies.
"""

from __future__ import annotations

import datetime as dt
import email.utils
import hashlib
import html
import threading
import time
import zlib
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from functools import lru_cache
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from simweb import text
from simweb.model import Host, Page, Scenario, Sitemap, Trap

INDEX_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
"""Host names answered with an index of the scenario's seed URLs."""

HTML_UTF8 = "text/html; charset=utf-8"
_EPOCH = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)
_CACHE_ENTRIES = 4096


@dataclass(frozen=True, slots=True)
class SimRequest:
    """The parts of an HTTP request the simulated web looks at."""

    host: str
    """Host name without port, lower case."""
    target: str
    """Path and query as sent, e.g. '/story/1?utm_source=x'."""
    method: str = "GET"
    headers: Mapping[str, str] | None = None
    """Request headers; names are matched case-insensitively."""

    def header(self, name: str) -> str | None:
        if not self.headers:
            return None
        lname = name.lower()
        for key, value in self.headers.items():
            if key.lower() == lname:
                return value
        return None


@dataclass(frozen=True, slots=True)
class Reply:
    """An answer and how to send it."""

    status: int
    headers: tuple[tuple[str, str], ...]
    """Headers in order; without a Content-Type entry none is sent."""
    body: bytes = b""
    delay: float = 0.0
    """Seconds to wait before the status line."""
    drip_seconds: float = 0.0
    """Seconds to spread the body over (0: send at once)."""
    drip_chunks: int = 1

    def header(self, name: str) -> str | None:
        lname = name.lower()
        for key, value in self.headers:
            if key.lower() == lname:
                return value
        return None


@lru_cache(maxsize=4)
def gzip_bomb(inflated: int) -> bytes:
    """A gzip stream of an HTML page padded with spaces to ``inflated`` bytes.

    Computed once per size; deflate shrinks runs of one byte about a thousand-fold, so
    50 MB inflate from about 50 KB.
    """
    head = b"<!DOCTYPE html>\n<html><head><title>Archive</title></head><body><p>"
    tail = b"</p></body></html>\n"
    fill = max(0, inflated - len(head) - len(tail))
    comp = zlib.compressobj(9, zlib.DEFLATED, 31)
    parts = [comp.compress(head)]
    block = b" " * (1 << 20)
    while fill > 0:
        n = min(fill, len(block))
        parts.append(comp.compress(block[:n]))
        fill -= n
    parts.append(comp.compress(tail))
    parts.append(comp.flush())
    return b"".join(parts)


_SITEMAP_NS = "http://www.sitemaps.org/schemas/sitemap/0.9"
_LAUGHS = ('<!DOCTYPE urlset [<!ENTITY lol "lol">'
           + "".join(f'<!ENTITY lol{i} "{("&lol" + (str(i - 1) if i > 1 else "") + ";") * 10}">'
                     for i in range(1, 10)) + "]>")


def render_sitemap(sitemap: Sitemap, absolutize: Callable[[str], str], base: str) -> bytes:
    """The bytes of a sitemap file: entries made absolute (``base`` for paths, the
    server's port for scenario hosts), gzip-compressed when asked."""
    locs = [html.escape(absolutize(e) if "//" in e else base + e) for e in sitemap.entries]
    mods = list(sitemap.lastmod) + [""] * (len(locs) - len(sitemap.lastmod))
    freqs = list(sitemap.changefreq) + [""] * (len(locs) - len(sitemap.changefreq))
    if sitemap.kind == "text":
        text = "".join(f"{loc}\n" for loc in locs).encode()
    else:
        root, entry = (("sitemapindex", "sitemap") if sitemap.kind == "index"
                       else ("urlset", "url"))
        items = "".join(f"<{entry}><loc>{loc}</loc>"
                        + (f"<lastmod>{mod}</lastmod>" if mod else "")
                        + (f"<changefreq>{freq}</changefreq>" if freq else "")
                        + f"</{entry}>\n"
                        for loc, mod, freq in zip(locs, mods, freqs, strict=True))
        doctype = _LAUGHS if sitemap.kind == "entity_bomb" else ""
        if sitemap.kind == "entity_bomb":
            items += "<url><loc>&lol9;</loc></url>\n"
        text = (f'<?xml version="1.0" encoding="UTF-8"?>\n{doctype}'
                f'<{root} xmlns="{_SITEMAP_NS}">\n{items}').encode()
        if sitemap.kind == "malformed":
            text += b"<url><loc>" + base.encode() + b"/cut-of"
        else:
            text += f"</{root}>\n".encode()
    if not sitemap.gzip:
        return text + b" " * sitemap.pad_bytes
    comp = zlib.compressobj(9, zlib.DEFLATED, 31)
    if sitemap.pad_bytes and sitemap.kind != "text":
        # the padding goes inside the root element, before its end tag
        cut = text.rindex(b"</")
        parts = [comp.compress(text[:cut])]
        block, left = b" " * (1 << 20), sitemap.pad_bytes
        while left > 0:
            parts.append(comp.compress(block[:min(left, len(block))]))
            left -= len(block)
        parts += [comp.compress(text[cut:]), comp.flush()]
        return b"".join(parts)
    return comp.compress(text + b" " * sitemap.pad_bytes) + comp.flush()


def etag_for(body: bytes) -> str:
    return '"' + hashlib.sha256(body).hexdigest()[:24] + '"'


def _etag_matches(header: str, etag: str) -> bool:
    """Weak comparison of If-None-Match against our ETag (RFC 9110 13.1.2)."""
    if header.strip() == "*":
        return True
    ours = etag.removeprefix("W/")
    return any(tag.strip().removeprefix("W/") == ours for tag in header.split(","))


def _parse_http_date(value: str) -> dt.datetime | None:
    try:
        parsed = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.UTC)
    return parsed


class Site:
    """The responder for one scenario served on one port.

    ``port`` is written into absolute links and redirects to scenario hosts (omitted
    when it is None or 80).
    """

    def __init__(self, scenario: Scenario, port: int | None = None, *,
                 clock: Callable[[], float] = time.time) -> None:
        self.scenario = scenario
        self.port = port
        self.clock = clock  # pages with change_every change on it (simweb.clock)
        self._hosts: dict[str, Host] = {h.name: h for h in scenario.hosts}
        self._pages: dict[str, dict[str, Page]] = {h.name: h.page_map() for h in scenario.hosts}
        self._visits: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()
        self._cache: OrderedDict[tuple[str, str, int], bytes] = OrderedDict()

    # --- public -------------------------------------------------------------------

    def respond(self, req: SimRequest) -> Reply:
        """Answer one request and count the visit."""
        host = self._hosts.get(req.host)
        if host is None:
            if req.host in INDEX_HOSTS:
                return self._index()
            return _simple(404, "Unknown host", f"No host {req.host!r} in this web.")
        key = self.visit_key(req.host, req.target)
        with self._lock:
            visit = self._visits.get(key, 0)
            self._visits[key] = visit + 1
        reply = self.render(req.host, req.target, visit=visit, request=req)
        if host.latency:
            reply = replace(reply, delay=reply.delay + host.latency)
        return reply

    def render(self, host_name: str, target: str, *, visit: int = 0,
               request: SimRequest | None = None) -> Reply:
        """The answer to ``target`` on its ``visit``-th request (0-based), counting nothing.

        ``request`` supplies conditional headers (If-None-Match, If-Modified-Since).
        """
        host = self._hosts.get(host_name)
        if host is None:
            return _simple(404, "Unknown host", f"No host {host_name!r} in this web.")
        path = target.split("?", 1)[0]
        page = self._page_for(host_name, target)
        if page is None and path == "/robots.txt":
            return self._robots(host, visit)
        if page is None:
            page = self._trap_page(host, target)
        if page is None:
            return _simple(404, "Not found", f"Nothing at {target}.")
        return self._page_reply(host, page, visit, request)

    def links(self, host_name: str, target: str, *, visit: int = 0) -> list[str]:
        """hrefs written in the body of ``target`` (as served: absolute ones with port).

        Empty for error pages, redirects and verbatim bodies.
        """
        host = self._hosts.get(host_name)
        if host is None:
            return []
        page = self._page_for(host_name, target) or self._trap_page(host, target)
        if page is None or page.body is not None or page.gzip_bomb or page.sitemap:
            return []
        if self._is_error_visit(page, visit) or page.redirect:
            return []
        source = self.content_source(host_name, page)
        return [self.absolutize(h) for h in source.links]

    def location(self, host_name: str, target: str) -> str | None:
        """The redirect target of ``target`` (as served), if it is a redirect."""
        page = self._page_for(host_name, target)
        if page is None or page.redirect is None:
            return None
        return self.absolutize(page.redirect)

    def visits(self, host: str, target: str) -> int:
        """How often the page behind ``target`` was asked for."""
        with self._lock:
            return self._visits.get(self.visit_key(host, target), 0)

    def visit_key(self, host_name: str, target: str) -> tuple[str, str]:
        """Pages count visits by their own path (any query); trap pages and unknown
        targets by the whole target."""
        page = self._page_for(host_name, target)
        return (host_name, page.path if page is not None else target)

    def warm(self) -> None:
        """Build the expensive bodies (compression bombs) ahead of their first request."""
        for host in self.scenario.hosts:
            for page in host.pages:
                if page.gzip_bomb:
                    gzip_bomb(page.gzip_bomb)

    def reset_visits(self) -> None:
        with self._lock:
            self._visits.clear()

    def absolutize(self, url: str) -> str:
        """Give absolute URLs to scenario hosts the server's port; leave others alone."""
        if "//" not in url:
            return url
        parts = urlsplit(url)
        name = (parts.hostname or "").lower()
        if name not in self._hosts or parts.port is not None:
            return url
        if self.port is None or self.port == 80:
            return url
        return urlunsplit((parts.scheme, f"{name}:{self.port}", parts.path, parts.query,
                           parts.fragment))

    def base_url(self, host: str) -> str:
        if self.port is None or self.port == 80:
            return f"http://{host}"
        return f"http://{host}:{self.port}"

    def seed_urls(self) -> list[str]:
        return [self.absolutize(u) for u in self.scenario.seeds]

    def robots_bytes(self, host_name: str) -> bytes:
        """The full robots.txt body of a host (with the oversize padding)."""
        return self._robots(self._hosts[host_name]).body

    # --- lookup -------------------------------------------------------------------

    def _page_for(self, host_name: str, target: str) -> Page | None:
        pages = self._pages.get(host_name, {})
        page = pages.get(target)
        if page is not None:
            return page
        path = target.split("?", 1)[0]
        page = pages.get(path)
        if page is not None and "?" not in page.path:
            return page
        return None

    def page(self, host_name: str, target: str) -> Page | None:
        """The page spec that answers ``target`` (a trap's generated one included)."""
        host = self._hosts.get(host_name)
        if host is None:
            return None
        return self._page_for(host_name, target) or self._trap_page(host, target)

    def _trap_page(self, host: Host, target: str) -> Page | None:
        path = target.split("?", 1)[0]
        for trap in host.traps:
            if path.startswith(trap.prefix) or path == trap.prefix.rstrip("/"):
                return _trap_page(self.scenario.seed, host.name, trap, target)
        return None

    def content_source(self, host_name: str, page: Page) -> Page:
        """The page whose text and links ``page`` shows (following copies)."""
        pages = self._pages.get(host_name, {})
        while True:
            ref = page.same_as or page.near_duplicate_of
            if ref is None or ref not in pages:
                return page
            page = pages[ref]

    def _is_error_visit(self, page: Page, visit: int) -> bool:
        if page.status < 400:
            return False
        return page.recover_after is None or visit < page.recover_after

    # --- replies ------------------------------------------------------------------

    def _index(self) -> Reply:
        items = "".join(f'<li><a href="{html.escape(u)}">{html.escape(u)}</a></li>\n'
                        for u in self.seed_urls())
        doc = ("<!DOCTYPE html>\n<html><head><title>Simulated web</title></head><body>\n"
               f"<h1>{html.escape(self.scenario.name)}</h1>\n<ul>\n{items}</ul>\n"
               "</body></html>\n")
        return Reply(200, (("Content-Type", HTML_UTF8),), doc.encode("utf-8"))

    def _robots(self, host: Host, visit: int = 0) -> Reply:
        robots = host.robots
        plain = (("Content-Type", "text/plain; charset=utf-8"),)
        recovered = robots.recover_after is not None and visit >= robots.recover_after
        if robots.kind == "missing":
            return _simple(404, "Not found", "No robots.txt here.")
        if robots.kind == "error" and not recovered:
            return _simple(robots.status, "Server error", "robots.txt is failing.")
        body = robots.text(self.absolutize).encode("utf-8")
        if robots.kind == "oversize":
            line = b"# " + b"padding " * 12 + b"\n"
            reps = max(0, robots.size - len(body)) // len(line) + 1
            body = body + line * reps + b"Disallow: /beyond-limit/\n"
        delay = robots.delay if robots.kind == "timeout" and not recovered else 0.0
        return Reply(200, plain, body, delay=delay)

    def _page_reply(self, host: Host, page: Page, visit: int,
                    request: SimRequest | None) -> Reply:
        if self._is_error_visit(page, visit):
            reply = _simple(page.status, "Unavailable" if page.status >= 500 else "Error",
                            "Please come back later." if page.retry_after else "Error.")
            extra: list[tuple[str, str]] = []
            if page.retry_after is not None:
                extra.append(("Retry-After", page.retry_after))
            extra += list(page.headers.items())
            return replace(reply, headers=reply.headers + tuple(extra), delay=page.delay)
        if page.redirect is not None:
            location = self.absolutize(page.redirect)
            reply = _simple(page.status, "Moved", f"Moved to {location}.")
            return replace(reply, headers=(*reply.headers, ("Location", location),
                                           *page.headers.items()), delay=page.delay)

        if page.change_every:  # the text of the period the clock is in
            visit = self.period(page)
        body = self._body(host, page, visit)
        headers: list[tuple[str, str]] = []
        if page.content_type is not None:
            headers.append(("Content-Type", page.content_type))
        if page.gzip_bomb:
            headers.append(("Content-Encoding", "gzip"))
        etag = etag_for(body) if page.etag else None
        modified = self._last_modified(host.name, page, visit) if page.last_modified else None
        if etag is not None:
            headers.append(("ETag", etag))
        if modified is not None:
            headers.append(("Last-Modified", email.utils.format_datetime(modified, usegmt=True)))
        headers += list(page.headers.items())
        status = 200 if page.status >= 400 else page.status

        if request is not None and status == 200 and request.method in ("GET", "HEAD"):
            inm = request.header("If-None-Match")
            ims = request.header("If-Modified-Since")
            not_modified = False
            if inm is not None:
                not_modified = etag is not None and _etag_matches(inm, etag)
            elif ims is not None and modified is not None:
                since = _parse_http_date(ims)
                not_modified = since is not None and modified <= since
            if not_modified:
                kept = tuple((k, v) for k, v in headers
                             if k in ("ETag", "Last-Modified") or k in page.headers)
                return Reply(304, kept, b"", delay=page.delay)

        return Reply(status, tuple(headers), body, delay=page.delay,
                     drip_seconds=page.drip_seconds,
                     drip_chunks=page.drip_chunks if page.drip_seconds else 1)

    def period(self, page: Page) -> int:
        """The period of ``page.change_every`` the clock is in (0 for other pages)."""
        if not page.change_every:
            return 0
        return int(self.clock() // page.change_every)

    def _last_modified(self, host_name: str, page: Page, visit: int) -> dt.datetime:
        if page.change_every:  # ``visit`` is the period (see _page_reply)
            return dt.datetime.fromtimestamp(visit * page.change_every, dt.UTC)
        offset = text.stable_int(self.scenario.seed, host_name, page.path, "modified")
        stamp = _EPOCH + dt.timedelta(seconds=offset % (300 * 86400))
        if page.changes != "none":
            stamp += dt.timedelta(hours=visit)
        return stamp

    def _body(self, host: Host, page: Page, visit: int) -> bytes:
        cache_visit = visit if page.changes != "none" or page.change_every else -1
        key = (host.name, page.path, cache_visit)
        with self._lock:
            cached = self._cache.get(key)
            if cached is not None:
                self._cache.move_to_end(key)
                return cached
        body = self._make_body(host, page, visit)
        with self._lock:
            self._cache[key] = body
            while len(self._cache) > _CACHE_ENTRIES:
                self._cache.popitem(last=False)
        return body

    def _make_body(self, host: Host, page: Page, visit: int) -> bytes:
        if page.gzip_bomb:
            return gzip_bomb(page.gzip_bomb)
        if page.body is not None:
            return page.body.encode(page.encoding, errors="replace")
        if page.sitemap is not None:
            return render_sitemap(page.sitemap, self.absolutize, self.base_url(host.name))
        source = self.content_source(host.name, page)
        doc = self._document(host.name, source, visit, near=page.near_duplicate_of is not None,
                             meta_charset=page.meta_charset, extra_text=page.extra_text,
                             changes="major" if page.change_every else page.changes,
                             pad_to=page.body_bytes)
        return doc.encode(page.encoding, errors="replace")

    def _title(self, host_name: str, page: Page) -> str:
        if page.title:
            return page.title
        return _generated_title(self.scenario.seed, host_name, page.path)

    def _anchor(self, host_name: str, href: str) -> str:
        if href.startswith("/") and not href.startswith("//"):
            target = self._page_for(host_name, href)
            if target is not None:
                return self._title(host_name, self.content_source(host_name, target))
        return href

    def _document(self, host_name: str, source: Page, visit: int, *, near: bool,
                  meta_charset: str | None, extra_text: str, changes: str,
                  pad_to: int) -> str:
        seed = self.scenario.seed
        title = self._title(host_name, source)
        key: tuple[object, ...] = (seed, host_name, source.path, "text")
        if changes == "major":
            key += (visit,)
        paras = text.paragraphs(text.rng_for(*key), source.words) if source.words else []
        if near:
            # A short line more than the original: a near-duplicate, not a copy.
            paras.append("Syndicated copy.")
        if extra_text:
            paras.append(extra_text)
        if changes == "minor":
            paras.append(f"This page was updated for visit number {visit}.")
        head = f'<meta charset="{html.escape(meta_charset)}">\n' if meta_charset else ""
        out = ["<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n", head,
               f"<title>{html.escape(title)}</title>\n</head>\n<body>\n",
               f"<h1>{html.escape(title)}</h1>\n"]
        out += [f"<p>{html.escape(p)}</p>\n" for p in paras]
        if source.links:
            out.append("<ul>\n")
            for href in source.links:
                served = self.absolutize(href)
                out.append(f'<li><a href="{html.escape(served)}">'
                           f"{html.escape(self._anchor(host_name, href))}</a></li>\n")
            out.append("</ul>\n")
        doc = "".join(out)
        if pad_to and len(doc) < pad_to:
            block = "".join(f"<p>{html.escape(p)}</p>\n" for p in text.paragraphs(
                text.rng_for(seed, host_name, source.path, "padding"), 600))
            reps = (pad_to - len(doc)) // len(block) + 1
            doc += block * reps
        return doc + "</body>\n</html>\n"


@lru_cache(maxsize=65536)
def _generated_title(seed: int, host: str, path: str) -> str:
    return text.title(text.rng_for(seed, host, path, "title"))


def _simple(status: int, title: str, message: str) -> Reply:
    doc = (f"<!DOCTYPE html>\n<html><head><title>{html.escape(title)}</title></head>"
           f"<body><h1>{html.escape(title)}</h1><p>{html.escape(message)}</p></body></html>\n")
    return Reply(status, (("Content-Type", HTML_UTF8),), doc.encode("utf-8"))


# --- traps --------------------------------------------------------------------------

_FACETS: dict[str, tuple[str, ...]] = {
    "colour": ("red", "green", "blue", "black", "white", "grey"),
    "size": ("xs", "s", "m", "l", "xl"),
    "sort": ("price", "name", "date", "rating"),
    "brand": ("acme", "globex", "initech", "umbrella", "hooli"),
}


def _trap_page(seed: int, host: str, trap: Trap, target: str) -> Page | None:
    """The page a trap shows at ``target``, or None where the trap has no page."""
    path, _, query = target.partition("?")
    rest = path[len(trap.prefix):] if path.startswith(trap.prefix) else ""
    if trap.kind == "calendar":
        try:
            day = dt.date.fromisoformat(rest.strip("/") or trap.start)
        except ValueError:
            return None
        nxt = day + dt.timedelta(days=1)
        title = f"Events on {day.isoformat()}"
        return Page(path=target, title=title, words=trap.words,
                    links=(f"{trap.prefix}{nxt.isoformat()}",))
    if trap.kind == "session":
        links = []
        for i in range(trap.fanout):
            sid = f"{text.stable_int(seed, host, target, i, 'sid'):016x}"
            n = text.stable_int(seed, host, target, i, "page") % 1000
            links.append(f"{trap.prefix}page{n}?sid={sid}")
        return Page(path=target, words=trap.words, links=tuple(links))
    if trap.kind == "repeat":
        return Page(path=target, words=trap.words, links=("more/",))
    # params: faceted search, every page links copies with one more or one changed facet
    params = parse_qsl(query, keep_blank_values=True)
    current = dict(params)
    links = []
    page_no = int(current["page"]) if current.get("page", "").isdigit() else 1
    names = sorted(_FACETS)
    for i in range(trap.fanout):
        if i == 0:
            new = {**current, "page": str(page_no + 1)}
        else:
            name = names[text.stable_int(seed, host, target, i, "facet") % len(names)]
            values = _FACETS[name]
            new = {**current, name: values[text.stable_int(seed, host, target, i) % len(values)]}
        links.append(f"{path}?{urlencode(list(new.items()))}")
    return Page(path=target, words=trap.words, links=tuple(links))
