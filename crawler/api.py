"""The control API (aiohttp): seeds, figures, per-host overrides, pause and resume.

Routes (all under ``/v1``; the OpenAPI document is :mod:`crawler.openapi`)::

    GET  /v1/health            liveness, no token
    GET  /v1/openapi.json      the OpenAPI 3.0 document, no token
    POST /v1/seeds             {"urls": [...], "priority": 0} -> 202
    GET  /v1/stats             CrawlStats as JSON
    GET  /v1/hosts/{host}      the host's row
    PUT  /v1/hosts/{host}      {"crawlDelaySeconds": 2.0 | null, "blocked": true,
                               "maxPages": 100}
    POST /v1/pause, /v1/resume {"paused": true | false}
    GET  /v1/blocked-paths     {"patterns": [...]}
    POST /v1/blocked-paths     {"pattern": "regex"}: URLs whose path and query match it
                               are not fetched (queued ones are rejected as blocked)
    DELETE /v1/blocked-paths?pattern=regex
    GET  /v1/scope             the crawl scope in force (the settings', or the operator's)
    PUT  /v1/scope             {"mode": "seed-hosts", "allowDomains": [...],
                               "denyDomains": [...], "pathPrefixes": [...],
                               "noParent": true}: fields left out keep their value
    DELETE /v1/scope           back to the settings' scope (CRAWLER_SCOPE_*)
    GET  /v1/render            {"hosts": [...], "patterns": [...]}: pages always rendered
    PUT  /v1/render            the same, replacing both lists (docs/rendering.md)

Every other route needs ``Authorization: Bearer <CRAWLER_API_TOKEN>``; the API does
not start without a token. Bad input gets a 4xx with ``{"error": "..."}``; Kafka or
Cassandra not answering (down, overloaded) a 503 with Retry-After; an unexpected
failure is logged and answered with a generic 500.

Embedded mode (``crawler crawl`` with ``CRAWLER_API_PORT`` set) gives the API the
running :class:`~frontier.service.Frontier`, so every change takes effect at once.
Cluster mode (``crawler api`` / ``python -m crawler.api``) has only the bus and the
store: seeds are published on topic discovered like ``crawler seed`` does; a host
change travels as a :class:`~common.messages.HostControl` on topic control, keyed by
the host, so the one frontier that owns the host applies it to its live row (answer
202 with the row as it will be); pause, resume and blocked path patterns are the
store's control row, which every frontier reads every ``CRAWLER_CRAWL_CONTROL_INTERVAL``
seconds; so is the operator's crawl scope. A paused crawl dispatches nothing new;
requests in flight finish. Blocking a pattern (or narrowing the scope) rejects matching
URLs as they are discovered or reach the head of their queue; unblocking (widening) does
not bring back URLs rejected meanwhile.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Literal, TypeVar

import msgspec
from aiohttp import web

from common import urls
from common.adapters.handling import dependency_down, describe
from common.clock import wall_clock
from common.httplog import server_logger
from common.messages import HostControl, Topic
from common.metrics import Metrics
from common.patterns import PatternError, compile_operator_pattern
from common.ports import Bus, CrawlControl, HostState, ScopeRules, StateStore
from common.scope import checked_rules, rules_from_settings
from common.settings import ApiSettings, Settings, SettingsError
from crawler.openapi import (
    MAX_DELAY_SECONDS,
    MAX_PAGES_LIMIT,
    MAX_PATTERN_CHARS,
    MAX_PATTERNS,
    MAX_SCOPE_ENTRIES,
    MAX_SCOPE_ENTRY_CHARS,
    MAX_SEED_URLS,
    MAX_URL_CHARS,
    OPENAPI,
)
from frontier.policy import apply_host_control
from frontier.seeds import publish_batch, seed_batch
from frontier.service import Frontier
from frontier.stats import CrawlStats, collect

log = logging.getLogger(__name__)

T = TypeVar("T")

PUBLIC_PATHS = frozenset({"/v1/health", "/v1/openapi.json"})
MAX_BODY_BYTES = 16 * 1024 * 1024  # room for MAX_SEED_URLS long URLs
MAX_HOST_CHARS = 300


class ApiError(Exception):
    """An answer with a 4xx/5xx status and a message for the client."""

    def __init__(self, status: int, message: str,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers or {}


# ---------------------------------------------------------------------- pure helpers

def require_token(settings: ApiSettings) -> str:
    """The configured token; an empty one is a :class:`SettingsError`."""
    if not settings.token:
        raise SettingsError("CRAWLER_API_TOKEN: must be set to serve the control API "
                            "(every route but /v1/health needs it)")
    return settings.token


def authorized(header: str | None, token: str) -> bool:
    """True if ``header`` is ``Bearer <token>`` (scheme case-insensitive), compared in
    constant time."""
    if not header or not token:
        return False
    scheme, _, given = header.strip().partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(given.strip().encode("utf-8", "surrogateescape"),
                               token.encode("utf-8", "surrogateescape"))


class SeedRequest(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    urls: Annotated[list[Annotated[str, msgspec.Meta(max_length=MAX_URL_CHARS)]],
                    msgspec.Meta(min_length=1, max_length=MAX_SEED_URLS)]
    priority: Annotated[int, msgspec.Meta(ge=0)] | None = None


class HostUpdate(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, rename="camel"):
    crawl_delay_seconds: (Annotated[float, msgspec.Meta(ge=0, le=MAX_DELAY_SECONDS)]
                          | msgspec.UnsetType | None) = msgspec.UNSET
    blocked: bool | msgspec.UnsetType = msgspec.UNSET
    max_pages: (Annotated[int, msgspec.Meta(ge=0, le=MAX_PAGES_LIMIT)]
                | msgspec.UnsetType) = msgspec.UNSET


def decode_body(body: bytes, kind: type[T]) -> T:
    """Decode a JSON body; invalid JSON is a 400, a body of the wrong shape a 422."""
    try:
        return msgspec.json.decode(body, type=kind)
    except msgspec.ValidationError as exc:
        raise ApiError(422, f"invalid body: {exc}") from None
    except msgspec.DecodeError as exc:
        raise ApiError(400, f"body is not valid JSON: {exc}") from None


def parse_seed_request(body: bytes, settings: Settings) -> SeedRequest:
    req = decode_body(body, SeedRequest)
    levels = settings.crawl.priority_levels
    if req.priority is not None and req.priority >= levels:
        raise ApiError(422, f"invalid body: priority must be below {levels} "
                            "(CRAWLER_CRAWL_PRIORITY_LEVELS)")
    return req


def parse_host_update(body: bytes) -> HostUpdate:
    update = decode_body(body, HostUpdate)
    if (update.crawl_delay_seconds is msgspec.UNSET and update.blocked is msgspec.UNSET
            and update.max_pages is msgspec.UNSET):
        raise ApiError(422, "invalid body: give at least one of crawlDelaySeconds, "
                            "blocked, maxPages")
    return update


def parse_host(raw: str) -> str:
    """The host key of a path parameter (``News.Test:80`` -> ``news.test``); a name no
    host can have (``-x-``, ``x..test``) is a 400, as such a seed is refused."""
    if not raw or len(raw) > MAX_HOST_CHARS or any(c in raw for c in "/\\?#@ \t\r\n"):
        raise ApiError(400, f"not a host name: {raw[:80]!r}")
    try:
        key = urls.host_key(f"http://{raw}/")
    except (urls.UrlError, ValueError):
        raise ApiError(400, f"not a host name: {raw[:80]!r}") from None
    problem = urls.host_name_problem(key)  # the rule seeds follow (frontier.seeds)
    if problem:
        raise ApiError(400, f"not a host name: {raw[:80]!r}: {problem}")
    return key


def host_control(host: str, update: HostUpdate, now: float) -> HostControl:
    """The control message that carries ``update`` to the host's frontier."""
    delay = update.crawl_delay_seconds
    return HostControl(
        host=host,
        delay=delay if isinstance(delay, float) else None,
        clear_delay=delay is None,
        blocked=update.blocked if isinstance(update.blocked, bool) else None,
        max_pages=update.max_pages if isinstance(update.max_pages, int) else None,
        issued_at=now)


