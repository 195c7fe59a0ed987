"""The Markdown records of a crawl, end to end: one per kept page in the text WARC
files, pointing at the page's real response record (same record id, same payload
digest, the fetch time), named by markdownKey in pages.jsonl; none when the setting is
off (docs/markdown.md)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from warcio.archiveiterator import ArchiveIterator

from common.runtime import blob_root
from simweb import Page, SimWeb
from tests.e2e.crawl_support import Outcome, host, key, run, scenario

ARTICLE = """<!DOCTYPE html>
<html><head><title>Bridges</title></head><body>
<nav><a href="/">Home</a> <a href="/about">About the site navigation</a></nav>
<article>
<h1>Bridges</h1>
<p>The council met on Tuesday evening and agreed to rebuild the old bridge over the
river before winter, after engineers found the piers unsafe.</p>
<h2>What the engineers found</h2>
<ul><li>Cracked piers on the north side<ul><li>two of them below the waterline</li></ul></li>
<li>Rusted railings along the footpath</li></ul>
<table><tr><th>Pier</th><th>State</th></tr><tr><td>North | one</td><td>cracked</td></tr>
<tr><td>South</td><td>sound</td></tr></table>
<pre><code class="language-python">def load(span):
    return span * 2
</code></pre>
<p>Read the <a href="/report">full report</a> or the <a href="javascript:void(0)">summary
widget</a>, and call <code>bridge_status()</code> for updates.</p>
</article>
<footer>Copyright footer text of the whole site</footer>
</body></html>
"""


def records_at(root: Path, pointer: dict[str, Any]) -> Any:
    """The one WARC record at a page record's pointer, read back by offset."""
    with (root / pointer["file"]).open("rb") as fh:
        fh.seek(pointer["offset"])
        data = fh.read(pointer["length"])
    return next(iter(ArchiveIterator(io.BytesIO(data))))


def read_all(root: Path, pointer: dict[str, Any]) -> tuple[dict[str, str], str]:
    rec = records_at(root, pointer)
    return dict(rec.rec_headers.headers), rec.content_stream().read().decode("utf-8")


def responses(root: Path) -> dict[str, dict[str, str]]:
    """WARC headers of the response records, by record id."""
    out: dict[str, dict[str, str]] = {}
    for path in sorted(root.glob("*.warc.gz")):
        if "-text-" in path.name:
            continue
        with path.open("rb") as fh:
            for rec in ArchiveIterator(fh):
                if rec.rec_type == "response":
                    out[rec.rec_headers.get_header("WARC-Record-ID")] = dict(
                        rec.rec_headers.headers)
    return out


async def crawl_site(tmp_path: Path, **sections: Any) -> tuple[Outcome, SimWeb]:
    site = host("bridge.test",
                Page(path="/story", body=ARTICLE.replace('"/about"', '"/second"')),
                Page(path="/second", words=120),
                Page(path="/copy", body=ARTICLE.replace('"/about"', '"/second"')),
                Page(path="/report", words=80))
    async with SimWeb(scenario(site), dns=True) as web:
        out = await run(web, tmp_path, ["bridge.test/story", "bridge.test/copy"], **sections)
    return out, web


@pytest.mark.timeout(90)
async def test_every_kept_page_has_a_markdown_record_pointing_at_its_response(
        tmp_path: Path) -> None:
    out, web = await crawl_site(tmp_path)
    root = blob_root(out.settings)
    pages = out.pages()
    kept = [p for p in pages if p["textKey"]]
    assert len(kept) == 4 - 1  # /copy is an exact duplicate of /story: no text
    assert all(p.get("markdownKey") is None for p in pages if not p["textKey"])
    found = responses(root)
    markdown = out.texts("text/markdown")
    assert len(markdown) == len(kept)
    for page in kept:
        headers, body = read_all(root, page["markdownKey"])
        assert headers["WARC-Type"] == "conversion"
        assert headers["Content-Type"] == "text/markdown; charset=utf-8"
        assert headers["WARC-Target-URI"] == page["url"]
        assert markdown[page["url"]] == body
        # provenance: the response record the page record's storageKey names
        response = dict(records_at(root, page["storageKey"]).rec_headers.headers)
        assert headers["WARC-Refers-To"] == response["WARC-Record-ID"]
        assert found[headers["WARC-Refers-To"]] is not None
        assert headers["WARC-Refers-To-Payload-Digest"] == response["WARC-Payload-Digest"]
        assert headers["WARC-Date"] == response["WARC-Date"]
        # the text record's signals
        text_headers, _ = read_all(root, page["textKey"])
        assert text_headers["WARC-Refers-To"] == headers["WARC-Refers-To"]
        for name in ("Crawler-Text-Chars", "Crawler-Text-Words", "Crawler-Boilerplate-Ratio",
                     "WARC-Identified-Content-Language"):
            assert headers.get(name) == text_headers.get(name), name
        assert headers["Crawler-Text-Chars"] == str(page["textChars"])

    story = {p["url"]: p for p in kept}[key(web, "bridge.test/story")]
    _, md = read_all(root, story["markdownKey"])
    base = story["url"].rsplit("/", 1)[0]
    assert "## What the engineers found" in md
    assert "- Cracked piers on the north side\n  - two of them below the waterline" in md
    assert "| Pier | State |\n| --- | --- |\n| North \\| one | cracked |" in md
    assert "```python\ndef load(span):\n    return span * 2\n```" in md
    assert f"[full report]({base}/report)" in md
    assert "summary widget" in md and "javascript:" not in md
    assert "`bridge_status()`" in md
    assert "navigation" not in md and "footer" not in md and "# Bridges" not in md


@pytest.mark.timeout(90)
async def test_markdown_off_writes_no_markdown_records(tmp_path: Path) -> None:
    out, _ = await crawl_site(tmp_path, parser={"markdown": False})
    pages = out.pages()
    assert [p for p in pages if p["textKey"]]
    assert all(p.get("markdownKey") is None for p in pages)
    assert out.texts("text/markdown") == {}
    assert out.texts()  # the text records are still written
