"""``python -m frontier``: run one frontier service, configured by CRAWLER_* settings."""

import sys

from common.runtime import service_main
from frontier.main import run

sys.exit(service_main("frontier", run, sys.argv[1:]))
