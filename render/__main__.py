"""``python -m render``: run one render service, configured by CRAWLER_* settings."""

import sys

from common.runtime import service_main
from render.main import run

sys.exit(service_main("render", run, sys.argv[1:]))
