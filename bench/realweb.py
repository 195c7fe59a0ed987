"""The real-HTML web: Debian's documentation packages served as hosts of their own.

Each site is the HTML tree one documentation package installs (PostgreSQL, Python,
Django, Git, the Debian reference and handbook, ...), installed with apt-get when
missing. A site becomes one host (``pgdoc.test``): its folder under the web root holds
a symbolic link to every entry of the package's tree and a robots.txt of its own that
disallows a part of the site that exists (generated indexes, source listings, ...).
The seed is the site's start page.

The expected crawl is a static link walk over the files, by the crawler's own rules:
every page is decoded and its links extracted (:mod:`parser.html`,
:func:`parser.html.followable_links`) and made canonical (:func:`common.urls.canonicalize`)
as the crawler does; links stay on the page's host (the benchmark runs both crawlers
limited to the seeds' hosts), robots.txt is obeyed (:class:`common.robots.RobotsPolicy`)
and the trap rules apply (:func:`frontier.policy.trap_reason`, which includes the depth
limit). The links of a page byte-identical to one fetched before are not followed (the
crawler's exact-duplicate rule; the walk's breadth-first order decides which copy is
first; Scrapy, which has no such rule, follows them). A URL is mapped to a file as
nginx serves it (``try_files $uri $uri/index.html``): a missing file is a 404, fetched
once, with no links; a file that is not HTML (an image, a style sheet) is fetched and
not parsed.

A built web has a ``web.json`` manifest (sites, package versions, seeds, expected URLs,
figures); it is reused while the sites, the packages' versions and the rules are the
same.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

MANIFEST = "web.json"
FORMAT_VERSION = 2
PRODUCT_TOKEN = "PoliteCrawler"
CONTENT_TYPES = {"html": "text/html", "htm": "text/html", "xhtml": "application/xhtml+xml",
                 "txt": "text/plain"}
"""Extensions served as pages (nginx's types in bench/servers.py); other known extensions
are images, style sheets and archives; unknown ones are served as text/html (default_type)."""
OTHER_TYPES = ("css", "js", "png", "gif", "jpg", "jpeg", "svg", "ico", "pdf", "gz", "zip",
               "epub", "json", "xml", "woff", "woff2", "ttf", "eot", "inv", "bz2", "xz",
               "tar", "tgz", "py", "c", "h", "sh", "rst")


@dataclass(frozen=True, slots=True)
class Site:
    host: str
    package: str
    folder: str
    start: str
    disallow: tuple[str, ...]
    quick: bool = False
    """In the --quick subset (small sites, a few hundred pages in all)."""


SITES: tuple[Site, ...] = (
    Site("pgdoc.test", "postgresql-doc-15", "/usr/share/doc/postgresql-doc-15/html",
         "/index.html", ("/bookindex.html", "/release-")),
    Site("pydoc.test", "python3.11-doc", "/usr/share/doc/python3.11/html",
         "/index.html", ("/_sources/", "/genindex-all.html")),
    Site("djangodoc.test", "python-django-doc", "/usr/share/doc/python-django-doc/html",
         "/index.html", ("/_modules/", "/genindex.html")),
    Site("gitdoc.test", "git-doc", "/usr/share/doc/git-doc", "/index.html",
         ("/RelNotes/", "/technical/")),
    Site("handbook.test", "debian-handbook", "/usr/share/doc/debian-handbook/html/en-US",
         "/index.html", ("/Common_Content/",)),
    Site("debref.test", "debian-reference-en", "/usr/share/debian-reference",
         "/index.en.html", ("/apa.en.html",), quick=True),
    Site("devref.test", "developers-reference", "/usr/share/developers-reference",
         "/index.html", ("/_sources/",), quick=True),
    Site("policy.test", "debian-policy", "/usr/share/doc/debian-policy/policy.html",
         "/index.html", ("/_sources/", "/genindex.html"), quick=True),
    Site("bs4doc.test", "python-bs4-doc", "/usr/share/doc/python-bs4-doc/html",
         "/index.html", ("/_sources/",), quick=True),
    Site("haproxydoc.test", "haproxy-doc", "/usr/share/doc/haproxy/html", "/intro.html",
         ("/management.html",)),
    Site("diffdoc.test", "diffutils-doc", "/usr/share/doc/diffutils", "/index.html",
         ("/Index.html",), quick=True),
    Site("zshdoc.test", "zsh-doc", "/usr/share/doc/zsh-common/html", "/index.html",
         ("/Concept-Index.html", "/Variables-Index.html"), quick=True),
    Site("vimdoc.test", "vim-doc", "/usr/share/doc/vim/html", "/index.html",
         ("/version",)),
    Site("swigdoc.test", "swig4.0-doc", "/usr/share/doc/swig4.0-doc/Manual",
         "/index.html", ("/Contents.html",)),
    Site("markdowndoc.test", "python-markdown-doc", "/usr/share/doc/python-markdown-doc/docs",
         "/index.html", ("/change_log/",), quick=True),
    Site("eximdoc.test", "exim4-doc-html", "/usr/share/doc/exim4-doc-html/spec_html",
         "/index.html", ("/ch-concept_index.html",), quick=True),
    Site("rdoc.test", "r-doc-html", "/usr/share/doc/r-doc-html/manual", "/R-intro.html",
         ("/R-ints.html",)),
    Site("asciidoctordoc.test", "asciidoctor-doc", "/usr/share/doc/asciidoctor-doc/html",
         "/index.html", ("/Asciidoctor/Extensions/",)),
    Site("puttydoc.test", "putty-doc", "/usr/share/doc/putty-doc", "/index.html",
         ("/IndexPage.html",), quick=True),
    Site("docbookxsl.test", "docbook-xsl-doc-html", "/usr/share/doc/docbook-xsl-doc-html/doc",
         "/index.html", ("/fo/",)),
    Site("pytestmock.test", "python-pytest-mock-doc", "/usr/share/doc/python3-pytest-mock/html",
         "/index.html", ("/_sources/",), quick=True),
)


def sites_for(quick: bool) -> tuple[Site, ...]:
    return tuple(s for s in SITES if s.quick) if quick else SITES


def robots_txt(site: Site) -> bytes:
    lines = ["User-agent: *", *(f"Disallow: {p}" for p in site.disallow), ""]
    return "\n".join(lines).encode()


def content_type(path: str) -> str:
    """The media type nginx gives a file (bench/servers.py's types; text/html else)."""
    name = path.rsplit("/", 1)[-1]
    ext = name.rsplit(".", 1)[-1].lower() if "." in name else ""
    if ext in CONTENT_TYPES:
        return CONTENT_TYPES[ext]
    if ext in OTHER_TYPES:
        return "application/octet-stream"
    return "text/html"


def served_file(root: Path, url: str) -> Path | None:
    """The file nginx answers ``url`` with (``try_files $uri $uri/index.html``), or None
    for a 404."""
    path = unquote(urlsplit(url).path)
    if "\0" in path or "/../" in f"{path}/":
        return None
    rel = path.lstrip("/")
    candidate = root / rel
    if rel and not path.endswith("/") and candidate.is_file():
        return candidate
    index = candidate / "index.html"
    if index.is_file():
        return index
    return None


@dataclass(slots=True)
class Walk:
    """The expected crawl of one site."""

    expected: list[str]
    html_pages: int
    other_files: int
    not_found: int
    robots_blocked: int
    trap_blocked: int
    html_bytes: int
    links: int
    duplicates: int = 0
    """Pages byte-identical to one fetched before (``/html``, ``/html/`` and
    ``/html/index.html``): fetched, their links not followed, as by the crawler."""


def walk_site(site: Site, root: Path, port: int, max_depth: int) -> Walk:
    """Breadth-first link walk of one host from its start page, by the crawler's rules."""
    from common import urls
    from common.robots import RobotsPolicy
    from common.settings import TrapSettings, UrlSettings
    from frontier.policy import TrapRules, trap_reason
    from parser.charset import decode_html
    from parser.html import extract, followable_links, parse_document

    tracking = urls.TrackingRules.from_settings(UrlSettings())
    rules = TrapRules.from_settings(TrapSettings(max_depth=max_depth))
    robots = RobotsPolicy.parse(robots_txt(site))
    seed = urls.canonicalize(f"http://{site.host}:{port}{site.start}", tracking=tracking)
    host = urls.host_key(seed)
    seen = {seed}
    queue: deque[tuple[str, int]] = deque([(seed, 0)])
    out = Walk([], 0, 0, 0, 0, 0, 0, 0)
    blocked: set[str] = set()
    bodies: set[bytes] = set()
    while queue:
        url, depth = queue.popleft()
        out.expected.append(url)
        file = served_file(root, url)
        if file is None:
            out.not_found += 1
            continue
        ctype = content_type(str(file))
        if ctype not in ("text/html", "application/xhtml+xml"):
            out.other_files += 1
            continue
        body = file.read_bytes()
        out.html_pages += 1
        out.html_bytes += len(body)
        digest = hashlib.sha256(body).digest()
        if digest in bodies:
            out.duplicates += 1
            continue
        bodies.add(digest)
        decoded = decode_html(body, f"{ctype}; charset=utf-8")
        parsed = extract(parse_document(decoded.text), url, product_token=PRODUCT_TOKEN)
        for link in followable_links(parsed):
            out.links += 1
            try:
                canon = urls.canonicalize(link, tracking=tracking)
                link_host = urls.host_key(canon)
            except urls.UrlError:
                continue
            if canon in seen or canon in blocked or link_host != host:
                continue
            if trap_reason(canon, link_host, depth + 1, rules) is not None:
                if depth + 1 <= max_depth:
                    out.trap_blocked += 1
                    blocked.add(canon)
                continue
            if not robots.allowed(canon, PRODUCT_TOKEN):
                out.robots_blocked += 1
                blocked.add(canon)
                continue
            seen.add(canon)
            queue.append((canon, depth + 1))
    return out


def _walk_job(args: tuple[Site, str, int, int]) -> Walk:
    site, root, port, depth = args
    return walk_site(site, Path(root), port, depth)


def package_versions(packages: Sequence[str]) -> dict[str, str | None]:
    """Installed version of each package (None: not installed)."""
    out: dict[str, str | None] = {}
    for name in packages:
        done = subprocess.run(["dpkg-query", "-W", "-f=${Status}|${Version}", name],
                              capture_output=True, text=True)
        status, _, version = done.stdout.partition("|")
        out[name] = version if done.returncode == 0 and "installed" in status.split() else None
    return out


def install_packages(packages: Sequence[str], log: Callable[[str], None]) -> None:
    """apt-get install the documentation packages that are missing."""
    missing = [p for p, v in package_versions(packages).items() if v is None]
    if not missing:
        return
    from bench.servers import BenchError

    if shutil.which("apt-get") is None or os.geteuid() != 0:
        raise BenchError("the real web needs these packages: sudo apt-get install "
                         + " ".join(missing))
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    log(f"apt-get install {' '.join(missing)}")
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
    done = subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends",
                           *missing], env=env, stdout=subprocess.DEVNULL)
    if done.returncode != 0:
        raise BenchError(f"apt-get could not install {' '.join(missing)}")


