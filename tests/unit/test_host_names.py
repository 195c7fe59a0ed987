"""Host names no DNS name can have (``-x-``, ``x..test``) are refused the same way by
seeds and by the operator API's host routes, so neither makes a row for them."""

from __future__ import annotations

import pytest

from common import urls
from common.settings import Settings
from crawler.api import ApiError, parse_host
from frontier.seeds import seed_batch

BAD = ["-x-", "x..test", "a-.test", "-a.test", "a!b.test", "a*b.test", "a~b.test",
       "a" * 64 + ".test", ".".join(["abcdefghi"] * 26), "x.test:0", "xn--.test"]
GOOD = ["news.test", "news.test:8080", "a-b.test", "_dmarc.a.test", "localhost",
        "127.0.0.1", "127.0.0.1:8080", "[::1]", "[::1]:8080", "xn--bcher-kva.de",
        "a" * 63 + ".test", "1a.test"]


@pytest.mark.parametrize("host", BAD)
def test_names_no_host_can_have_are_problems(host: str) -> None:
    assert urls.host_name_problem(urls.host_key(f"http://{host}/"))


@pytest.mark.parametrize("host", GOOD)
def test_real_names_and_addresses_are_fine(host: str) -> None:
    assert urls.host_name_problem(urls.host_key(f"http://{host}/")) is None


@pytest.mark.parametrize("host", BAD)
def test_the_api_refuses_them_with_a_400_saying_why(host: str) -> None:
    with pytest.raises(ApiError) as caught:
        parse_host(host)
    assert caught.value.status == 400
    assert "not a host name" in caught.value.message


@pytest.mark.parametrize("host", BAD)
def test_seeds_refuse_them_too(host: str) -> None:
    tracking = urls.TrackingRules.from_settings(Settings().urls)
    batch = seed_batch([f"http://{host}/page", "http://ok.test/"], 0, tracking)
    assert list(batch.by_host) == ["ok.test"]
    assert batch.invalid == [f"http://{host}/page"]
    assert "host name" in batch.reasons[0] or "port" in batch.reasons[0], batch.reasons


@pytest.mark.parametrize("host", GOOD)
def test_the_api_and_seeds_take_real_names(host: str) -> None:
    key = parse_host(host)
    tracking = urls.TrackingRules.from_settings(Settings().urls)
    assert list(seed_batch([f"http://{host}/"], 0, tracking).by_host) == [key]
