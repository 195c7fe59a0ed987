"""``python -m bench.neardup``: see bench/neardup/quality.py."""

import sys

from bench.neardup.quality import main

sys.exit(main())
