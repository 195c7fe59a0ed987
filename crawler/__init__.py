"""The composition root: the CLI, embedded mode and the service roles.

Importing it sets ``OPENBLAS_NUM_THREADS=1`` unless the environment says otherwise,
before anything imports numpy: the crawler's numpy work is small vectors (SimHash,
MinHash sketches, language scores), where OpenBLAS's thread pool never helps, and
starting it cost about 0.1 s of CPU in every process that imports numpy (page workers
inherit the setting), its threads also spinning on the cores the crawl needs.
"""

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
