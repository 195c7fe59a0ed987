"""Where the embedded crawler's CPU goes: py-spy samples folded into stages.

py-spy samples every thread of the crawl (the event loop, the SQLite store's worker
thread, the DNS resolver's thread, and with ``--subprocesses`` the page worker
processes) from outside the process, so the profile includes work done off the event
loop and costs the crawl little. Samples whose innermost frame
is a thread waiting for work (the executor's queue, the selector, a sleep) are idle
and left out; the rest are CPU.

Each CPU sample is charged twice:

- to a *component*: walking from the innermost frame outwards, the first frame whose
  file belongs to a known component (SQLite store, WARC writing, URL parsing, SimHash,
  HTML parsing, HTTP client, in-process bus, ...) takes it, so library work is charged
  to the part of the crawler that asked for it only when no closer component matches;
- to a *stage*: the outermost frame in a stage package (frontier, fetcher, parser,
  dedup, the embedded sinks) takes it; the store thread's samples are their own stage.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any

_FRAME = re.compile(r"^(?P<func>.*) \((?P<file>[^()]*?):(?P<line>\d+)\)$")

IDLE_LEAVES = (
    ("concurrent/futures/thread.py", "_worker"),
    ("selectors.py", "select"),
    ("threading.py", "wait"),
    ("pycares/__init__.py", "_run_safe_shutdown_loop"),
    ("queue.py", "get"),
    ("common/adapters/sqlite_store.py", "_work"),  # the store's worker waiting for calls
    ("asyncio/unix_events.py", "_do_waitpid"),  # a thread waiting for a page worker to exit
    ("common/pagework.py", "_recv_exact"),  # a page worker waiting for its next job
)

# (component, path fragments); the first match walking outwards from the leaf wins.
COMPONENTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("thread hand-off (worker results waking the event loop, executor queues)",
     ("_write_to_self", "_read_from_self", "call_soon_threadsafe", "_chain_future",
      "_call_set_state", "_copy_future_state", "concurrent/futures", "threading.py")),
    ("state store (SQLite)", ("common/adapters/sqlite_store.py", "sqlite3/")),
    ("WARC writing (common.archive, warcio, blob files)",
     ("common/archive.py", "warcio/", "common/adapters/local_blobs.py", "gzip.py", "zlib")),
    ("URL parsing and canonical form (common.urls, ada-url)",
     ("common/urls.py", "ada_url/", "urllib/parse.py", "yarl/")),
    ("SimHash and MinHash sketch (common.simhash, common.minhash, simhash, numpy)",
     ("common/simhash.py", "common/minhash.py", "simhash/", "numpy/")),
    ("HTML parsing, links, text (parser, selectolax, resiliparse)",
     ("parser/", "selectolax", "resiliparse", "charset_normalizer/")),
    ("robots.txt (common.robots, protego)",
     ("common/robots.py", "protego", "fetcher/robots_cache.py")),
    ("HTTP client (aiohttp, DNS, SSRF guard)",
     ("aiohttp/", "multidict/", "pycares/", "aiodns/", "fetcher/dns.py", "fetcher/ssrf.py",
      "fetcher/http.py", "ipaddress.py", "socket.py")),
    ("seen filter (frontier.seen, rbloom)", ("frontier/seen.py", "rbloom")),
    ("frontier (policy, queues, timers)", ("frontier/",)),
    ("dedup", ("dedup/",)),
    ("fetcher stage", ("fetcher/",)),
    ("in-process bus and messages (memory_bus, msgspec)",
     ("common/adapters/memory_bus.py", "common/messages.py", "msgspec")),
    ("embedded wiring and page records", ("crawler/",)),
    ("event loop (asyncio, selectors)", ("asyncio/", "selectors.py", "contextlib.py")),
    ("start-up (imports)", ("<frozen importlib", "importlib/")),
)

# (step, (file fragment, function name or "" for any)); inclusive: a sample counts for
# every step with a frame anywhere on its stack, so the steps overlap (link extraction
# includes resolving hrefs; the page's parse is its own step).
STEPS: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = (
    ("charset decoding (parser.charset.decode_html)", (("parser/charset.py", "decode_html"),)),
    ("HTML tree (parser.html.parse_document)", (("parser/html.py", "parse_document"),)),
    ("link extraction (parser.html.extract: links, base, meta robots, title)",
     (("parser/html.py", "extract"),)),
    ("main text (parser.text.extract_main_text)", (("parser/text.py", "extract_main_text"),)),
    ("text signals and SimHash (parser.signals, common.simhash)",
     (("parser/signals.py", "text_signals"), ("common/simhash.py", ""))),
    ("canonical form of links (common.urls.canonicalize)",
     (("common/urls.py", "canonicalize"),)),
    ("seen filter (frontier.seen)", (("frontier/seen.py", ""),)),
    ("SQLite state store (common.adapters.sqlite_store, sqlite3)",
     (("common/adapters/sqlite_store.py", ""), ("sqlite3/", ""))),
    ("WARC records (common.archive, warcio)", (("common/archive.py", ""), ("warcio/", ""))),
    ("robots.txt (common.robots, protego)", (("common/robots.py", ""), ("protego", ""))),
    ("HTTP client (aiohttp)", (("aiohttp/", ""),)),
)


# Steps seen at the leaf only: ISA-L is C code, which py-spy does not show, so its time
# is the leaf frame that calls it (common.archive._serialise compresses each record).
LEAF_STEPS: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = (
    ("WARC compression (ISA-L, in common.archive._serialise)",
     (("common/archive.py", "_serialise"), ("gzip.py", ""), ("zlib", ""))),
)


def _steps(frames: list[tuple[str, str]]) -> list[str]:
    hit = []
    func, file = frames[-1]
    for name, probes in LEAF_STEPS:
        if any(part in file and (not fn or func == fn) for part, fn in probes):
            hit.append(name)
    for name, probes in STEPS:
        if any(part in file and (not fn or func == fn or func.endswith("." + fn))
               for func, file in frames for part, fn in probes):
            hit.append(name)
    return hit


STAGES: tuple[tuple[str, str], ...] = (
    ("frontier", "frontier/"),
    ("fetcher", "fetcher/"),
    ("parser", "parser/"),
    ("dedup", "dedup/"),
    ("page and dead-letter sinks", "crawler/"),
)


def _process_heads(stack: str) -> tuple[list[str], str]:
    """(process frames, rest of the stack). With --subprocesses py-spy begins a stack
    with a ``process PID:"command line"`` frame for each of the process's parents (the
    outermost first) and for the process itself (the last)."""
    heads = []
    while stack.startswith("process "):
        head, _, stack = stack.partition(";")
        heads.append(head)
    return heads, stack


def _process(stack: str) -> tuple[str, str]:
    """(process, rest of the stack) of an embedded crawl's stack."""
    heads, stack = _process_heads(stack)
    if any("common.pagework" in head for head in heads):
        return "page worker processes", stack
    return "main process", stack


