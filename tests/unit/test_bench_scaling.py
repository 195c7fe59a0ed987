"""The known-URL scaling step runs each size several times; the report reads each
size's median row."""

from __future__ import annotations

from typing import Any

from bench import report


def _run(cpu: float, wall: float, rss: int) -> dict[str, Any]:
    return {"known_filler": 1000, "budget": 300, "ms_per_page": wall,
            "cpu_ms_per_page": cpu, "seeding_urls_per_second": 5000.0,
            "rss_seeded_bytes": rss, "seen_filter_bits": 9600, "rss_start_bytes": 50,
            "rss_peak_crawl_bytes": 90, "loadavg_before": [1.5, 1.2, 1.0]}


def test_each_figure_is_the_median_of_the_runs() -> None:
    row = report.scaling_row([_run(10.0, 6.0, 80), _run(8.0, 7.0, 82), _run(12.0, 5.0, 81)])
    assert row["cpu_ms_per_page"] == 10.0 and row["ms_per_page"] == 6.0
    assert row["rss_seeded_bytes"] == 81 and row["known_filler"] == 1000
    assert row["loadavg_before"] == [1.5, 1.2, 1.0]
    assert [r["cpu_ms_per_page"] for r in row["runs"]] == [10.0, 8.0, 12.0]


def test_failed_runs_are_left_out_and_a_size_that_always_failed_keeps_its_error() -> None:
    failed = {"known_filler": 1000, "error": "boom"}
    row = report.scaling_row([failed, _run(9.0, 6.0, 80), _run(11.0, 6.5, 81)])
    assert row["cpu_ms_per_page"] == 9.0  # two runs: the lower middle value
    assert len(row["runs"]) == 2
    assert report.scaling_row([failed]) == failed
    assert "runs" not in report.scaling_row([_run(9.0, 6.0, 80)])


def test_the_goal_ratio_reads_the_medians() -> None:
    small = report.scaling_row([_run(10.0, 6.0, 80), _run(9.0, 5.0, 80), _run(11.0, 7.0, 80)])
    big = {**report.scaling_row([_run(12.0, 7.0, 90), _run(10.0, 6.0, 90),
                                 _run(30.0, 20.0, 90)]), "known_filler": 100_000}
    ratios = report.ratios({"scaling": [small, big]})
    assert ratios["cpu_per_page_largest_vs_smallest"] == 12.0 / 10.0
    assert ratios["time_per_page_largest_vs_smallest"] == 7.0 / 6.0
