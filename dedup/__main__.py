"""``python -m dedup``: run one dedup service, configured by CRAWLER_* settings."""

import sys

from common.runtime import service_main
from dedup.main import run

sys.exit(service_main("dedup", run, sys.argv[1:]))