def _samples(raw: str) -> list[tuple[str, int]]:
    """(stack, count) pairs. A command line with a line break in it (a spawned worker's
    ``-c`` program) continues the stack on the next line."""
    out: list[tuple[str, int]] = []
    pending = ""
    for line in raw.splitlines():
        pending += line
        stack, _, count = pending.rstrip().rpartition(" ")
        if stack and count.isdigit():
            out.append((stack, int(count)))
            pending = ""
        else:
            pending += "\n"
    return out


def _frames(stack: str) -> list[tuple[str, str]]:
    out = []
    if not stack:
        return out
    for frame in stack.split(";"):
        m = _FRAME.match(frame)
        if m:
            out.append((m.group("func"), m.group("file")))
        else:
            out.append((frame, ""))
    return out


def _idle(frames: list[tuple[str, str]]) -> bool:
    if not frames:
        return True
    func, file = frames[-1]
    return any(file.endswith(f) and func.endswith(fn) for f, fn in IDLE_LEAVES)


def _thread(frames: list[tuple[str, str]], process: str = "main process") -> str:
    if process != "main process":
        return process
    files = " ".join(f for _, f in frames)
    if "sqlite_store.py" in files:
        return "SQLite store thread"
    if any("pycares" in f for f in files.split()):
        return "DNS resolver thread"
    if frames and "threading.py" in frames[0][1]:
        return "worker threads (asyncio.to_thread, executor queues)"
    return "event loop thread"


def _component(frames: list[tuple[str, str]],
               components: tuple[tuple[str, tuple[str, ...]], ...] = COMPONENTS) -> str:
    for func, file in reversed(frames):
        probe = f"{file} {func}"
        for name, parts in components:
            if any(p in probe for p in parts):
                return name
    return "other"


