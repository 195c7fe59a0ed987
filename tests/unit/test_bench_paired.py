"""Embedded mode against Scrapy, run by run: the report's paired reading."""

from __future__ import annotations

from typing import Any

from bench import report


def _run(tool: str, run: int, pace: float, *, exit_code: int = 0) -> dict[str, Any]:
    return {"tool": tool, "run": run, "exit_code": exit_code, "timed_out": False,
            "pages_per_second": pace, "cpu_seconds_per_1000_pages": 1000 / pace}


def test_each_round_is_a_ratio_and_the_median_is_taken() -> None:
    runs = [_run("embedded", 1, 150.0), _run("scrapy", 1, 100.0),
            _run("scrapy", 2, 200.0), _run("embedded", 2, 220.0),  # a fast round
            _run("embedded", 3, 120.0), _run("scrapy", 3, 100.0)]
    # each tool's median: 150 / 100 = 1.5; round by round: 1.5, 1.1, 1.2
    assert report.paired(runs, "embedded", "scrapy", "pages_per_second") == 1.2


def test_a_failed_run_leaves_its_round_out() -> None:
    runs = [_run("embedded", 1, 150.0), _run("scrapy", 1, 100.0),
            _run("embedded", 2, 300.0), _run("scrapy", 2, 100.0, exit_code=1)]
    assert report.paired(runs, "embedded", "scrapy", "pages_per_second") == 1.5
    assert report.paired(runs, "cluster", "scrapy", "pages_per_second") is None


def test_the_goal_table_shows_the_paired_reading() -> None:
    runs = [_run("embedded", 1, 150.0), _run("scrapy", 1, 100.0)]
    summary = {tool: {"pages_per_second": {"median": pace},
                      "cpu_seconds_per_1000_pages": {"median": 1000 / pace}}
               for tool, pace in (("embedded", 150.0), ("scrapy", 100.0))}
    rows = report._goal_rows({"runs": runs, "summary": summary})
    assert any("Scrapy run beside it" in r and "1.50x pace, 0.67x CPU" in r for r in rows)
