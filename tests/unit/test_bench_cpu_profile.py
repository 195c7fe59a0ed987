"""The cluster profile's folding (bench/cpu_profile.py) and its report section
(bench/report.py), on small synthetic py-spy stacks."""

from __future__ import annotations

from typing import Any

import pytest

from bench.cpu_profile import (
    CASSANDRA_DRIVER,
    KAFKA,
    SEED,
    SUPERVISOR,
    _process,
    cluster_component,
    cluster_process,
    cluster_thread,
    summarize_cluster,
)
from bench.report import cluster_profile_lines, cluster_split, render

SUP = 'process 10:"/v/bin/python -m bench.cluster_child /tmp/c.json"'
FRONT = SUP + ';process 11:"/v/bin/python -m crawler frontier"'
FETCH = SUP + ';process 12:"/v/bin/python -m crawler fetcher"'
SEEDING = SUP + ';process 13:"/v/bin/python -m crawler.cli seed http://a.test/"'
SP = "/v/lib/python3.11/site-packages/"
LIB = "/p/lib/python3.11/"
MAIN = (f"_run_module_as_main (<frozen runpy>:198);main (/r/fetcher/__main__.py:10);"
        f"run ({LIB}asyncio/runners.py:190)")
THREAD = (f"Thread._bootstrap ({LIB}threading.py:995);"
          f"Thread._bootstrap_inner ({LIB}threading.py:1038);Thread.run ({LIB}threading.py:975)")

RAW = "\n".join([
    # the store adapter calling the driver on the event loop: the driver's (innermost)
    f"{FETCH};{MAIN};CassandraSession._send (/r/common/adapters/cassandra/session.py:200);"
    "Session.execute_async (cassandra/cluster.py:2700) 7",  # as py-spy names files
    # the driver's own I/O thread: the driver's, though its leaf is a socket call
    f"{FETCH};{THREAD};LibevLoop._run_loop ({SP}cassandra/io/libevreactor.py:100);"
    f"SocketIO.recv_into ({LIB}socket.py:706) 3",
    f"{FRONT};{THREAD};ProducerSide._serve_producer (/r/common/adapters/kafka/producer.py:70) 4",
    f"{FRONT};{MAIN};Consumption._handle (/r/common/adapters/kafka/consumer.py:300);"
    "decode_topic (/r/common/messages.py:430) 2",
    f"{FRONT};{MAIN};OffsetTracker.done (/r/common/adapters/offset_tracker.py:50) 1",
    f"{SUP};{MAIN};collect (/r/frontier/stats.py:40) 5",
    f"{SEEDING};{MAIN};seed (/r/crawler/cli.py:500) 1",
    f"{FETCH};{THREAD};_worker ({LIB}concurrent/futures/thread.py:81) 9",
    f"{FETCH};{THREAD};_worker ({LIB}concurrent/futures/thread.py:83);"
    "analyse (/r/parser/service.py:1);parse_document (/r/parser/html.py:10) 6",
])


def _by_name(rows: list[dict[str, Any]]) -> dict[str, int]:
    return {r["name"]: r["samples"] for r in rows}


def test_processes_are_named_by_the_service_in_their_command_line() -> None:
    assert cluster_process([SUP, 'process 11:"/v/bin/python -m frontier"']) == "frontier"
    assert cluster_process([SUP]) == SUPERVISOR
    assert cluster_process([SUP, 'process 13:"python -m crawler.cli seed x"']) == SEED
    # a worker process counts for the service that started it
    worker = 'process 14:"/v/bin/python -m common.pagework"'
    assert cluster_process([SUP, 'process 12:"python -m crawler fetcher"', worker]) == "fetcher"
    assert cluster_process(['process 1:""', 'process 9:"nginx: worker"']) == "other process"
    # py-spy may read its own child's command line before the exec: the outermost
    # process alone is the supervisor
    assert cluster_process(['process 10:""']) == SUPERVISOR
    assert cluster_process(['process 10:""', 'process 11:"python -m dedup"']) == "dedup"
    # the embedded rule is unchanged: page workers apart, the rest the main process
    stack = ('process 1:"python -m crawler.cli crawl";'
             'process 2:"python -m common.pagework";f (a.py:1)')
    assert _process(stack) == ("page worker processes", "f (a.py:1)")
    assert _process('process 1:"python -m crawler.cli crawl";f (a.py:1)')[0] == "main process"


def test_cluster_samples_fold_by_service_component_and_thread() -> None:
    s = summarize_cluster(RAW, 100)
    assert (s["samples"], s["idle_samples"], s["left_out_samples"], s["cpu_samples"]) == (
        38, 9, 5, 24)
    assert s["cpu_seconds"] == 0.24
    assert _by_name(s["services"]) == {"fetcher": 16, "frontier": 7, SEED: 1}
    comps = _by_name(s["components"])
    assert comps[CASSANDRA_DRIVER] == 10  # the event loop's call and the driver's thread
    assert comps[KAFKA] == 5  # the producer thread and the offset tracker
    assert comps["message encoding (msgspec, common.messages)"] == 2
    assert comps["HTML parsing, links, text (parser, selectolax, resiliparse)"] == 6
    assert not any(name.startswith("HTTP client") for name in comps)
    threads = _by_name(s["threads"])
    assert threads["fetcher: Cassandra driver threads"] == 3
    assert threads["frontier: Kafka producer thread"] == 4
    assert threads["fetcher: worker threads (page work, asyncio.to_thread)"] == 6
    assert threads["fetcher: event loop (main thread)"] == 7
    assert _by_name(s["service_components"]["frontier"]) == {
        KAFKA: 5, "message encoding (msgspec, common.messages)": 2}
    top = s["hot_functions"][0]
    assert (top["service"], top["name"], top["samples"]) == (
        "fetcher", "Session.execute_async (cassandra/cluster.py)", 7)


