"""The simulated web's DNS responder, standalone: ``python -m bench.dnsd NAMES_FILE``.

Answers every name listed in NAMES_FILE (one a line) with 127.0.0.1, on a free UDP port
of 127.0.0.1. The first stdout line is ``{"port": N}``; SIGTERM or SIGINT stops it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys
from pathlib import Path

from simweb.dns import DnsResponder


async def serve(names: list[str], ttl: int = 3600) -> None:
    responder = DnsResponder(dict.fromkeys(names, "127.0.0.1"), ttl=ttl)
    await responder.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    print(json.dumps({"port": responder.port}), flush=True)
    try:
        await stop.wait()
    finally:
        await responder.stop()


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m bench.dnsd NAMES_FILE", file=sys.stderr)
        return 2
    names = [n.strip() for n in Path(argv[0]).read_text().splitlines() if n.strip()]
    asyncio.run(serve(names))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
