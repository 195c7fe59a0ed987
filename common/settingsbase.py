"""What every module that checks a setting needs, below :mod:`common.settings`.

:mod:`common.settings` imports the policy modules whose rules it validates at start
(:mod:`common.scope`, :mod:`common.urls`); those modules name a bad variable in their
own errors. Both need the error type and the variable names, which live here so the
imports run one way only: settings -> scope -> urls -> settingsbase.
"""

from __future__ import annotations

PREFIX = "CRAWLER"


class SettingsError(ValueError):
    """An invalid or unknown setting; the message names the variable."""


def env_name(section: str, key: str) -> str:
    """The environment variable of a setting: ``CRAWLER_<SECTION>_<KEY>``."""
    return f"{PREFIX}_{section.upper()}_{key.upper()}"
