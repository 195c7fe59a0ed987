"""``python -m fetcher``: run one fetcher service, configured by CRAWLER_* settings."""

import sys

from common.runtime import service_main
from fetcher.main import run

sys.exit(service_main("fetcher", run, sys.argv[1:]))
