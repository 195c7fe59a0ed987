"""What rendering costs, and how the DevTools client was chosen (docs/rendering.md).

    python -m bench.render_probe [--pages 20] [--rounds 3]

Renders the rendering scenario's shell page (answered from memory, as the crawler
answers the browser from the stored response) in the system's headless Chromium,
driven two ways, alternating rounds so that a busy machine disturbs both alike:

- ``playwright``: Playwright's ``connect_over_cdp`` (what :mod:`render.browser` uses);
- ``raw-cdp``: a minimal DevTools client over aiohttp's WebSocket (no extra
  dependency): Target, Fetch (request interception), Page and Runtime by hand.

Per round: seconds to a usable browser (launch and connect), seconds per page, and the
memory (PSS from /proc: shared pages split between the processes) of the browser's
processes and of the client's own helper process (Playwright's Node driver). Also
measures the automatic render signal (:func:`common.rendering.looks_like_shell`) on
every page of the seed and features scenarios (which need no rendering), on the 181
real news and blog pages of tests/conformance/article-extraction (none a shell) and on
the rendering scenario's shells.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import gzip
import itertools
import json
import os
import re
import shutil
import signal
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp

from common import urls
from common.rendering import RenderRules, ShellSignal, count_scripts, looks_like_shell
from common.settings import RenderSettings, UrlSettings
from parser.jobs import analyse
from simweb.scenarios import build_rendering, features, seed
from simweb.site import Site

URL = "http://spa.test/"
ROOT = Path(__file__).resolve().parents[1]
_DEVTOOLS_RE = re.compile(rb"DevTools listening on (ws://\S+)")


def _pages() -> dict[str, tuple[str, bytes]]:
    """The shell, its script and the script's XHR (verbatim bodies of the scenario)."""
    host = build_rendering().host("spa.test").page_map()
    out: dict[str, tuple[str, bytes]] = {}
    for path in ("/", "/app.js", "/api/items.json"):
        page = host[path]
        assert page.body is not None
        out[URL.rstrip("/") + path] = (page.content_type or "text/html", page.body.encode())
    return out


