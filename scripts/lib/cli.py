"""What the scripts' command lines share: settings from the environment (a bad value is
the script's own error, with a message naming the variable), messages with the script's
prefix, and steps that say how long they took."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager


def env_str(name: str, default: str) -> str:
    """The variable's value, stripped; ``default`` when it is unset or blank."""
    return os.environ.get(name, "").strip() or default


def env_int(name: str, default: int, *, error: type[Exception]) -> int:
    """A whole number from the environment; ``error`` says so when it is not one."""
    raw = env_str(name, str(default))
    try:
        return int(raw)
    except ValueError:
        raise error(f"{name}={raw!r} is not a whole number") from None


def env_port(name: str, default: int, *, error: type[Exception]) -> int:
    """A TCP port number (1 to 65535) from the environment."""
    port = env_int(name, default, error=error)
    if not 0 < port < 65536:
        raise error(f"{name}={port} is not a TCP port")
    return port


def sayer(prefix: str) -> Callable[[str], None]:
    """A function that prints a message with ``prefix`` (e.g. ``"kube: "``) at once."""

    def say(message: str) -> None:
        print(f"{prefix}{message}", flush=True)

    return say


@contextmanager
def timed(say: Callable[[str], None], name: str, unit: str = " s") -> Iterator[None]:
    """Says ``name (N.N s)`` when the block ends, whether or not it succeeded."""
    start = time.monotonic()
    try:
        yield
    finally:
        say(f"{name} ({time.monotonic() - start:.1f}{unit})")