class PathPattern(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    pattern: Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_PATTERN_CHARS)]


_RenderHost = Annotated[str, msgspec.Meta(min_length=1, max_length=253)]
_RenderPattern = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_PATTERN_CHARS)]


class RenderRulesBody(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    hosts: Annotated[list[_RenderHost], msgspec.Meta(max_length=MAX_PATTERNS)]
    patterns: Annotated[list[_RenderPattern], msgspec.Meta(max_length=MAX_PATTERNS)]


def with_render_rules(control: CrawlControl, body: bytes, now: float) -> CrawlControl:
    """Pure: ``control`` with the render rules of ``body`` (patterns checked like
    blocked paths; hosts lower-cased, without a trailing dot)."""
    rules = decode_body(body, RenderRulesBody)
    hosts = list(dict.fromkeys(h.strip().lower().rstrip(".") for h in rules.hosts))
    if any(not h.strip(".") or any(c.isspace() or c in "/:@" for c in h) for h in hosts):
        raise ApiError(422, "invalid body: a host is a name like example.com or .example.com")
    patterns = [check_pattern(p) for p in dict.fromkeys(rules.patterns)]
    return msgspec.structs.replace(control, render_hosts=hosts, render_patterns=patterns,
                                   updated_at=now)


def check_pattern(pattern: str) -> str:
    """A blocked-path pattern must be a regular expression RE2 runs (linear-time
    matching: see common.patterns); anything else is a 422 that says why."""
    if not pattern or len(pattern) > MAX_PATTERN_CHARS:
        raise ApiError(422, f"invalid pattern: 1 to {MAX_PATTERN_CHARS} characters")
    try:
        compile_operator_pattern(pattern)
    except PatternError as exc:
        raise ApiError(422, f"invalid pattern: {exc}") from None
    return pattern


def with_pattern(control: CrawlControl, pattern: str, now: float) -> CrawlControl:
    """Pure: ``control`` with ``pattern`` added (once)."""
    if pattern in control.blocked_paths:
        return control
    if len(control.blocked_paths) >= MAX_PATTERNS:
        raise ApiError(409, f"already {MAX_PATTERNS} blocked path patterns; remove one first")
    return msgspec.structs.replace(control, blocked_paths=[*control.blocked_paths, pattern],
                                   updated_at=now)


def without_pattern(control: CrawlControl, pattern: str, now: float) -> CrawlControl:
    """Pure: ``control`` without ``pattern``; a 404 if it is not there."""
    if pattern not in control.blocked_paths:
        raise ApiError(404, f"no such blocked path pattern: {pattern[:200]!r}")
    return msgspec.structs.replace(
        control, blocked_paths=[p for p in control.blocked_paths if p != pattern],
        updated_at=now)


_ScopeEntries = Annotated[list[Annotated[str, msgspec.Meta(max_length=MAX_SCOPE_ENTRY_CHARS)]],
                          msgspec.Meta(max_length=MAX_SCOPE_ENTRIES)]


class ScopeUpdate(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, rename="camel"):
    mode: Literal["any", "seed-hosts", "seed-domains"] | msgspec.UnsetType = msgspec.UNSET
    allow_domains: _ScopeEntries | msgspec.UnsetType = msgspec.UNSET
    deny_domains: _ScopeEntries | msgspec.UnsetType = msgspec.UNSET
    path_prefixes: _ScopeEntries | msgspec.UnsetType = msgspec.UNSET
    no_parent: bool | msgspec.UnsetType = msgspec.UNSET


_CAMEL = {"mode": "mode", "allow_domains": "allowDomains", "deny_domains": "denyDomains",
          "path_prefixes": "pathPrefixes", "no_parent": "noParent"}


def parse_scope_update(body: bytes, current: ScopeRules) -> ScopeRules:
    """Pure: the scope after a ``PUT /v1/scope`` body (fields left out keep their value
    in ``current``); every entry checked and normalised, or a 4xx."""
    update = decode_body(body, ScopeUpdate)
    given = {name: getattr(update, name) for name in _CAMEL
             if getattr(update, name) is not msgspec.UNSET}
    if not given:
        raise ApiError(422, "invalid body: give at least one of " + ", ".join(_CAMEL.values()))
    merged = {name: getattr(current, name) for name in _CAMEL} | given
    try:
        return checked_rules(**merged)
    except ValueError as exc:
        field, _, why = str(exc).partition(": ")
        raise ApiError(422, f"invalid body: {_CAMEL.get(field, field)}: {why}") from None


def scope_json(rules: ScopeRules, source: str) -> dict[str, Any]:
    return {"mode": rules.mode, "allowDomains": list(rules.allow_domains),
            "denyDomains": list(rules.deny_domains),
            "pathPrefixes": list(rules.path_prefixes), "noParent": rules.no_parent,
            "source": source}


def host_json(state: HostState) -> dict[str, Any]:
    return {"host": state.host, "crawlDelaySeconds": state.delay_override,
            "robotsCrawlDelaySeconds": state.crawl_delay, "blocked": state.blocked,
            "maxPages": state.max_pages, "pageCount": state.page_count,
            "capped": state.capped}


def _json(data: Any, status: int = 200, headers: dict[str, str] | None = None
          ) -> web.Response:
    return web.Response(body=msgspec.json.encode(data), status=status,
                        content_type="application/json", headers=headers)


def error_response(status: int, message: str, headers: dict[str, str] | None = None
                   ) -> web.Response:
    return _json({"error": message}, status, headers)


# ---------------------------------------------------------------------- the app

class ControlApi:
    """The control API over a bus and a store, and in embedded mode the frontier."""

    def __init__(self, settings: Settings, bus: Bus, store: StateStore, *,
                 frontier: Frontier | None = None,
                 stats: Callable[[], Awaitable[CrawlStats]] | None = None) -> None:
        self.token = require_token(settings.api)
        self.settings = settings
        self.bus = bus
        self.store = store
        self.frontier = frontier
        self._stats = stats
        self.tracking = urls.TrackingRules.from_settings(settings.urls)
        self.settings_scope = rules_from_settings(settings.scope)
        self._runner: web.AppRunner | None = None
        self._port: int | None = None

    # -------------------------------------------------------------- middleware

    @web.middleware
    async def _errors(self, request: web.Request,
                      handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                      ) -> web.StreamResponse:
        try:
            return await handler(request)
        except ApiError as exc:
            return error_response(exc.status, exc.message, exc.headers)
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            headers = {"Allow": exc.headers["Allow"]} if "Allow" in exc.headers else None
            return error_response(exc.status, exc.reason, headers)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            down = dependency_down(exc)
            if down is not None:  # Kafka or Cassandra cannot answer now: try again later
                log.warning("control API: %s %s: %s is not available (%s)", request.method,
                            request.path, down, describe(exc))
                what = {"bus": "the message bus (Kafka)",
                        "store": "the state store (Cassandra)"}.get(down, down)
                return error_response(503, f"{what} cannot answer now; try again",
                                      {"Retry-After": "5"})
            log.exception("control API: %s %s failed", request.method, request.path)
            return error_response(500, "internal error")

    @web.middleware
    async def _auth(self, request: web.Request,
                    handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                    ) -> web.StreamResponse:
        if request.path not in PUBLIC_PATHS and not authorized(
                request.headers.get("Authorization"), self.token):
            raise ApiError(401, "missing or wrong bearer token",
                           {"WWW-Authenticate": 'Bearer realm="crawler"'})
        return await handler(request)

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._errors, self._auth],
                              client_max_size=MAX_BODY_BYTES)
        app.add_routes([
            web.get("/v1/health", self.health),
            web.get("/v1/openapi.json", self.openapi),
            web.post("/v1/seeds", self.seeds),
            web.get("/v1/stats", self.stats),
            web.get("/v1/hosts/{host}", self.get_host),
            web.put("/v1/hosts/{host}", self.put_host),
            web.post("/v1/pause", self.pause),
            web.post("/v1/resume", self.resume),
            web.get("/v1/blocked-paths", self.get_blocked_paths),
            web.post("/v1/blocked-paths", self.add_blocked_path),
            web.delete("/v1/blocked-paths", self.remove_blocked_path),
            web.get("/v1/render", self.get_render),
            web.put("/v1/render", self.put_render),
            web.get("/v1/scope", self.get_scope),
            web.put("/v1/scope", self.put_scope),
            web.delete("/v1/scope", self.reset_scope),
        ])
        return app

    # -------------------------------------------------------------- handlers

    async def health(self, request: web.Request) -> web.Response:
        return _json({"status": "ok"})

    async def openapi(self, request: web.Request) -> web.Response:
        return _json(OPENAPI)

    async def seeds(self, request: web.Request) -> web.Response:
        req = parse_seed_request(await request.read(), self.settings)
        prio = self.settings.crawl.seed_priority if req.priority is None else req.priority
        batch = seed_batch(req.urls, prio, self.tracking)
        if batch.invalid:
            shown = ", ".join(f"{u[:200]!r} ({why})" for u, why in batch.rejected[:5])
            raise ApiError(422, f"{len(batch.invalid)} of {len(req.urls)} URLs are not "
                                f"crawlable http(s) URLs (none taken): {shown}")
        sent = await publish_batch(self.bus, batch)
        return _json({"accepted": sent, "hosts": len(batch.by_host)}, 202)

    async def stats(self, request: web.Request) -> web.Response:
        figures = await (self._stats() if self._stats is not None else collect(
            self.store, recrawl_interval=self.settings.crawl.recrawl_interval,
            now=wall_clock(self.settings)()))
        return _json(figures)

    async def get_host(self, request: web.Request) -> web.Response:
        host = parse_host(request.match_info["host"])
        state = await self.store.get_host(host)
        if state is None:
            raise ApiError(404, f"no such host in the crawl: {host}")
        return _json(host_json(state))

    async def put_host(self, request: web.Request) -> web.Response:
        host = parse_host(request.match_info["host"])
        update = parse_host_update(await request.read())
        change = host_control(host, update, time.time())
        if self.frontier is not None:
            state = await self.frontier.set_host(change)
            log.info("control API: host %s changed to %s", host, host_json(state))
            return _json(host_json(state))
        # cluster mode: the owning frontier applies the change (it holds the live row);
        # the answer shows the row as it will be
        await self.bus.publish(Topic.CONTROL, host, change)
        state = apply_host_control(await self.store.get_host(host) or HostState(host=host),
                                   change)
        log.info("control API: host %s change sent to its frontier: %s", host,
                 host_json(state))
        return _json(host_json(state), 202)

    async def pause(self, request: web.Request) -> web.Response:
        return await self._set_paused(True)

    async def resume(self, request: web.Request) -> web.Response:
        return await self._set_paused(False)

    async def _set_paused(self, paused: bool) -> web.Response:
        control = msgspec.structs.replace(await self.store.get_control(), paused=paused,
                                          updated_at=time.time())
        await self._put_control(control)
        if self.frontier is not None:
            if paused:
                self.frontier.pause()
            else:
                self.frontier.resume()
        log.info("control API: crawl %s", "paused" if paused else "resumed")
        return _json({"paused": paused})

    async def get_blocked_paths(self, request: web.Request) -> web.Response:
        return _json({"patterns": (await self.store.get_control()).blocked_paths})

    async def add_blocked_path(self, request: web.Request) -> web.Response:
        pattern = check_pattern(decode_body(await request.read(), PathPattern).pattern)
        control = with_pattern(await self.store.get_control(), pattern, time.time())
        await self._put_control(control)
        log.info("control API: path pattern %r blocked", pattern)
        return _json({"patterns": control.blocked_paths})

    async def remove_blocked_path(self, request: web.Request) -> web.Response:
        pattern = request.query.get("pattern")
        if pattern is None:
            raise ApiError(400, "give the pattern to remove as ?pattern=")
        control = without_pattern(await self.store.get_control(), pattern, time.time())
        await self._put_control(control)
        log.info("control API: path pattern %r unblocked", pattern)
        return _json({"patterns": control.blocked_paths})

    async def get_render(self, request: web.Request) -> web.Response:
        control = await self.store.get_control()
        return _json({"hosts": control.render_hosts, "patterns": control.render_patterns})

    async def put_render(self, request: web.Request) -> web.Response:
        control = with_render_rules(await self.store.get_control(), await request.read(),
                                    time.time())
        await self._put_control(control)
        log.info("control API: render hosts %s, patterns %s", control.render_hosts,
                 control.render_patterns)
        return _json({"hosts": control.render_hosts, "patterns": control.render_patterns})

    async def get_scope(self, request: web.Request) -> web.Response:
        scope = (await self.store.get_control()).scope
        return _json(scope_json(self.settings_scope, "settings") if scope is None
                     else scope_json(scope, "operator"))

    async def put_scope(self, request: web.Request) -> web.Response:
        body = await request.read()
        control = await self.store.get_control()
        rules = parse_scope_update(body, control.scope or self.settings_scope)
        await self._put_control(msgspec.structs.replace(control, scope=rules,
                                                        updated_at=time.time()))
        log.info("control API: crawl scope set to %s", rules)
        return _json(scope_json(rules, "operator"))

    async def reset_scope(self, request: web.Request) -> web.Response:
        control = await self.store.get_control()
        await self._put_control(msgspec.structs.replace(control, scope=None,
                                                        updated_at=time.time()))
        log.info("control API: crawl scope back to the settings' %s", self.settings_scope)
        return _json(scope_json(self.settings_scope, "settings"))

    async def _put_control(self, control: CrawlControl) -> None:
        """Store the switches (every frontier reads them); embedded mode applies them to
        its frontier at once."""
        await self.store.put_control(control)
        if self.frontier is not None:
            self.frontier.apply_control(control, pause=False)

    # -------------------------------------------------------------- serving

    async def start(self, host: str | None = None, port: int | None = None) -> None:
        """Listen on ``host:port`` (default: the ``api`` settings; port 0: any free)."""
        # a malformed request is one rate-limited line, not a traceback (common.httplog)
        self._runner = web.AppRunner(self.app(), access_log=None,
                                     logger=server_logger(__name__ + ".http"))
        await self._runner.setup()
        bind = self.settings.api.host if host is None else host
        site = web.TCPSite(self._runner, bind, self.settings.api.port if port is None
                           else port)
        try:
            await site.start()
        except OSError:
            await self._runner.cleanup()
            self._runner = None
            raise
        addresses = self._runner.addresses
        self._port = int(addresses[0][1])
        log.info("control API on %s:%d", bind, self._port)

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("control API not started")
        return self._port

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
            self._port = None