@dataclass(slots=True)
class RealWeb:
    """The real-HTML web on disk: one folder per host under ``root``."""

    sites: tuple[Site, ...]
    root: Path
    port: int
    max_depth: int
    seeds: list[str]
    expected: list[str]
    per_site: dict[str, dict[str, Any]]
    versions: dict[str, str | None]
    build_seconds: float

    @property
    def host_names(self) -> list[str]:
        return [s.host for s in self.sites]

    def summary(self) -> dict[str, Any]:
        total = {k: sum(int(v[k]) for v in self.per_site.values())
                 for k in ("expected", "html_pages", "other_files", "not_found",
                           "robots_blocked", "html_bytes", "links", "duplicates")}
        return {"kind": "real", "root": str(self.root), "hosts": len(self.sites),
                "max_depth": self.max_depth, "expected_fetches": len(self.expected),
                "pages": total["html_pages"], "bytes": total["html_bytes"],
                "mean_page_bytes": round(total["html_bytes"] / max(1, total["html_pages"])),
                "links_per_page": round(total["links"] / max(1, total["html_pages"]), 1),
                "other_files": total["other_files"], "not_found": total["not_found"],
                "robots_blocked": total["robots_blocked"],
                "duplicates": total["duplicates"], "sites": self.per_site,
                "packages": self.versions, "build_seconds": round(self.build_seconds, 1)}

    def one_host(self, host: str, max_depth: int) -> tuple[str, list[str]]:
        """Seed and expected fetches of ``host`` alone, to ``max_depth``."""
        site = next(s for s in self.sites if s.host == host)
        found = walk_site(site, self.root / site.host, self.port, max_depth)
        return found.expected[0], found.expected


