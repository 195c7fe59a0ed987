"""The control API's OpenAPI 3.0 document, written by hand (served at /v1/openapi.json).

It describes exactly the routes of :mod:`crawler.api`: their bodies, answers and
errors. Every error answer is ``{"error": "<message>"}``.
"""

from __future__ import annotations

from typing import Any

MAX_SEED_URLS = 10_000
MAX_URL_CHARS = 8192
MAX_DELAY_SECONDS = 86_400.0
MAX_PAGES_LIMIT = 1_000_000_000
MAX_PATTERN_CHARS = 1000
MAX_PATTERNS = 1000
MAX_SCOPE_ENTRIES = 1000
MAX_SCOPE_ENTRY_CHARS = 1000


def _error(description: str) -> dict[str, Any]:
    return {"description": description,
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}


def _ok(description: str, schema: str) -> dict[str, Any]:
    return {"description": description,
            "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{schema}"}}}}


_UNAUTHORIZED = _error("No valid `Authorization: Bearer <token>` header.")
_BAD_JSON = _error("The body is not valid JSON.")
_INVALID = _error("The body has a wrong type, an unknown field or a value out of range.")
_TOO_LARGE = _error("The body is larger than the API accepts.")

_HOST_PARAM: dict[str, Any] = {
    "name": "host", "in": "path", "required": True,
    "description": "Host key: lower-case host name, with the port when it is not the "
                   "default one (`news.test`, `example.org:8080`). A name is "
                   "dot-separated labels of 1-63 letters, digits, `-` and `_`, not "
                   "starting or ending with `-` (as for seed URLs); anything else is a "
                   "400.",
    "schema": {"type": "string"},
}