def _stage(frames: list[tuple[str, str]], thread: str) -> str:
    if thread == "SQLite store thread":
        return "state store (SQLite thread)"
    if thread == "page worker processes":
        worker = [f for _, f in frames]
        if any("parser/" in f for f in worker):
            return "parser (page worker processes)"
        if any("fetcher/" in f for f in worker):
            return "fetcher WARC writing (page worker processes)"
        return "page worker processes, other"
    for func, file in frames:
        if "site-packages" in file:
            continue
        for name, part in STAGES:
            if f"/{part}" in f"/{file}":
                if part == "crawler/" and not func.startswith("EmbeddedCrawler._sink"):
                    continue
                return name
    return "event loop, bus and other"


def summarize(raw: str, rate: int) -> dict[str, Any]:
    """Fold py-spy's raw (collapsed) output into components, stages and hot functions."""
    total = 0
    idle = 0
    components: Counter[str] = Counter()
    stages: Counter[str] = Counter()
    threads: Counter[str] = Counter()
    leaves: Counter[str] = Counter()
    steps: Counter[str] = Counter()
    for stack, n in _samples(raw):
        process, stack = _process(stack)
        frames = _frames(stack)
        total += n
        if _idle(frames):
            idle += n
            continue
        thread = _thread(frames, process)
        threads[thread] += n
        components[_component(frames)] += n
        stages[_stage(frames, thread)] += n
        for step in _steps(frames):
            steps[step] += n
        func, file = frames[-1]
        leaves[f"{func} ({_short(file)})"] += n
    busy = total - idle

    def table(c: Counter[str]) -> list[dict[str, Any]]:
        return [{"name": k, "samples": v, "cpu_seconds": v / rate,
                 "share": v / busy if busy else 0.0} for k, v in c.most_common()]

    return {"rate_hz": rate, "samples": total, "idle_samples": idle, "cpu_samples": busy,
            "cpu_seconds": busy / rate, "threads": table(threads),
            "components": table(components), "stages": table(stages),
            "steps": table(steps),
            "hot_functions": table(Counter(dict(leaves.most_common(20))))}


def _short(file: str) -> str:
    for marker in ("site-packages/", "lib/python3.11/"):
        if marker in file:
            return file.split(marker, 1)[1]
    return file


def summarize_file(path: Path, rate: int) -> dict[str, Any]:
    return summarize(path.read_text(errors="replace"), rate)


# ---------------------------------------------------------------- cluster mode

CASSANDRA_DRIVER = "Cassandra driver (cassandra-driver: statements, result rows, its threads)"
KAFKA = "Kafka client and bus (confluent_kafka, common.adapters.kafka, offset tracker)"

# The cluster's own parts first, then the embedded rules (the in-process bus is not
# used in cluster mode; its message encoding is a component of its own here).
CLUSTER_COMPONENTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    # before the driver, whose "cassandra/" its files contain too
    ("Cassandra store adapter (common.adapters.cassandra, rowcodec)",
     ("common/adapters/cassandra/", "common/adapters/rowcodec.py",
      "common/adapters/int64.py")),
    (CASSANDRA_DRIVER, ("cassandra/",)),  # py-spy names a library file from its sys.path entry
    (KAFKA, ("confluent_kafka/", "common/adapters/kafka/",
             "common/adapters/offset_tracker.py")),
    ("message encoding (msgspec, common.messages)", ("common/messages.py", "msgspec")),
    ("metrics (prometheus_client, metered store)",
     ("prometheus_client/", "common/adapters/metered.py", "common/metrics.py")),
    *((name, parts) for name, parts in COMPONENTS if not name.startswith("in-process bus")),
)

CLUSTER_SERVICES = ("frontier", "fetcher", "parser", "dedup")
SUPERVISOR = "benchmark supervisor (left out)"
SEED = "crawler seed (the seeding command)"

_MODULE = re.compile(r"-m (?P<module>[\w.]+)")
_DRIVER_FILE = re.compile(r"(?<!common/adapters/)cassandra/")  # not the store adapter's


