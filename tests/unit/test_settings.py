"""Settings: built from CRAWLER_<SECTION>_<KEY>, frozen, with errors naming the variable."""

from __future__ import annotations

import dataclasses

import pytest

from common.settings import Settings, SettingsError, describe, variable_names


def test_defaults_are_valid_and_documented() -> None:
    s = Settings.from_env({})
    assert s.politeness.default_delay == 1.0
    assert s.traps.max_url_length == 2000
    assert s.fetcher.connect_timeout == 5.0 and s.fetcher.total_timeout == 30.0
    assert s.fetcher.max_body_bytes == 5_000_000
    assert s.fetcher.allow_networks == ()  # the SSRF guard allows nothing by default
    assert all(doc for _, _, doc in describe())


def test_values_are_parsed_by_type() -> None:
    s = Settings.from_env({
        "CRAWLER_FETCHER_CONCURRENCY": "8",
        "CRAWLER_POLITENESS_DEFAULT_DELAY": "0.25",
        "CRAWLER_FETCHER_STORE_ROBOTS_IN_WARC": "off",
        "CRAWLER_TRAPS_BLOCKED_HOSTS": " a.test, .b.test ,",
        "CRAWLER_CRAWL_CONTACT_URL": "https://ops.example/bot",
    })
    assert s.fetcher.concurrency == 8
    assert s.politeness.default_delay == 0.25
    assert s.fetcher.store_robots_in_warc is False
    assert s.traps.blocked_hosts == ("a.test", ".b.test")
    assert s.crawl.user_agent == "PoliteCrawler/0.1 (+https://ops.example/bot)"


@pytest.mark.parametrize(("env", "message"), [
    ({"CRAWLER_FETCHER_CONCURRENCY": "many"}, "CRAWLER_FETCHER_CONCURRENCY: expected a whole"),
    ({"CRAWLER_FETCHER_CONCURRENCY": "0"}, "CRAWLER_FETCHER_CONCURRENCY: must be at least 1"),
    ({"CRAWLER_POLITENESS_DEFAULT_DELAY": "nan"}, "CRAWLER_POLITENESS_DEFAULT_DELAY: expected a"),
    ({"CRAWLER_POLITENESS_DEFAULT_DELAY": "-1"}, "CRAWLER_POLITENESS_DEFAULT_DELAY: must be"),
    ({"CRAWLER_FETCHER_STORE_ROBOTS_IN_WARC": "maybe"}, "expected true or false"),
    ({"CRAWLER_STORE_BACKEND": "mysql"}, "CRAWLER_STORE_BACKEND: expected one of"),
    ({"CRAWLER_FETCHER_TIMEOUT": "5"}, "CRAWLER_FETCHER_TIMEOUT: no such setting"),
    ({"CRAWLER_FETCHER_CONNECT_TIMEOUT": "50"}, "must not exceed CRAWLER_FETCHER_TOTAL"),
    ({"CRAWLER_TRAPS_HOST_PAGE_OVERRIDES": "a.test"}, "CRAWLER_TRAPS_HOST_PAGE_OVERRIDES"),
    ({"CRAWLER_TRAPS_HOST_PAGE_OVERRIDES": "a.test=x"}, "bad value"),
])
def test_invalid_values_name_the_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        Settings.from_env(env)


def test_other_environment_variables_are_ignored() -> None:
    assert Settings.from_env({"PATH": "/bin", "CRAWLERX": "1"}) == Settings()


def test_frozen() -> None:
    s = Settings()
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.crawl.max_pages = 3  # type: ignore[misc]


def test_replace_validates() -> None:
    s = Settings().replace(fetcher={"concurrency": 3})
    assert s.fetcher.concurrency == 3
    with pytest.raises(SettingsError):
        Settings().replace(fetcher={"concurrency": -3})


def test_round_trip_through_environment() -> None:
    s = Settings().replace(traps={"blocked_hosts": ("a.test", "b.test")},
                           politeness={"default_delay": 0.5})
    assert Settings.from_env(s.to_env()) == s
    assert set(s.to_env()) == set(variable_names())