OPENAPI: dict[str, Any] = {
    "openapi": "3.0.3",
    "info": {
        "title": "Crawler control API",
        "version": "1",
        "description": (
            "Operate a running crawl: add seed URLs, read its figures, change per-host "
            "politeness overrides, block and unblock path patterns, set the crawl "
            "scope, pause and resume. "
            "Every route but `/v1/health` and `/v1/openapi.json` needs the bearer token "
            "(`CRAWLER_API_TOKEN`).\n\n"
            "In cluster mode (`crawler api`), `PUT /v1/hosts/{host}` sends the change to "
            "the frontier that owns the host, which applies it to its live row (202); "
            "pause, resume, blocked path patterns and the scope are stored, and every "
            "frontier reads them every `CRAWLER_CRAWL_CONTROL_INTERVAL` seconds. Embedded mode "
            "applies every change at once."),
    },
    "servers": [{"url": "/"}],
    "components": {
        "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        "schemas": {
            "Error": {
                "type": "object", "required": ["error"],
                "properties": {"error": {"type": "string"}},
            },
            "SeedRequest": {
                "type": "object", "required": ["urls"], "additionalProperties": False,
                "properties": {
                    "urls": {"type": "array", "minItems": 1, "maxItems": MAX_SEED_URLS,
                             "items": {"type": "string", "maxLength": MAX_URL_CHARS},
                             "description": "http or https URLs; all must be valid, else "
                                            "none is taken."},
                    "priority": {"type": "integer", "minimum": 0, "nullable": True,
                                 "description": "Priority level, below "
                                                "`CRAWLER_CRAWL_PRIORITY_LEVELS` (0 is the "
                                                "highest); default "
                                                "`CRAWLER_CRAWL_SEED_PRIORITY`."},
                },
            },
            "SeedResponse": {
                "type": "object", "required": ["accepted", "hosts"],
                "properties": {"accepted": {"type": "integer", "minimum": 0},
                               "hosts": {"type": "integer", "minimum": 0}},
            },
            "HostUpdate": {
                "type": "object", "additionalProperties": False,
                "minProperties": 1,
                "properties": {
                    "crawlDelaySeconds": {"type": "number", "minimum": 0,
                                          "maximum": MAX_DELAY_SECONDS, "nullable": True,
                                          "description": "Delay override; null removes it."},
                    "blocked": {"type": "boolean"},
                    "maxPages": {"type": "integer", "minimum": 0,
                                 "maximum": MAX_PAGES_LIMIT},
                },
            },
            "Host": {
                "type": "object",
                "required": ["host", "crawlDelaySeconds", "robotsCrawlDelaySeconds",
                             "blocked", "maxPages", "pageCount", "capped"],
                "properties": {
                    "host": {"type": "string"},
                    "crawlDelaySeconds": {"type": "number", "nullable": True},
                    "robotsCrawlDelaySeconds": {"type": "number", "nullable": True},
                    "blocked": {"type": "boolean"},
                    "maxPages": {"type": "integer", "nullable": True},
                    "pageCount": {"type": "integer"},
                    "capped": {"type": "boolean"},
                },
            },
            "Stats": {
                "type": "object",
                "description": "The crawl's figures (frontier.stats.CrawlStats).",
                "required": ["fetched", "kept", "queued", "known_urls", "hosts", "errors"],
                "properties": {
                    **{name: {"type": "integer", "minimum": 0} for name in (
                        "fetched", "kept", "exact_duplicates", "near_duplicates",
                        "not_modified", "redirects", "robots_blocked", "blocked",
                        "out_of_scope", "host_capped_urls", "hosts_capped", "trap_cut",
                        "dead", "queued", "in_flight", "awaiting_parse", "known_urls", "hosts")},
                    **{name: {"type": "integer", "minimum": 0, "nullable": True,
                              "description": "This run of the process that runs the "
                                             "frontier (embedded mode); null elsewhere."}
                       for name in ("seen_filter_skipped", "invalid_links")},
                    "errors": {"type": "object",
                               "additionalProperties": {"type": "integer"}},
                },
            },
            "Paused": {
                "type": "object", "required": ["paused"],
                "properties": {"paused": {"type": "boolean"}},
            },
            "PathPattern": {
                "type": "object", "required": ["pattern"], "additionalProperties": False,
                "properties": {"pattern": {
                    "type": "string", "minLength": 1, "maxLength": MAX_PATTERN_CHARS,
                    "description": "A regular expression in RE2 syntax (matched in "
                                   "linear time, so no backreferences or lookaround), "
                                   "searched in the URL's path and query (`/a/b?x=1`)."}},
            },
            "RenderRules": {
                "type": "object", "required": ["hosts", "patterns"],
                "additionalProperties": False,
                "description": "Pages always rendered in headless Chromium (on top of "
                               "CRAWLER_RENDER_HOSTS and CRAWLER_RENDER_PATTERNS; "
                               "docs/rendering.md).",
                "properties": {
                    "hosts": {"type": "array", "maxItems": MAX_PATTERNS, "items": {
                        "type": "string", "minLength": 1, "maxLength": 253,
                        "description": "A host; a leading '.' covers its subdomains."}},
                    "patterns": {"type": "array", "maxItems": MAX_PATTERNS, "items": {
                        "type": "string", "minLength": 1, "maxLength": MAX_PATTERN_CHARS,
                        "description": "An RE2 regular expression searched in the "
                                       "URL's path and query."}},
                },
            },
            "PathPatterns": {
                "type": "object", "required": ["patterns"],
                "properties": {"patterns": {"type": "array", "items": {"type": "string"}}},
            },
            "ScopeUpdate": {
                "type": "object", "additionalProperties": False, "minProperties": 1,
                "description": "Fields left out keep their value.",
                "properties": {
                    "mode": {"type": "string", "enum": ["any", "seed-hosts", "seed-domains"],
                             "description": "any: every host; seed-hosts: the seeds' "
                                            "hosts (and hosts a seed redirects to); "
                                            "seed-domains: hosts under the seeds' "
                                            "registered domains (Public Suffix List)."},
                    **{name: {"type": "array", "maxItems": MAX_SCOPE_ENTRIES,
                              "items": {"type": "string",
                                        "maxLength": MAX_SCOPE_ENTRY_CHARS},
                              "description": text}
                       for name, text in (
                           ("allowDomains", "Domains links may also lead to (each with "
                                            "its subdomains); with mode any, only these."),
                           ("denyDomains", "Domains never followed (each with its "
                                           "subdomains); wins over every allow rule."),
                           ("pathPrefixes", "Paths URLs must stay under on every host "
                                            "(`/docs`: /docs and /docs/..., not /docsx)."))},
                    "noParent": {"type": "boolean",
                                 "description": "On a seed's host, stay under the folder "
                                                "of one of its seeds (wget --no-parent)."},
                },
            },
            "Scope": {
                "type": "object",
                "required": ["mode", "allowDomains", "denyDomains", "pathPrefixes",
                             "noParent", "source"],
                "properties": {
                    "mode": {"type": "string", "enum": ["any", "seed-hosts", "seed-domains"]},
                    "allowDomains": {"type": "array", "items": {"type": "string"}},
                    "denyDomains": {"type": "array", "items": {"type": "string"}},
                    "pathPrefixes": {"type": "array", "items": {"type": "string"}},
                    "noParent": {"type": "boolean"},
                    "source": {"type": "string", "enum": ["settings", "operator"],
                               "description": "settings: CRAWLER_SCOPE_* (of the API's "
                                              "process); operator: set by PUT /v1/scope."},
                },
            },
            "Health": {
                "type": "object", "required": ["status"],
                "properties": {"status": {"type": "string", "enum": ["ok"]}},
            },
        },
    },
    "security": [{"bearer": []}],
    "paths": {
        "/v1/health": {"get": {
            "operationId": "health", "summary": "Liveness; needs no token.", "security": [],
            "responses": {"200": _ok("The API is serving.", "Health")},
        }},
        "/v1/openapi.json": {"get": {
            "operationId": "openapi", "summary": "This document; needs no token.",
            "security": [],
            "responses": {"200": {"description": "The OpenAPI document.",
                                  "content": {"application/json": {
                                      "schema": {"type": "object"}}}}},
        }},
        "/v1/seeds": {"post": {
            "operationId": "addSeeds", "summary": "Add seed URLs to the crawl.",
            "requestBody": {"required": True, "content": {"application/json": {
                "schema": {"$ref": "#/components/schemas/SeedRequest"}}}},
            "responses": {"202": _ok("The seeds were published to their hosts' "
                                     "frontiers.", "SeedResponse"),
                          "400": _BAD_JSON, "401": _UNAUTHORIZED, "413": _TOO_LARGE,
                          "422": _INVALID},
        }},
        "/v1/stats": {"get": {
            "operationId": "stats", "summary": "The crawl's figures, from the state store.",
            "responses": {"200": _ok("Figures.", "Stats"), "401": _UNAUTHORIZED,
                          "503": _error("The state store cannot answer now (down or "
                                        "overloaded); try again after Retry-After.")},
        }},
        "/v1/hosts/{host}": {
            "parameters": [_HOST_PARAM],
            "get": {
                "operationId": "getHost", "summary": "One host's row.",
                "responses": {"200": _ok("The host.", "Host"),
                              "400": _error("Not a host name."), "401": _UNAUTHORIZED,
                              "404": _error("The crawl does not know the host.")},
            },
            "put": {
                "operationId": "putHost",
                "summary": "Change a host's delay override, block or page cap.",
                "description": "Fields left out keep their value. Embedded mode applies "
                               "the change at once (200); cluster mode sends it to the "
                               "owning frontier and answers with the row as it will be "
                               "(202).",
                "requestBody": {"required": True, "content": {"application/json": {
                    "schema": {"$ref": "#/components/schemas/HostUpdate"}}}},
                "responses": {"200": _ok("The host after the change.", "Host"),
                              "202": _ok("Cluster mode: the change is on its way to the "
                                         "host's frontier; the row as it will be.",
                                         "Host"),
                              "400": _error("Not a host name, or the body is not valid "
                                            "JSON."),
                              "401": _UNAUTHORIZED, "413": _TOO_LARGE, "422": _INVALID},
            },
        },
        "/v1/pause": {"post": {
            "operationId": "pause",
            "summary": "Dispatch no new requests (those in flight finish).",
            "responses": {"200": _ok("Paused.", "Paused"), "401": _UNAUTHORIZED},
        }},
        "/v1/resume": {"post": {
            "operationId": "resume", "summary": "Dispatch again.",
            "responses": {"200": _ok("Running.", "Paused"), "401": _UNAUTHORIZED},
        }},
        "/v1/blocked-paths": {
            "get": {
                "operationId": "getBlockedPaths", "summary": "The blocked path patterns.",
                "responses": {"200": _ok("The patterns.", "PathPatterns"),
                              "401": _UNAUTHORIZED},
            },
            "post": {
                "operationId": "blockPath",
                "summary": "Block URLs whose path and query match a pattern.",
                "description": "Matching URLs are rejected as blocked when they are "
                               "discovered or reach the head of their host's queue. "
                               "Adding a pattern twice is harmless.",
                "requestBody": {"required": True, "content": {"application/json": {
                    "schema": {"$ref": "#/components/schemas/PathPattern"}}}},
                "responses": {"200": _ok("The patterns now.", "PathPatterns"),
                              "400": _BAD_JSON, "401": _UNAUTHORIZED,
                              "409": _error(f"Already {MAX_PATTERNS} patterns."),
                              "413": _TOO_LARGE,
                              "422": _error("Not a regular expression RE2 can run "
                                            "(the message says why), or a wrong body.")},
            },
            "delete": {
                "operationId": "unblockPath", "summary": "Remove a blocked path pattern.",
                "description": "URLs rejected while the pattern was in force stay "
                               "rejected.",
                "parameters": [{"name": "pattern", "in": "query", "required": True,
                                "schema": {"type": "string"}}],
                "responses": {"200": _ok("The patterns now.", "PathPatterns"),
                              "400": _error("No pattern given."), "401": _UNAUTHORIZED,
                              "404": _error("No such pattern.")},
            },
        },
        "/v1/render": {
            "get": {
                "operationId": "getRenderRules",
                "summary": "The operator's render rules (hosts and path patterns).",
                "responses": {"200": _ok("The rules.", "RenderRules"),
                              "401": _UNAUTHORIZED},
            },
            "put": {
                "operationId": "putRenderRules",
                "summary": "Set the hosts and path patterns whose pages are rendered.",
                "description": "Takes effect for pages parsed from then on, within "
                               "CRAWLER_CRAWL_CONTROL_INTERVAL seconds; needs "
                               "CRAWLER_RENDER_ENABLED.",
                "requestBody": {"required": True, "content": {"application/json": {
                    "schema": {"$ref": "#/components/schemas/RenderRules"}}}},
                "responses": {"200": _ok("The rules now.", "RenderRules"),
                              "400": _BAD_JSON, "401": _UNAUTHORIZED, "413": _TOO_LARGE,
                              "422": _error("A pattern RE2 cannot run, or a wrong body.")},
            },
        },
        "/v1/scope": {
            "get": {
                "operationId": "getScope", "summary": "The crawl scope in force.",
                "responses": {"200": _ok("The scope.", "Scope"), "401": _UNAUTHORIZED},
            },
            "put": {
                "operationId": "putScope",
                "summary": "Set the crawl scope: which hosts and paths links may lead to.",
                "description": "Applies to links discovered from now on and to queued URLs "
                               "when they reach the head of their host's queue; URLs "
                               "rejected as out of scope stay rejected if the scope is "
                               "widened later. Seeds are always in scope.",
                "requestBody": {"required": True, "content": {"application/json": {
                    "schema": {"$ref": "#/components/schemas/ScopeUpdate"}}}},
                "responses": {"200": _ok("The scope now.", "Scope"),
                              "400": _BAD_JSON, "401": _UNAUTHORIZED, "413": _TOO_LARGE,
                              "422": _error("An unknown mode, a domain or path prefix "
                                            "that is not one, or a wrong body.")},
            },
            "delete": {
                "operationId": "resetScope",
                "summary": "Go back to the settings' scope (CRAWLER_SCOPE_*).",
                "responses": {"200": _ok("The scope now.", "Scope"), "401": _UNAUTHORIZED},
            },
        },
    },
}
