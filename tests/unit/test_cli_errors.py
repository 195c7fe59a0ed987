"""The ``crawler`` command and the service entry points refuse what cannot work before
doing anything: a message naming the option or variable and the reason, exit status 2,
no traceback, and no output folder (issue 10, items 4, 5, 6 and 13). Nothing here
sends a packet, even if a check were missing: the seeds are IP literals the SSRF guard
refuses (127.0.0.2, before any connection), so no name is looked up, and the API
commands point at loopback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from common.runtime import service_main
from common.settings import Settings
from crawler import cli
from frontier.stats import CrawlStats

ROOT = Path(__file__).resolve().parents[2]
SEED = "http://127.0.0.2:9/"  # refused by the SSRF guard: nothing is ever sent to it


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for name in list(os.environ):
        if name.startswith("CRAWLER_"):
            monkeypatch.delenv(name)


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = cli.main(argv)
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    return code, captured.err


JUNK_OPTIONS = [
    (["--allow-network", "127.0.0.1/33"], "--allow-network"),
    (["--allow-network", "nope"], "--allow-network"),
    (["--resolve", "garbage"], "--resolve"),
    (["--resolve", "a.test:80:nothost"], "--resolve"),
    (["--dns", "garbage"], "--dns"),
    (["--dns", "127.0.0.1:99999"], "--dns"),
    (["--delay", "nan"], "--delay"),
    (["--delay", "inf"], "--delay"),
    (["--delay", "-1"], "--delay"),
    (["--delay", "soon"], "--delay"),
    (["--politeness-key", "url"], "--politeness-key"),
    (["--max-pages", "-1"], "--max-pages"),
    (["--max-pages", "many"], "--max-pages"),
    (["--max-pages-per-host", "0"], "--max-pages-per-host"),
    (["--max-depth", "-2"], "--max-depth"),
    (["--out", "a\x00b"], "CRAWLER_CRAWL_OUT_DIR"),
    (["--no-such-option"], "unrecognized arguments"),
]


@pytest.mark.parametrize(("extra", "named"), JUNK_OPTIONS)
def test_junk_options_exit_2_naming_the_option_and_create_nothing(
        extra: list[str], named: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    argv = ["crawl", SEED, "--out", str(out), "--no-progress", *extra]
    code, err = run(argv, capsys)
    assert code == 2, err
    assert named in err
    assert not out.exists()


@pytest.mark.parametrize(("variable", "value"), [
    ("CRAWLER_FETCHER_ALLOW_NETWORKS", "127.0.0.1/33"),
    ("CRAWLER_FETCHER_RESOLVE", "garbage"),
    ("CRAWLER_FETCHER_DNS_SERVERS", "garbage"),
    ("CRAWLER_STORE_KEYSPACE", "krunA"),
    ("CRAWLER_BUS_TOPIC_PREFIX", "crawl/x"),
    ("CRAWLER_TRAPS_BLOCKED_PATTERNS", "("),
    ("CRAWLER_BLOB_PREFIX", "../x"),
    ("CRAWLER_PARSER_HOOK", "no_such_module_here:hook"),
    ("CRAWLER_PARSER_HOOK", "tests.hook_support:NOT_CALLABLE"),
    ("CRAWLER_PARSER_HOOK", "tests.hook_support"),
])
def test_junk_settings_exit_2_naming_the_variable_and_create_nothing(
        variable: str, value: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv(variable, value)
    out = tmp_path / "out"
    code, err = run(["crawl", SEED, "--out", str(out), "--no-progress"], capsys)
    assert code == 2, err
    assert f"invalid setting: {variable}:" in err
    assert not out.exists()


def test_rendering_without_a_browser_exits_2_and_creates_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("CRAWLER_RENDER_ENABLED", "true")
    monkeypatch.setenv("CRAWLER_RENDER_BROWSER", str(tmp_path / "no-such-chromium"))
    out = tmp_path / "out"
    code, err = run(["crawl", SEED, "--out", str(out), "--no-progress"], capsys)
    assert code == 2, err
    assert "CRAWLER_RENDER_ENABLED: no Chromium found" in err
    assert not out.exists()


def test_an_output_folder_that_is_a_file_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    file = tmp_path / "passwd"
    file.write_text("root:x:0:0\n")
    for out in (file, file / "below"):
        code, err = run(["crawl", SEED, "--out", str(out)], capsys)
        assert code == 2, err
        assert "is not a folder" in err and str(file) in err
    assert file.read_text() == "root:x:0:0\n"


@pytest.mark.parametrize(("seed", "reason"), [
    ("not-a-url", "not a URL"),
    ("ftp://x/", "only http and https"),
    ("http://", "no host"),
    ("http://exa mple.com/", "white space in the host name"),
    ("example.com/page", "did you mean 'https://example.com/page'"),
])
def test_bad_seeds_are_named_with_the_reason_and_exit_2(
        seed: str, reason: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    code, err = run(["crawl", seed, "--out", str(out), "--no-progress"], capsys)
    assert code == 2, err
    assert f"seed {seed!r} rejected: " in err and reason in err
    assert "cannot be crawled" in err
    assert not out.exists()


def test_every_bad_seed_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    seeds = ["not-a-url", "ftp://x/", "http://", "http://exa mple.com/"]
    code, err = run(["crawl", *seeds, "--out", str(tmp_path / "out")], capsys)
    assert code == 2
    for seed in seeds:
        assert f"seed {seed!r} rejected" in err
    assert "none of the 4 seed URLs can be crawled" in err


def test_a_seed_the_ssrf_guard_refuses_is_named_with_the_class_and_the_setting(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """127.0.0.1 is refused by default: the guard decides before any connection, so
    nothing is sent; the message says why and what would allow it."""
    out = tmp_path / "out"
    code, err = run(["crawl", "http://127.0.0.1:8765/", "--out", str(out)], capsys)
    assert code == 2, err
    assert "seed http://127.0.0.1:8765/ refused: 127.0.0.1 is a loopback address" in err
    assert "CRAWLER_FETCHER_ALLOW_NETWORKS=127.0.0.1/32" in err
    assert "--allow-network 127.0.0.1/32" in err
    assert not out.exists()


def test_a_name_fixed_by_resolve_to_a_refused_address_is_refused_before_start(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    code, err = run(["crawl", "http://meta.test/", "--resolve", "meta.test:*:169.254.169.254",
                     "--allow-network", "169.254.0.0/16", "--out", str(out)], capsys)
    assert code == 2, err
    assert "meta.test resolves to 169.254.169.254 (a cloud metadata address)" in err
    assert "--allow-network 169.254.169.254/32" in err
    assert not out.exists()


def test_resuming_nothing_is_an_error(tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    code, err = run(["crawl", "--out", str(out)], capsys)
    assert code == 2 and "no crawl to resume" in err
    assert not out.exists()


@pytest.mark.parametrize("argv", [
    ["seed", "not-a-url"],
    ["seed", "http://a.test/", "--priority", "9"],
    ["seed", "http://a.test/", "--api", "not a url", "--token", "t"],
    ["seed", "http://a.test/", "--api", "http://127.0.0.1:9", "--token", "t\nX: y"],
    ["seed", "ftp://x/", "--api", "http://127.0.0.1:9", "--token", "t"],
    ["host", "a b", "--api", "http://127.0.0.1:9", "--token", "t"],
    ["host", "a.test", "--delay", "nan", "--api", "http://127.0.0.1:9", "--token", "t"],
    ["host", "a.test", "--delay", "-1", "--api", "http://127.0.0.1:9", "--token", "t"],
    ["host", "a.test", "--max-pages", "-1", "--api", "http://127.0.0.1:9", "--token", "t"],
    ["block-path", "(", "--api", "http://127.0.0.1:9", "--token", "t"],
    ["stats", "--max-pages", "3"],
    ["nonsense"],
])
def test_junk_in_other_commands_exits_2_before_sending(
        argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    # port 9 on loopback (discard) is never reached: every check fails first
    code, _ = run(argv, capsys)
    assert code == 2


@pytest.mark.parametrize("role", ["frontier", "fetcher", "parser", "dedup", "api"])
def test_crawler_role_help_exits_0_with_a_description(
        role: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([role, "--help"]) == 0
    out = capsys.readouterr().out
    assert f"usage: crawler {role}" in out and "CRAWLER_" in out


def test_service_main_answers_help_without_starting(capsys: pytest.CaptureFixture[str]
                                                    ) -> None:
    async def never(settings: Settings) -> None:
        raise AssertionError("the service must not start")

    assert service_main("dedup", never, ["--help"]) == 0
    assert "usage: crawler dedup" in capsys.readouterr().out
    assert service_main("dedup", never, ["--bogus"]) == 2


@pytest.mark.parametrize("module", ["frontier", "fetcher", "parser", "dedup"])
def test_python_m_service_help_exits_0(module: str) -> None:
    done = subprocess.run([sys.executable, "-m", "crawler", module, "--help"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    assert f"usage: crawler {module}" in done.stdout


def test_service_refuses_an_upper_case_keyspace_at_once() -> None:
    done = subprocess.run([sys.executable, "-m", "crawler", "frontier"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "CRAWLER_STORE_KEYSPACE": "krunA",
                               "CRAWLER_STORE_BACKEND": "cassandra"})
    assert done.returncode == 2
    assert "CRAWLER_STORE_KEYSPACE" in done.stderr and "'kruna'" in done.stderr


def test_verbose_after_the_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = run(["stats", "--out", str(tmp_path), "-v"], capsys)
    assert code == 1 and "no crawl state" in err


def test_stats_show_in_flight_and_awaiting_parse_and_mark_per_run_figures() -> None:
    stored = CrawlStats(fetched=162, kept=132, queued=4, in_flight=2, awaiting_parse=3,
                        known_urls=170, hosts=3)
    text = cli.format_stats(stored)
    assert "fetched                   162" in text  # the column the README shows
    assert "in flight                   2" in text
    assert "awaiting parse              3" in text
    assert "seen-filter" not in text and "this run" not in text
    run_stats = CrawlStats(fetched=162, seen_filter_skipped=52, invalid_links=0,
                           errors={"bad_content_type": 1})
    text = cli.format_stats(run_stats)
    lines = text.splitlines()
    assert lines[-3] == "this run:"
    assert lines[-2].startswith("  seen-filter skipped ") and lines[-2].endswith(" 52")
    assert lines[-1].startswith("  invalid links ") and lines[-1].endswith(" 0")
    assert len({len(line) for line in lines if line != "this run:"}) == 1  # one column
