"""The real-HTML web's expected crawl: the static link walk over files (bench/realweb.py)."""

from __future__ import annotations

from pathlib import Path

from bench.realweb import Site, content_type, robots_txt, served_file, walk_site

PORT = 18080
BASE = f"http://doc.test:{PORT}"


def _tree(root: Path) -> None:
    (root / "sub").mkdir(parents=True)
    (root / "_sources").mkdir()
    (root / "index.html").write_text(
        '<html><head><link rel="stylesheet" href="style.css"></head><body>'
        '<a href="a.html#top">a</a> <a href="./a.html">a again</a> '
        '<a href="sub/">sub</a> <a href="missing.html">gone</a> '
        '<a href="_sources/index.txt">source</a> <a href="img.png">image</a> '
        '<a href="http://elsewhere.test/x.html">other host</a> '
        '<a href="mailto:a@b.test">mail</a> <a href="a.html?utm_source=x">tracked</a>'
        "</body></html>")
    (root / "a.html").write_text('<a href="index.html">home</a><a href="deep.html">d</a>')
    (root / "deep.html").write_text('<a href="deeper.html">deeper</a>')
    (root / "deeper.html").write_text("<p>end</p>")
    (root / "sub" / "index.html").write_text('<a href="../a.html">up</a>'
                                             '<a href="page.html">p</a>')
    (root / "sub" / "page.html").write_text("<p>page</p>")
    (root / "_sources" / "index.txt").write_text("source")
    (root / "img.png").write_bytes(b"\x89PNG")
    (root / "style.css").write_text("p{}")


def test_walk_follows_the_crawlers_rules(tmp_path: Path) -> None:
    _tree(tmp_path)
    site = Site("doc.test", "none", str(tmp_path), "/index.html", ("/_sources/",))
    found = walk_site(site, tmp_path, PORT, max_depth=16)
    assert sorted(found.expected) == sorted(f"{BASE}{p}" for p in (
        "/index.html", "/a.html", "/sub/", "/missing.html", "/img.png", "/deep.html",
        "/sub/page.html", "/deeper.html"))
    assert found.expected[0] == f"{BASE}/index.html"  # the seed first
    assert found.not_found == 1 and found.other_files == 1
    assert found.robots_blocked == 1  # /_sources/index.txt
    assert found.html_pages == 6


def test_walk_stops_at_the_depth_limit(tmp_path: Path) -> None:
    _tree(tmp_path)
    site = Site("doc.test", "none", str(tmp_path), "/index.html", ())
    found = walk_site(site, tmp_path, PORT, max_depth=1)
    assert f"{BASE}/deep.html" not in found.expected
    assert f"{BASE}/a.html" in found.expected
    assert f"{BASE}/_sources/index.txt" in found.expected  # no robots rule this time


def test_served_file_is_nginx_try_files(tmp_path: Path) -> None:
    _tree(tmp_path)
    assert served_file(tmp_path, f"{BASE}/a.html") == tmp_path / "a.html"
    assert served_file(tmp_path, f"{BASE}/sub/") == tmp_path / "sub" / "index.html"
    assert served_file(tmp_path, f"{BASE}/sub") == tmp_path / "sub" / "index.html"
    assert served_file(tmp_path, f"{BASE}/nope.html") is None
    assert served_file(tmp_path, f"{BASE}/a%2Ehtml") == tmp_path / "a.html"
    assert content_type("x/y.html") == "text/html"
    assert content_type("x/y.txt") == "text/plain"
    assert content_type("x/y.png") != "text/html"
    assert content_type("x/README") == "text/html"  # nginx's default_type


def test_robots_txt_lists_the_disallowed_paths() -> None:
    site = Site("doc.test", "none", "/nowhere", "/index.html", ("/a/", "/b.html"))
    assert robots_txt(site) == b"User-agent: *\nDisallow: /a/\nDisallow: /b.html\n"


def test_links_of_an_exact_duplicate_are_not_followed(tmp_path: Path) -> None:
    _tree(tmp_path)
    # /copy.html is /sub/index.html byte for byte: fetched, its links (resolved against
    # /copy.html, so to /page.html) are not followed
    (tmp_path / "copy.html").write_bytes((tmp_path / "sub" / "index.html").read_bytes())
    (tmp_path / "deeper.html").write_text('<a href="copy.html">copy</a>')
    site = Site("doc.test", "none", str(tmp_path), "/index.html", ())
    found = walk_site(site, tmp_path, PORT, max_depth=16)
    assert f"{BASE}/copy.html" in found.expected
    assert f"{BASE}/page.html" not in found.expected
    assert found.duplicates == 1
