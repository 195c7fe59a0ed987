"""MeteredStateStore: every StateStore call of the real SQLite store is timed by
operation, errors are counted, and results and exceptions pass through unchanged."""

from __future__ import annotations

from pathlib import Path

import pytest

from common.adapters.metered import MeteredStateStore
from common.adapters.sqlite_store import SqliteStateStore
from common.messages import UrlStatus
from common.metrics import STORE_OPERATIONS, Metrics
from common.ports import HostState, StateStore, UrlState
from common.runtime import make_store
from common.settings import Settings


def _samples(metrics: Metrics, operation: str) -> tuple[float, float, float]:
    """(number of timed calls, their summed seconds, errors) of ``operation``."""
    reg = metrics.registry
    labels = {"operation": operation}
    count = reg.get_sample_value("crawler_store_request_duration_seconds_count", labels)
    total = reg.get_sample_value("crawler_store_request_duration_seconds_sum", labels)
    errors = reg.get_sample_value("crawler_store_request_errors_total", labels)
    return count or 0.0, total or 0.0, errors or 0.0


def _row(n: int, **changes: object) -> UrlState:
    row = UrlState(host="a.test", url=f"http://a.test/{n}", discovered_at=float(n))
    for name, value in changes.items():
        setattr(row, name, value)
    return row


@pytest.fixture
def metrics() -> Metrics:
    return Metrics.create((), process=False)


def _protocol_methods() -> set[str]:
    return {name for name, value in vars(StateStore).items()
            if not name.startswith("_") and callable(value)}


def test_the_wrapper_covers_every_state_store_method() -> None:
    methods = _protocol_methods()
    assert {"put_url", "get_url", "content_holder", "record_content"} <= methods
    assert methods <= STORE_OPERATIONS  # each one is a valid operation label
    wrapped = {name for name in dir(MeteredStateStore)
               if not name.startswith("_") and callable(getattr(MeteredStateStore, name))}
    assert methods <= wrapped, f"not wrapped: {sorted(methods - wrapped)}"


async def test_calls_pass_through_and_are_timed(tmp_path: Path, metrics: Metrics) -> None:
    inner = SqliteStateStore(tmp_path / "state.sqlite")
    store: StateStore = MeteredStateStore(inner, metrics.store)
    async with MeteredStateStore(inner, metrics.store) as opened:
        assert opened.inner is inner
        inserted = await store.add_urls([_row(1), _row(2)])
        assert [r.url for r in inserted] == ["http://a.test/1", "http://a.test/2"]
        for n in range(3):
            await store.put_url(_row(3 + n, status=UrlStatus.DONE))
        got = await store.get_url("a.test", "http://a.test/4")
        assert got is not None and got.status is UrlStatus.DONE
        assert await store.get_url("a.test", "http://a.test/none") is None
        await store.put_host(HostState(host="a.test", page_count=4))
        host = await store.get_host("a.test")
        assert host is not None and host.page_count == 4
        counts = await store.count_urls()
        assert counts[(UrlStatus.DONE.value, "")] == 3
    # the file holds what went through the wrapper
    async with SqliteStateStore(tmp_path / "state.sqlite") as plain:
        assert len(await plain.urls_with_status(UrlStatus.DONE, 10)) == 3

    put_count, put_seconds, put_errors = _samples(metrics, "put_url")
    assert put_count == 3 and put_seconds > 0 and put_errors == 0
    assert _samples(metrics, "get_url")[0] == 2
    assert _samples(metrics, "add_urls")[0] == 1
    assert _samples(metrics, "open")[0] == 1 and _samples(metrics, "close")[0] == 1
    assert _samples(metrics, "count_urls")[0] == 1
    assert _samples(metrics, "list_hosts")[0] == 0  # never called: no sample
    # every sample sits in a bucket: the +Inf bucket counts them all
    inf = metrics.registry.get_sample_value(
        "crawler_store_request_duration_seconds_bucket", {"operation": "put_url", "le": "+Inf"})
    assert inf == 3


async def test_a_call_on_a_closed_store_counts_an_error(tmp_path: Path,
                                                        metrics: Metrics) -> None:
    store = MeteredStateStore(SqliteStateStore(tmp_path / "state.sqlite"), metrics.store)
    await store.open()
    await store.put_url(_row(1))
    await store.close()
    with pytest.raises(RuntimeError, match="not open"):
        await store.get_url("a.test", "http://a.test/1")
    assert _samples(metrics, "get_url")[0] == 1  # the failed call is timed too
    assert _samples(metrics, "get_url")[2] == 1
    assert _samples(metrics, "put_url")[2] == 0


async def test_bad_input_rejected_by_sqlite_counts_an_error(tmp_path: Path,
                                                            metrics: Metrics) -> None:
    async with MeteredStateStore(SqliteStateStore(tmp_path / "state.sqlite"),
                                 metrics.store) as store:
        with pytest.raises(OverflowError):
            await store.put_url(_row(1, depth=2**70))  # too large for an SQLite INTEGER
        await store.put_url(_row(2))
        assert await store.get_url("a.test", "http://a.test/1") is None
    assert _samples(metrics, "put_url")[0] == 2
    assert _samples(metrics, "put_url")[2] == 1


class _FailingHosts(SqliteStateStore):
    """The real SQLite store, except that listing hosts fails like a lost disk."""

    async def list_hosts(self) -> list[HostState]:
        raise OSError("disk I/O error")


async def test_errors_are_counted_by_operation(tmp_path: Path, metrics: Metrics) -> None:
    async with MeteredStateStore(_FailingHosts(tmp_path / "state.sqlite"),
                                 metrics.store) as store:
        await store.put_host(HostState(host="b.test"))
        for _ in range(2):
            with pytest.raises(OSError, match="disk I/O error"):
                await store.list_hosts()
        assert await store.get_host("b.test") is not None
    assert _samples(metrics, "list_hosts")[2] == 2
    assert _samples(metrics, "put_host")[2] == 0
    assert _samples(metrics, "get_host")[2] == 0


async def test_make_store_meters_only_when_given_metrics(tmp_path: Path,
                                                         metrics: Metrics) -> None:
    settings = Settings().replace(crawl={"out_dir": str(tmp_path)})
    plain = make_store(settings)
    assert isinstance(plain, SqliteStateStore)
    metered = make_store(settings, metrics=metrics)
    assert isinstance(metered, MeteredStateStore)
    assert isinstance(metered.inner, SqliteStateStore)
    async with metered:
        await metered.put_host(HostState(host="c.test"))
    assert _samples(metrics, "put_host")[0] == 1
