"""Re-rendering a report folds the raw profile stacks again only when they are still
the ones its figures came from (a later run writes the same file)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import main as bench_main


@pytest.fixture
def raw(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(bench_main, "REPO", tmp_path)
    path = tmp_path / "var" / "bench" / "profile.txt"
    path.parent.mkdir(parents=True)
    path.write_text("process 1:main;f (a.py:1) 7\n")
    return path


def test_the_stacks_a_profile_was_folded_from_are_folded_again(raw: Path) -> None:
    prof = {"raw_file": "var/bench/profile.txt", "raw_sha256": bench_main.file_digest(raw)}
    assert bench_main._raw_is_this_runs(prof)


def test_stacks_written_by_a_later_run_are_not_folded_into_older_figures(raw: Path) -> None:
    prof = {"raw_file": "var/bench/profile.txt", "raw_sha256": bench_main.file_digest(raw)}
    raw.write_text("process 2:main;g (b.py:9) 70\n")
    assert not bench_main._raw_is_this_runs(prof)


def test_results_without_the_stacks_digest_keep_their_tables(raw: Path) -> None:
    assert not bench_main._raw_is_this_runs({"raw_file": "var/bench/profile.txt"})
    assert not bench_main._raw_is_this_runs({"raw_file": "var/bench/missing.txt",
                                            "raw_sha256": "0" * 64})
