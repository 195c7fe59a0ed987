"""The crawl's clock and the simulated web's: the wall clock plus an offset in a file."""

from __future__ import annotations

import time
from pathlib import Path

from common.clock import OffsetClock, set_offset, wall_clock
from common.settings import Settings
from simweb.clock import FileOffsetClock, clock_for


def test_without_a_file_it_is_the_wall_clock() -> None:
    assert wall_clock(Settings()) is time.time
    assert clock_for(None) is time.time


def test_the_offset_is_read_again_when_the_file_changes(tmp_path: Path) -> None:
    path = tmp_path / "offset"
    crawl = wall_clock(Settings().replace(crawl={"clock_offset_file": str(path)}))
    web = FileOffsetClock(path)
    assert isinstance(crawl, OffsetClock)
    assert abs(crawl() - time.time()) < 5  # no file yet: no offset
    set_offset(path, 86_400.0)
    assert crawl.offset() == web.offset() == 86_400.0
    assert abs(crawl() - time.time() - 86_400.0) < 5
    set_offset(path, 2 * 86_400.0)
    assert crawl.offset() == web.offset() == 2 * 86_400.0


def test_the_crawl_clock_never_goes_back(tmp_path: Path) -> None:
    path = tmp_path / "offset"
    set_offset(path, 7200.0)
    clock = OffsetClock(path)
    assert clock.offset() == 7200.0
    set_offset(path, 3600.0)
    assert clock.offset() == 7200.0
    path.write_text("not a number")
    assert clock.offset() == 7200.0
