"""What every module that checks a setting needs, below :mod:`common.settings`.

:mod:`common.settings` imports the policy modules whose rules it validates at start
(:mod:`common.scope`, :mod:`common.urls`); those modules name a bad variable in their
own errors. Both need the error type and the variable names, which live here so the
imports run one way only: settings -> scope -> urls -> settingsbase.
"""

from __future__ import annotations

import re

PREFIX = "CRAWLER"

_USERINFO = re.compile(r"(?<=://)[^\s@]*@")


def redact_userinfo(text: str) -> str:
    """``text`` with the ``user:password@`` part of every URL in it replaced by ``***@``,
    so an error or log line that quotes a URL never shows a password. It reaches to the
    last ``@`` before white space: a password with an unescaped ``/`` is covered too
    (at worst a path that holds ``@`` is hidden as well)."""
    return _USERINFO.sub("***@", text)


class SettingsError(ValueError):
    """An invalid or unknown setting; the message names the variable (and never shows
    the password of a URL it quotes)."""

    def __init__(self, message: str) -> None:
        super().__init__(redact_userinfo(message))


def env_name(section: str, key: str) -> str:
    """The environment variable of a setting: ``CRAWLER_<SECTION>_<KEY>``."""
    return f"{PREFIX}_{section.upper()}_{key.upper()}"
