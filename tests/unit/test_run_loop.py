"""common.runtime.run_loop: a process's main coroutine on uvloop's event loop."""

from __future__ import annotations

import asyncio
import sys

import pytest

from common.runtime import loop_factory, run_loop

uvloop = pytest.importorskip("uvloop")


def test_runs_on_uvloop_and_returns_the_result() -> None:
    seen: list[asyncio.AbstractEventLoop] = []

    async def main() -> int:
        seen.append(asyncio.get_running_loop())
        await asyncio.sleep(0)
        return 42

    assert run_loop(main()) == 42
    assert isinstance(seen[0], uvloop.Loop)
    assert seen[0].is_closed()


def test_an_exception_of_the_coroutine_comes_out_and_the_loop_is_closed() -> None:
    seen: list[asyncio.AbstractEventLoop] = []

    async def main() -> None:
        seen.append(asyncio.get_running_loop())
        raise ValueError("broken setting")

    with pytest.raises(ValueError, match="broken setting"):
        run_loop(main())
    assert seen[0].is_closed()


def test_tasks_left_running_are_cancelled_at_the_end() -> None:
    cancelled: list[bool] = []

    async def forever() -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    async def main() -> None:
        asyncio.get_running_loop().create_task(forever())
        await asyncio.sleep(0)

    run_loop(main())
    assert cancelled == [True]


def test_without_uvloop_asyncio_runs_the_coroutine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # import uvloop raises ImportError
    assert loop_factory() is None
    seen: list[asyncio.AbstractEventLoop] = []

    async def main() -> str:
        seen.append(asyncio.get_running_loop())
        return "done"

    assert run_loop(main()) == "done"
    assert not isinstance(seen[0], uvloop.Loop)