def check_service_settings(settings: Settings) -> None:
    """The API service needs a port and a token; else a :class:`SettingsError`."""
    if not settings.api.port:
        raise SettingsError("CRAWLER_API_PORT: must be set to run the control API")
    require_token(settings.api)


async def run(settings: Settings) -> None:
    """``crawler api``: the control API as its own service (cluster mode)."""
    from common.runtime import make_bus, make_store, run_service

    check_service_settings(settings)
    metrics = Metrics.create(roles=())  # the bus and store bundles
    bus = make_bus(settings, metrics=metrics)
    store = make_store(settings, metrics=metrics)
    await store.open()
    api = ControlApi(settings, bus, store)
    await api.start()
    stopped = asyncio.Event()

    async def stop() -> None:
        await api.stop()
        await bus.stop()
        await store.close()
        stopped.set()

    async def serve() -> None:
        await stopped.wait()

    await run_service("api", [serve()], stop, settings=settings, metrics=metrics)


def main(argv: list[str]) -> int:
    """``python -m crawler.api``: check the settings, then run the service."""
    from common.runtime import service_main

    try:
        check_service_settings(Settings.from_env())
    except SettingsError as exc:
        print(f"api: invalid setting: {exc}", file=sys.stderr)
        return 2
    return service_main("api", run, argv)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(sys.argv[1:]))
