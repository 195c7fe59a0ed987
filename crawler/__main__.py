"""``python -m crawler``: the same command as ``crawler`` (``python -m crawler fetcher``
runs one fetcher service)."""

import sys

from crawler.cli import main

sys.exit(main())
