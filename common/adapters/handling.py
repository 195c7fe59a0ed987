"""What both buses do around one handler call: run it, tell a failure from a stop, and
describe the error for logs and dead letters."""

from __future__ import annotations

import asyncio

from common.ports import Delivery, Handler

MAX_ERROR_CHARS = 4000


def describe(exc: BaseException) -> str:
    """``Type: message``, cut to :data:`MAX_ERROR_CHARS` (it travels in a dead letter)."""
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= MAX_ERROR_CHARS else text[:MAX_ERROR_CHARS] + "..."


async def call_handler(handler: Handler, delivery: Delivery) -> BaseException | None:
    """Run ``handler``; None when it returned, else the error it raised.

    A cancellation of the consuming task itself propagates (the bus is stopping or the
    partition was taken away); a stray ``CancelledError`` raised inside the handler is a
    failure like any other, so it is retried and, in the end, dead-lettered.
    """
    try:
        await handler(delivery)
    except asyncio.CancelledError as exc:
        task = asyncio.current_task()
        if task is None or task.cancelling():
            raise
        return exc
    except Exception as exc:
        return exc
    return None
