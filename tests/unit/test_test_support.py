"""The test suite's own rule: a missing server skips a test locally and fails it in CI."""

from __future__ import annotations

import pytest

from tests.conftest import in_ci, unavailable


@pytest.mark.parametrize("value", ["true", "1", "TRUE", "yes"])
def test_missing_server_fails_under_ci(value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", value)
    assert in_ci()
    with pytest.raises(pytest.fail.Exception, match=r"Kafka is down.*CI=true"):
        unavailable("Kafka is down")


@pytest.mark.parametrize("value", [None, "", "false", "0"])
def test_missing_server_skips_outside_ci(value: str | None,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    if value is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", value)
    assert not in_ci()
    with pytest.raises(pytest.skip.Exception, match="Kafka is down"):
        unavailable("Kafka is down")
