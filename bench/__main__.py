"""``python -m bench``: see bench/main.py and bench/README.md."""

import sys

from bench.main import main

sys.exit(main())