def cluster_process(heads: list[str]) -> str:
    """The service a cluster stack belongs to, from the command lines of its process
    and its parents (``python -m crawler frontier``; a page worker counts for the service that
    started it). The outermost process is the benchmark's supervisor."""
    for head in reversed(heads):
        m = _MODULE.search(head)
        if not m:
            continue
        module = m.group("module")
        if module in ("crawler", "crawler.cli"):  # ``python -m crawler fetcher``
            role = head[m.end():].split()
            if role and role[0].strip('"') in CLUSTER_SERVICES:
                return role[0].strip('"')
        if module in CLUSTER_SERVICES:
            return module
        if module == "bench.cluster_child":
            return SUPERVISOR
        if module == "crawler.cli" and " seed" in head:
            return SEED
    if len(heads) == 1:
        # py-spy's own child, the supervisor, whose command line py-spy may read as ""
        # (read before the exec)
        return SUPERVISOR
    return "other process"


def cluster_thread(frames: list[tuple[str, str]]) -> str:
    """Which thread of a service a stack is on: the event loop (the main thread), the
    Kafka client's threads, the Cassandra driver's, the page-work and to_thread
    workers."""
    if not frames or "threading.py" not in frames[0][1]:
        return "event loop (main thread)"
    probe = " ".join(f"{file} {func}" for func, file in frames)
    if "common/adapters/kafka/" in probe and "_poll_thread" in probe:
        return "Kafka consumer polling threads"
    if "common/adapters/kafka/" in probe and "_serve_producer" in probe:
        return "Kafka producer thread"
    if _DRIVER_FILE.search(probe):
        return "Cassandra driver threads"
    if "prometheus_client/" in probe or "socketserver.py" in probe:
        return "metrics server thread"
    if "concurrent/futures" in probe:
        return "worker threads (page work, asyncio.to_thread)"
    return "other threads"


def cluster_component(frames: list[tuple[str, str]], thread: str) -> str:
    """The driver's and the Kafka client's own threads are theirs whatever their
    innermost frame (a socket read, a selector, a callback); else the innermost frame
    that belongs to a known part."""
    if thread == "Cassandra driver threads":
        return CASSANDRA_DRIVER
    if thread.startswith("Kafka "):
        return KAFKA
    return _component(frames, CLUSTER_COMPONENTS)


def summarize_cluster(raw: str, rate: int) -> dict[str, Any]:
    """Fold a cluster crawl's py-spy stacks (``--subprocesses``: one process per
    service under the benchmark's supervisor) by service, component and thread. The
    supervisor's own samples (its completion polls) are counted apart and left out of
    the CPU, as the benchmark leaves out its CPU."""
    total = idle = left_out = 0
    services: Counter[str] = Counter()
    components: Counter[str] = Counter()
    threads: Counter[str] = Counter()
    by_service: dict[str, Counter[str]] = {}
    leaves: Counter[tuple[str, str]] = Counter()
    for stack, n in _samples(raw):
        heads, stack = _process_heads(stack)
        frames = _frames(stack)
        total += n
        if _idle(frames):
            idle += n
            continue
        service = cluster_process(heads)
        if service == SUPERVISOR:
            left_out += n
            continue
        thread = cluster_thread(frames)
        component = cluster_component(frames, thread)
        services[service] += n
        components[component] += n
        threads[f"{service}: {thread}"] += n
        by_service.setdefault(service, Counter())[component] += n
        func, file = frames[-1]
        leaves[(service, f"{func} ({_short(file)})")] += n
    busy = total - idle - left_out

    def table(c: Counter[str]) -> list[dict[str, Any]]:
        return [{"name": k, "samples": v, "cpu_seconds": v / rate,
                 "share": v / busy if busy else 0.0} for k, v in c.most_common()]

    hot = [{"service": service, "name": name, "samples": v, "cpu_seconds": v / rate,
            "share": v / busy if busy else 0.0}
           for (service, name), v in leaves.most_common(20)]
    return {"rate_hz": rate, "samples": total, "idle_samples": idle,
            "left_out_samples": left_out, "cpu_samples": busy, "cpu_seconds": busy / rate,
            "services": table(services), "components": table(components),
            "threads": table(threads),
            "service_components": {s: table(c) for s, c in by_service.items()},
            "hot_functions": hot}


def summarize_cluster_file(path: Path, rate: int) -> dict[str, Any]:
    return summarize_cluster(path.read_text(errors="replace"), rate)