def ensure_real_web(parent: Path, port: int, *, quick: bool = False, max_depth: int = 16,
                    workers: int = 2, log: Callable[[str], None] = print) -> RealWeb:
    """The real web under ``parent`` (installing the packages and walking the links once
    per set of sites, versions, port and depth)."""
    sites = sites_for(quick)
    install_packages(sorted({s.package for s in sites}), log)
    versions = package_versions(sorted({s.package for s in sites}))
    raw = json.dumps({"sites": [asdict(s) for s in sites], "versions": versions,
                      "port": port, "depth": max_depth, "v": FORMAT_VERSION}, sort_keys=True)
    key = hashlib.sha256(raw.encode()).hexdigest()[:10]
    root = parent / f"realweb-{'quick' if quick else 'all'}-{key}"
    manifest = root / MANIFEST
    if manifest.exists():
        data = json.loads(manifest.read_text())
        return RealWeb(sites=sites, root=root, port=port, max_depth=max_depth,
                       seeds=data["seeds"], expected=data["expected"],
                       per_site=data["per_site"], versions=versions,
                       build_seconds=data["build_seconds"])
    started = time.monotonic()
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    for site in sites:
        folder = root / site.host
        folder.mkdir()
        for entry in sorted(os.listdir(site.folder)):
            if entry != "robots.txt":
                (folder / entry).symlink_to(Path(site.folder) / entry)
        (folder / "robots.txt").write_bytes(robots_txt(site))
    log(f"real web: {len(sites)} sites; walking their links (once; kept in {root})")
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=max(1, workers)) as pool:
        walks = list(pool.map(_walk_job, [(s, str(root / s.host), port, max_depth)
                                          for s in sites]))
    seeds = [w.expected[0] for w in walks]
    expected = sorted(u for w in walks for u in w.expected)
    per_site = {s.host: {"package": s.package, "version": versions.get(s.package),
                         "folder": s.folder, "start": s.start,
                         "disallow": list(s.disallow), "expected": len(w.expected),
                         "html_pages": w.html_pages, "other_files": w.other_files,
                         "not_found": w.not_found, "robots_blocked": w.robots_blocked,
                         "trap_blocked": w.trap_blocked, "html_bytes": w.html_bytes,
                         "links": w.links, "duplicates": w.duplicates}
                for s, w in zip(sites, walks, strict=True)}
    elapsed = time.monotonic() - started
    manifest.write_text(json.dumps({"seeds": seeds, "expected": expected,
                                    "per_site": per_site, "build_seconds": elapsed}))
    web = RealWeb(sites=sites, root=root, port=port, max_depth=max_depth, seeds=seeds,
                  expected=expected, per_site=per_site, versions=versions,
                  build_seconds=elapsed)
    s = web.summary()
    log(f"  {s['pages']} HTML pages ({s['mean_page_bytes'] / 1024:.0f} KiB, "
        f"{s['links_per_page']} links each), {len(expected)} expected fetches "
        f"({s['not_found']} answer 404, {s['other_files']} not HTML), "
        f"{s['robots_blocked']} disallowed by robots.txt; {elapsed:.0f} s")
    return web
