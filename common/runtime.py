"""Adapters chosen by settings, and the life of one service process.

``make_bus``, ``make_store`` and ``make_blobs`` build the adapters the settings name
(memory / sqlite / a local folder for embedded mode; kafka / cassandra / a shared
folder for cluster mode). :func:`run_service` runs a service's tasks until SIGTERM or
SIGINT, then stops them in order. :func:`run_loop` runs a process's main coroutine on
uvloop's event loop.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from common.adapters.handling import DEPENDENCIES
from common.adapters.local_blobs import LocalBlobStore
from common.metrics import Metrics
from common.politeness import key_mode, partition_key
from common.ports import BlobStore, Bus, StateStore
from common.ring import HostRing
from common.settings import Settings

if TYPE_CHECKING:
    from common.adapters.s3_blobs import S3Config

log = logging.getLogger(__name__)

_T = TypeVar("_T")


def run_loop(main: Coroutine[Any, Any, _T]) -> _T:
    """Run ``main`` to its end on a new event loop and close the loop, as
    :func:`asyncio.run` does, on uvloop's loop (libuv's, written in C) where uvloop is
    installed (a dependency on Linux and macOS), else on asyncio's own. The stages are
    the same asyncio code on either; uvloop schedules callbacks and moves socket data
    for less CPU (measured in docs/cost.md: about 2% of embedded mode's CPU per page,
    5% of the cluster services')."""
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        return runner.run(main)


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's ``new_event_loop``, or None (asyncio's default loop) without uvloop."""
    try:
        import uvloop
    except ImportError:
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def make_bus(settings: Settings, *, metrics: Metrics | None = None,
             instance_id: str | None = None) -> Bus:
    """The bus the settings name; with ``metrics``, it records into ``metrics.bus``.
    ``instance_id`` (Kafka): the process's consumers are static group members (see
    :class:`~common.adapters.kafka.KafkaBus`)."""
    mode = key_mode(settings.politeness.key)
    # hosts that share a politeness key share a partition (one owner holds its timer)
    ring = HostRing(settings.bus.partitions,
                    key=None if mode == "host" else lambda host: partition_key(host, mode))
    bus_metrics = metrics.bus if metrics is not None else None
    if settings.bus.backend == "kafka":
        from common.adapters.kafka import KafkaBus

        return KafkaBus(settings.bus, ring=ring, metrics=bus_metrics, instance_id=instance_id)
    from common.adapters.memory_bus import MemoryBus

    return MemoryBus(settings.bus, partitioner=ring, metrics=bus_metrics)


def make_store(settings: Settings, *, metrics: Metrics | None = None,
               owner: bool = False) -> StateStore:
    """The state store the settings name; with ``metrics``, every call is timed into
    ``metrics.store`` (see :class:`~common.adapters.metered.MeteredStateStore`).
    ``owner``: the store of a frontier, the one writer of its hosts' URL rows, which
    may keep them in memory (``CRAWLER_STORE_ROW_CACHE``)."""
    store: StateStore
    if settings.store.backend == "cassandra":
        from common.adapters.cassandra import CassandraStateStore

        store = CassandraStateStore(
            settings.store,
            on_statement=metrics.store.count_statement if metrics is not None else None,
            row_cache=settings.store.row_cache if owner else 0)
    else:
        from common.adapters.sqlite_store import SqliteStateStore

        store = SqliteStateStore(state_path(settings))
    if metrics is None:
        return store
    from common.adapters.metered import MeteredStateStore

    return MeteredStateStore(store, metrics.store)


def state_path(settings: Settings) -> Path:
    return Path(settings.store.sqlite_path or Path(settings.crawl.out_dir) / "state.sqlite")


def blob_root(settings: Settings) -> Path:
    return Path(settings.blob.root or Path(settings.crawl.out_dir) / "warc")


def writer_id(role: str) -> str:
    """A name no other running process uses: role, host name and process id."""
    host = socket.gethostname().split(".")[0] or "host"
    return f"{role}-{host}-{os.getpid()}"


def make_blobs(settings: Settings, writer: str, *, root: str | None = None,
               metrics: Metrics | None = None) -> BlobStore:
    """The blob store the settings name, writing in ``root`` (default: the settings'
    folder): files in that folder (``local``) or uploaded from it to a bucket (``s3``,
    :mod:`common.adapters.s3_blobs`; the folder is its spool, and ``metrics`` count its
    uploads)."""
    b = settings.blob
    folder = root if root is not None else str(blob_root(settings))
    if b.backend == "s3":
        from common.adapters.s3_blobs import S3BlobStore

        return S3BlobStore(folder, s3_config(settings), writer_id=writer, prefix=b.prefix,
                           max_bytes=b.warc_max_bytes,
                           metrics=metrics.blob if metrics is not None else None)
    return LocalBlobStore(folder, writer_id=writer, prefix=b.prefix,
                          max_bytes=b.warc_max_bytes)


def s3_config(settings: Settings) -> S3Config:
    from common.adapters.s3_blobs import S3Config

    b = settings.blob
    return S3Config(bucket=b.s3_bucket, endpoint=b.s3_endpoint.rstrip("/"),
                    region=b.s3_region, key_prefix=b.s3_prefix.strip("/"),
                    path_style=b.s3_path_style, credentials_file=b.s3_credentials_file,
                    profile=b.s3_profile, multipart_bytes=b.s3_multipart_bytes,
                    part_bytes=b.s3_part_bytes, upload_wait=b.s3_upload_wait,
                    keep_uploaded=b.s3_keep_uploaded)


async def run_service(name: str, tasks: Sequence[Awaitable[None]],
                      stop: Callable[[], Awaitable[None]], *,
                      settings: Settings | None = None,
                      metrics: Metrics | None = None) -> None:
    """Run ``tasks`` until SIGTERM/SIGINT or until one of them ends, then ``stop``.

    With ``settings.metrics.port`` set, /metrics, /healthz and /readyz are served
    meanwhile (ready once the service's adapters are open, which callers do first, and
    not while Kafka or Cassandra is down: see :mod:`common.adapters.handling`).
    """
    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()
    health = None
    if settings is not None and settings.metrics.port:
        from common.metrics import serve_health

        metrics = metrics or Metrics.create(roles=(name,))
        health = await serve_health(settings.metrics, metrics.registry,
                                    ready=lambda: (not stopping.is_set()
                                                   and DEPENDENCIES.healthy))
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stopping.set)
    with contextlib.suppress(NotImplementedError, RuntimeError):
        loop.add_signal_handler(signal.SIGUSR1, dump_tasks)
    running = [asyncio.ensure_future(t) for t in tasks]
    waiter = asyncio.ensure_future(stopping.wait())
    log.info("%s running", name)
    try:
        done, _ = await asyncio.wait([*running, waiter], return_when=asyncio.FIRST_COMPLETED)
        for t in done:
            if t is not waiter and not t.cancelled() and t.exception() is not None:
                log.error("%s: task failed: %r", name, t.exception())
    finally:
        log.info("%s stopping", name)
        stopping.set()
        await stop()
        if health is not None:
            await health.stop()
        for t in [*running, waiter]:
            t.cancel()
        for t in running:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.remove_signal_handler(sig)
    failed = [t for t in running if t.done() and not t.cancelled() and t.exception()]
    if failed and not stopping.is_set():
        raise RuntimeError(f"{name} stopped because a task failed") from failed[0].exception()


def setup_logging(verbose: bool = False) -> None:
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")


SERVICE_HELP = {
    "frontier": "One frontier instance: owns the url_state and politeness timers of the "
                "hosts of the partitions the bus assigns it, and hands due URLs to the "
                "fetchers.",
    "fetcher": "One fetcher instance: robots.txt, DNS, the SSRF guard and the HTTP fetch "
               "of each task; writes WARC records.",
    "parser": "One parser instance: charset, links, directives and main text of each "
              "fetched page.",
    "dedup": "One dedup instance: exact and near-duplicate verdicts, and the outlinks of "
             "unique pages.",
    "api": "The control API (needs CRAWLER_API_PORT and CRAWLER_API_TOKEN).",
    "render": "One render instance: loads the pages the render rules "
              "chose in headless Chromium, parses and judges the DOM their scripts built "
              "(docs/rendering.md).",
}

SERVICE_EPILOG = ("Settings come from CRAWLER_<SECTION>_<KEY> environment variables "
                  "(`crawler settings` lists them) and are checked before anything starts; "
                  "an invalid one ends the process with status 2. The service runs until "
                  "SIGTERM or SIGINT; SIGUSR1 logs its task stacks.")


def service_arguments(name: str, argv: Sequence[str], *, prog: str | None = None
                      ) -> argparse.Namespace | int:
    """Parse a service's command line (``-v``, ``--help``); an exit status when the
    process should end at once (0 after ``--help``, 2 after a usage error)."""
    parser = argparse.ArgumentParser(prog=prog or f"crawler {name}",
                                     description=SERVICE_HELP.get(name),
                                     epilog=SERVICE_EPILOG)
    parser.add_argument("-v", "--verbose", action="store_true", help="log INFO messages")
    try:
        return parser.parse_args(list(argv))
    except SystemExit as exc:  # --help, or a usage error (already printed)
        return exc.code if isinstance(exc.code, int) else 2


def service_main(name: str, run: Callable[[Settings], Coroutine[Any, Any, None]],
                 argv: Sequence[str] = ()) -> int:
    """Entry point of a service process: its options (``--help`` ends here), settings
    from the environment, then run."""
    from common.settings import SettingsError

    args = service_arguments(name, argv)
    if isinstance(args, int):
        return args
    setup_logging(verbose=args.verbose)
    try:
        settings = Settings.from_env()
    except SettingsError as exc:
        print(f"{name}: invalid setting: {exc}", file=sys.stderr, flush=True)
        return 2
    try:
        run_loop(run(settings))
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # the process ends with a message, not a traceback
        log.exception("%s failed", name)
        print(f"{name}: {exc}", file=sys.stderr, flush=True)
        return 1
    return 0


_DUMPS: list[Callable[[], str]] = []


def on_dump(describe: Callable[[], str]) -> None:
    """Add a description of a stage's state to what SIGUSR1 logs."""
    _DUMPS.append(describe)


def dump_tasks() -> None:
    """Log the stack of every asyncio task and each stage's state (on SIGUSR1), so a
    running service can explain a stall."""
    import io

    for describe in _DUMPS:
        log.warning("state: %s", describe())
    for task in asyncio.all_tasks():
        out = io.StringIO()
        task.print_stack(limit=12, file=out)
        log.warning("task %s:\n%s", task.get_name(), out.getvalue())
