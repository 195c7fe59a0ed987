"""The extraction hook: a user's function called with each parsed page.

``CRAWLER_PARSER_HOOK=package.module:function`` names it (loaded by
:func:`common.hooks.load_hook`, checked at start). The parser calls it once per parsed
HTML or PDF page, in the page work (a worker process or a worker thread), with a
:class:`PageView`, and stores the dict it returns as the page record's ``extra``
(docs/extraction-hook.md). What it returns is checked (:func:`check_extra`): a value
that is not a dict with string keys, not JSON-serialisable, or over
``CRAWLER_PARSER_HOOK_MAX_BYTES`` of JSON is dropped and the problem reported; so is
the answer of a call that raised or took longer than ``CRAWLER_PARSER_HOOK_TIMEOUT``.
The page itself is stored either way.

Time limit (:func:`call_hook`): in a worker process, where jobs run on the main
thread, a timer signal (SIGALRM) interrupts a slow call; on a worker thread (cluster
services) the call runs on a thread of its own and is abandoned when late (a thread
cannot be stopped: while :data:`MAX_ABANDONED` abandoned calls still run, the hook is
not called and pages get no extra). A call stuck in C code that ignores the signal is
ended by the page job's own time limit (the page then ends as parse_timeout).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

import msgspec
from selectolax.lexbor import LexborHTMLParser, LexborNode

MAX_ABANDONED = 4  # hook calls left running on threads before the hook is skipped


@dataclass(frozen=True, slots=True)
class PageView:
    """What the hook sees of one page (read-only: a copy of the parser's values).

    ``url`` is the URL crawled, ``final_url`` the URL of the stored response (the same
    unless the archive says otherwise: redirects are pages of their own), ``html`` the
    decoded HTML (None for a PDF or a plain-text page), ``text`` the main text the
    parser stored, ``document_pages`` a PDF's page count (None for HTML)."""

    url: str
    final_url: str
    status: int
    headers: tuple[tuple[str, str], ...]
    content_type: str | None
    html: str | None
    text: str
    title: str | None
    language: str | None
    document_pages: int | None = None
    _tree: list[LexborHTMLParser] = field(default_factory=list, repr=False, compare=False)

    def header(self, name: str) -> str | None:
        """The response header ``name`` (any case); several values joined by ', '."""
        values = [v for k, v in self.headers if k.lower() == name.lower()]
        return ", ".join(values) if values else None

    def document(self) -> LexborHTMLParser | None:
        """The page's HTML parsed by selectolax (lexbor), parsed on first use; None for
        a page without HTML. Changes made to it stay in this view."""
        if self.html is None:
            return None
        if not self._tree:
            self._tree.append(LexborHTMLParser(self.html))
        return self._tree[0]

    def select(self, css: str) -> list[LexborNode]:
        """The elements matching the CSS selector ``css`` (none for a page without
        HTML)."""
        doc = self.document()
        return [] if doc is None else list(doc.css(css))


@dataclass(frozen=True, slots=True)
class HookAnswer:
    """The fields to store (None: none), and what went wrong when they were dropped:
    ``raised``, ``timeout``, ``skipped`` (abandoned calls still running), ``not_dict``,
    ``not_json`` or ``too_big``, with a line saying more."""

    extra: dict[str, Any] | None
    problem: str | None = None
    detail: str | None = None


def check_extra(value: object, max_bytes: int) -> HookAnswer:
    """Pure: ``value`` as a page's extra fields, or why it cannot be one. The fields
    kept are a fresh copy made of JSON values only (a tuple becomes a list)."""
    if not isinstance(value, dict):
        return HookAnswer(None, "not_dict", f"the hook returned a {type(value).__name__}")
    if not all(isinstance(k, str) for k in value):
        return HookAnswer(None, "not_json", "a key that is not a string")
    try:
        encoded = msgspec.json.encode(value)
    except (TypeError, ValueError, OverflowError, RecursionError) as exc:
        return HookAnswer(None, "not_json", f"{type(exc).__name__}: {exc}")
    if len(encoded) > max_bytes:
        return HookAnswer(None, "too_big", f"{len(encoded)} bytes of JSON, over {max_bytes}")
    fields: dict[str, Any] = msgspec.json.decode(encoded)
    return HookAnswer(fields)


class _Late(BaseException):
    """Raised in a hook call by the timer signal (a BaseException, so a hook's own
    ``except Exception`` does not swallow it)."""


_abandoned: set[threading.Thread] = set()
_abandoned_lock = threading.Lock()  # worker threads call hooks at once


def call_hook(hook: Callable[[PageView], object], view: PageView, *, timeout: float,
              max_bytes: int) -> HookAnswer:
    """Call ``hook`` with ``view`` within ``timeout`` seconds and check its answer."""
    if threading.current_thread() is threading.main_thread():
        return _call_with_alarm(hook, view, timeout, max_bytes)
    return _call_on_thread(hook, view, timeout, max_bytes)


def _call_with_alarm(hook: Callable[[PageView], object], view: PageView, timeout: float,
                     max_bytes: int) -> HookAnswer:
    def late(signum: int, frame: FrameType | None) -> None:
        raise _Late

    previous = signal.signal(signal.SIGALRM, late)
    try:
        signal.setitimer(signal.ITIMER_REAL, timeout)
        try:
            value = hook(view)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    except _Late:
        return HookAnswer(None, "timeout", f"took longer than {timeout:g} s")
    except Exception as exc:
        return HookAnswer(None, "raised", f"{type(exc).__name__}: {exc}")
    finally:
        signal.signal(signal.SIGALRM, previous)
    return check_extra(value, max_bytes)


def _call_on_thread(hook: Callable[[PageView], object], view: PageView, timeout: float,
                    max_bytes: int) -> HookAnswer:
    with _abandoned_lock:
        for thread in list(_abandoned):
            if not thread.is_alive():
                _abandoned.discard(thread)
        if len(_abandoned) >= MAX_ABANDONED:
            return HookAnswer(None, "skipped", f"{len(_abandoned)} late hook calls still run")
    answer: list[HookAnswer] = []

    def call() -> None:
        try:
            value = hook(view)
        except Exception as exc:
            answer.append(HookAnswer(None, "raised", f"{type(exc).__name__}: {exc}"))
        else:
            answer.append(check_extra(value, max_bytes))

    thread = threading.Thread(target=call, name="extraction-hook", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        with _abandoned_lock:
            _abandoned.add(thread)
        return HookAnswer(None, "timeout", f"took longer than {timeout:g} s")
    return answer[0]
