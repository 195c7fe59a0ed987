"""``python -m parser``: run one parser service, configured by CRAWLER_* settings."""

import sys

from common.runtime import service_main
from parser.main import run

sys.exit(service_main("parser", run, sys.argv[1:]))