def test_the_store_adapters_files_are_not_the_drivers() -> None:
    """The adapter lives in common/adapters/cassandra/, the driver in cassandra/: a
    frame of the adapter is the adapter's, and a worker thread running only it is no
    driver thread."""
    adapter = [("UrlStateTables._write_host", "/r/common/adapters/cassandra/url_state.py")]
    assert cluster_component(adapter, "event loop (main thread)").startswith(
        "Cassandra store adapter")
    driver = [*adapter, ("Session.execute_async", "cassandra/cluster.py")]
    assert cluster_component(driver, "event loop (main thread)") == CASSANDRA_DRIVER
    worker = [("Thread._bootstrap", f"{LIB}threading.py"),
              ("_worker", f"{LIB}concurrent/futures/thread.py"),
              ("_columns", "/r/common/adapters/cassandra/schema.py"),
              ("sleep", "<built-in>")]
    assert cluster_thread(worker) == "worker threads (page work, asyncio.to_thread)"
    assert cluster_thread([*worker[:3], ("Cluster.refresh_schema_metadata",
                                         "cassandra/cluster.py")]) == \
        "Cassandra driver threads"
    poll = [("Thread._bootstrap", f"{LIB}threading.py"),
            ("Consumption._poll_thread", "/r/common/adapters/kafka/consumer.py")]
    assert cluster_thread(poll) == "Kafka consumer polling threads"


def _results() -> dict[str, Any]:
    prof = summarize_cluster(RAW, 100)
    prof.update({"pages": 12, "wall_seconds": 3.5, "raw_file": "var/bench/cp.txt",
                 "service_cpu": {"fetcher": 0.3, "frontier": 0.12}})
    web = {"spec": {"hosts": 2, "pages_per_host": 6, "links_per_page": 4, "words": 10},
           "mean_page_bytes": 1000, "duplicates": 0, "robots_blocked": 0,
           "expected_fetches": 12}
    return {"cluster_profile": prof, "web": web}


def test_each_process_is_scaled_to_its_cpu_by_the_kernels_count() -> None:
    factor = cluster_split(_results()["cluster_profile"])
    # fetcher: 16 samples (0.16 s) against 0.3 s; frontier 7 against 0.12 s; the seeding
    # command's kernel count is not in this results dict: its samples stand
    assert factor == pytest.approx({"fetcher": 0.3 / 0.16, "frontier": 0.12 / 0.07,
                                    SEED: 1.0})


def test_the_report_renders_the_cluster_profile_section() -> None:
    text = "\n".join(cluster_profile_lines(_results()))
    assert "## Cluster mode: where the Python CPU goes (profiled)" in text
    assert "12 pages by the crawl's own count in 3.5 s" in text
    assert "**24 CPU samples (0.2 s)**" in text
    assert "0.4 CPU seconds, **35.83 ms per page**" in text
    assert "| fetcher | 0.2 | 0.3 | 25.00 |" in text
    assert "| frontier | 0.1 | 0.1 | 10.00 |" in text
    assert f"| {SEED} | 0.0 | 0.0 | 0.83 |" in text
    # the driver: 10 fetcher samples, 0.1 s x 0.3 / 0.16 over 12 pages
    assert f"| {CASSANDRA_DRIVER} | 15.62 | 43.6% |" in text
    assert f"| {KAFKA} | 7.14 | 19.9% |" in text
    # Cassandra 15.62 of 35.83 ms; Kafka 7.14 and message encoding 2 x 0.12 / 0.07 / 12
    assert "Cassandra (the store adapter and the driver) **15.62 ms per page, 44%**" in text
    assert "and message encoding) **10.00 ms per page, 28%**" in text
    assert "- **Cassandra driver** (15.62 ms per page): every store call" in text
    assert "| frontier: Kafka producer thread | 5.71 | 16.7% |" in text
    assert "| fetcher | `Session.execute_async (cassandra/cluster.py)` | 10.94 | 29.2% |" in text
    whole = render(_results(), results_file="bench/results/x.json")
    assert text in whole


def test_the_report_says_when_the_cluster_profile_failed_or_is_absent() -> None:
    failed = "\n".join(cluster_profile_lines({"cluster_profile": {"error": "no py-spy"}}))
    assert "The cluster profile failed: `no py-spy`" in failed
    other = _results()
    other["cluster_profile"]["server_pages"] = 14
    assert ("12 pages by the crawl's own count (the server logged 14 page requests)"
            in "\n".join(cluster_profile_lines(other)))
    assert cluster_profile_lines({}) == []