def _children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    if int(fh.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.append(int(entry))
            except OSError:
                continue
    return out


def _tree_rss(pid: int) -> int:
    """Proportional resident bytes (PSS) of ``pid`` and all its descendants (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
        except OSError:
            continue
        children.setdefault(ppid, []).append(int(entry))
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        todo += children.get(p, [])
        try:  # proportional set size: shared pages split between their users
            with open(f"/proc/{p}/smaps_rollup") as fh:
                for line in fh:
                    if line.startswith("Pss:"):
                        total += int(line.split()[1]) * 1024
        except OSError:
            pass
    return total


async def _chromium() -> tuple[asyncio.subprocess.Process, str, str]:
    exe = shutil.which("chromium")
    assert exe, "chromium not installed"
    profile = tempfile.mkdtemp(prefix="render-probe-")
    args = [exe, "--headless=new", "--remote-debugging-port=0", f"--user-data-dir={profile}",
            "--no-first-run", "--disable-gpu", "--disable-dev-shm-usage",
            "--disable-background-networking", "--proxy-server=http://127.0.0.1:9",
            "--proxy-bypass-list=<-loopback>", "--blink-settings=imagesEnabled=false",
            "--disable-breakpad", "--disable-crash-reporter"]
    if os.geteuid() == 0:
        args.append("--no-sandbox")
    proc = await asyncio.create_subprocess_exec(*args, "about:blank",
                                                stderr=asyncio.subprocess.PIPE,
                                                stdout=asyncio.subprocess.DEVNULL,
                                                start_new_session=True)
    assert proc.stderr is not None
    while True:
        line = await proc.stderr.readline()
        found = _DEVTOOLS_RE.search(line)
        if found:
            return proc, found.group(1).decode(), profile
        if not line:
            raise RuntimeError("chromium exited")


async def _stop(proc: asyncio.subprocess.Process, profile: str) -> None:
    if proc.returncode is None:
        os.killpg(proc.pid, signal.SIGKILL)
    await proc.wait()
    shutil.rmtree(profile, ignore_errors=True)


# -- Playwright ------------------------------------------------------------------------

async def playwright_round(pages: int, bodies: dict[str, tuple[str, bytes]]
                           ) -> dict[str, float]:
    from playwright.async_api import Route, async_playwright

    t0 = time.perf_counter()
    pw = await async_playwright().start()
    proc, ws, profile = await _chromium()
    browser = await pw.chromium.connect_over_cdp(ws)
    ready = time.perf_counter() - t0

    async def route(r: Route) -> None:
        found = bodies.get(r.request.url)
        if found is None:
            await r.abort("blockedbyclient")
        else:
            await r.fulfill(status=200, content_type=found[0], body=found[1])

    times = []
    for _ in range(pages):
        t = time.perf_counter()
        ctx = await browser.new_context()
        await ctx.route("**/*", route)
        page = await ctx.new_page()
        await page.goto(URL, wait_until="load")
        await page.wait_for_function("document.querySelectorAll('#app a').length > 0")
        html = await page.content()
        assert "Item 3" in html
        await ctx.close()
        times.append(time.perf_counter() - t)
    # Playwright's Node driver: this process's child that is not the browser
    drivers = [p for p in _children(os.getpid()) if p != proc.pid]
    rss_browser, rss_client = _tree_rss(proc.pid), sum(_tree_rss(p) for p in drivers)
    await browser.close()
    await pw.stop()
    await _stop(proc, profile)
    return {"ready_s": ready, "page_s": statistics.median(times),
            "browser_mib": rss_browser / 2**20, "client_mib": rss_client / 2**20}


# -- a raw DevTools client ---------------------------------------------------------------

class _Cdp:
    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.ids = itertools.count(1)
        self.waiting: dict[int, asyncio.Future[Any]] = {}
        self.handlers: dict[str, Callable[[dict[str, Any], str | None], Awaitable[None]]] = {}
        self.reader = asyncio.get_running_loop().create_task(self._read())

    async def call(self, method: str, params: dict[str, Any] | None = None,
                   session: str | None = None) -> Any:
        n = next(self.ids)
        fut = asyncio.get_running_loop().create_future()
        self.waiting[n] = fut
        msg: dict[str, Any] = {"id": n, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        await self.ws.send_str(json.dumps(msg))
        return await fut

    async def _read(self) -> None:
        async for m in self.ws:
            data = json.loads(m.data)
            if "id" in data:
                fut = self.waiting.pop(data["id"])
                if "error" in data:
                    fut.set_exception(RuntimeError(str(data["error"])))
                else:
                    fut.set_result(data.get("result"))
            elif data.get("method") in self.handlers:
                asyncio.get_running_loop().create_task(
                    self.handlers[data["method"]](data["params"], data.get("sessionId")))


async def raw_round(pages: int, bodies: dict[str, tuple[str, bytes]]) -> dict[str, float]:
    t0 = time.perf_counter()
    proc, ws_url, profile = await _chromium()
    session = aiohttp.ClientSession()
    ws = await session.ws_connect(ws_url, max_msg_size=0)
    cdp = _Cdp(ws)
    ready = time.perf_counter() - t0
    loaded: dict[str, asyncio.Event] = {}

    async def paused(p: dict[str, Any], sid: str | None) -> None:
        with contextlib.suppress(RuntimeError):  # the page may be gone meanwhile
            await answer(p, sid)

    async def answer(p: dict[str, Any], sid: str | None) -> None:
        found = bodies.get(p["request"]["url"])
        if found is None:
            await cdp.call("Fetch.failRequest", {"requestId": p["requestId"],
                                                 "errorReason": "BlockedByClient"}, sid)
        else:
            await cdp.call("Fetch.fulfillRequest", {
                "requestId": p["requestId"], "responseCode": 200,
                "responseHeaders": [{"name": "Content-Type", "value": found[0]}],
                "body": base64.b64encode(found[1]).decode()}, sid)

    async def load(_p: dict[str, Any], sid: str | None) -> None:
        if sid in loaded:
            loaded[sid].set()

    cdp.handlers["Fetch.requestPaused"] = paused
    cdp.handlers["Page.loadEventFired"] = load
    times = []
    for _ in range(pages):
        t = time.perf_counter()
        ctx = (await cdp.call("Target.createBrowserContext"))["browserContextId"]
        target = (await cdp.call("Target.createTarget", {
            "url": "about:blank", "browserContextId": ctx}))["targetId"]
        sid = (await cdp.call("Target.attachToTarget", {"targetId": target,
                                                        "flatten": True}))["sessionId"]
        loaded[sid] = asyncio.Event()
        await cdp.call("Fetch.enable", {"patterns": [{"urlPattern": "*"}]}, sid)
        await cdp.call("Page.enable", {}, sid)
        await cdp.call("Page.navigate", {"url": URL}, sid)
        await loaded[sid].wait()
        while True:
            res = await cdp.call("Runtime.evaluate", {
                "expression": "document.querySelectorAll('#app a').length"}, sid)
            if res["result"]["value"]:
                break
            await asyncio.sleep(0.01)
        html = (await cdp.call("Runtime.evaluate", {
            "expression": "document.documentElement.outerHTML"}, sid))["result"]["value"]
        assert "Item 3" in html
        await cdp.call("Target.disposeBrowserContext", {"browserContextId": ctx})
        times.append(time.perf_counter() - t)
    rss_browser = _tree_rss(proc.pid)
    cdp.reader.cancel()
    await ws.close()
    await session.close()
    await _stop(proc, profile)
    return {"ready_s": ready, "page_s": statistics.median(times),
            "browser_mib": rss_browser / 2**20, "client_mib": 0.0}


# -- the automatic signal --------------------------------------------------------------

def signal_counts() -> dict[str, int]:
    """Pages the automatic signal would render, of scenarios that need none and of
    the rendering scenario's shells (its default thresholds)."""
    rules = RenderRules.from_settings(RenderSettings())
    tracking = urls.TrackingRules.from_settings(UrlSettings())
    out: dict[str, int] = {}
    for name, scenario in (("seed+features", None), ("rendering", build_rendering())):
        scenarios = [seed(), features()] if scenario is None else [scenario]
        total = shells = 0
        for sc in scenarios:
            site = Site(sc)
            for host in sc.hosts:
                for page in host.pages:
                    ctype = page.content_type or "text/html"
                    if not ctype.startswith("text/html") or page.status != 200 or page.gzip_bomb:
                        continue
                    body = site._body(host, page, 0)
                    url = f"http://{host.name}{page.path}"
                    found = analyse(body, ctype, url, x_robots_tag=None,
                                    product_token="PoliteCrawler", tracking=tracking)
                    sig = ShellSignal(text_chars=len(found.text), links=len(found.links),
                                      scripts=count_scripts(body))
                    total += 1
                    shells += looks_like_shell(sig, rules)
        out[f"{name}: html pages"] = total
        out[f"{name}: judged shells"] = shells
    # real pages: the article-extraction benchmark's 181 news and blog pages
    pages = sorted((ROOT / "tests/conformance/article-extraction/html").glob("*.html.gz"))
    signals = []
    for path in pages:
        body = gzip.decompress(path.read_bytes())
        found = analyse(body, "text/html", "http://example.com/", x_robots_tag=None,
                        product_token="PoliteCrawler", tracking=tracking)
        signals.append(ShellSignal(text_chars=len(found.text), links=len(found.links),
                                   scripts=count_scripts(body)))
    if signals:
        out["article pages: html pages"] = len(signals)
        out["article pages: judged shells"] = sum(looks_like_shell(x, rules) for x in signals)
        out["article pages: least main text (chars)"] = min(x.text_chars for x in signals)
        out["article pages: median <script> count"] = int(
            statistics.median(x.scripts for x in signals))
    return out


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--pages", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    bodies = _pages()
    results: dict[str, list[dict[str, float]]] = {"playwright": [], "raw-cdp": []}
    for _ in range(args.rounds):
        results["playwright"].append(await playwright_round(args.pages, bodies))
        results["raw-cdp"].append(await raw_round(args.pages, bodies))
    for name, rounds in results.items():
        med = {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
        print(f"{name:10} ready {med['ready_s']:.2f} s  page {med['page_s'] * 1000:.0f} ms  "
              f"browser PSS {med['browser_mib']:.0f} MiB  client PSS "
              f"{med['client_mib']:.0f} MiB")
    for k, v in signal_counts().items():
        print(f"{k}: {v}")


if __name__ == "__main__":
    asyncio.run(main())
