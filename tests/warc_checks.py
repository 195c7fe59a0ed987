"""WARC validators shared by tests: warcio's checker and warcat's verifier."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

# warcat's verify, run in a child process (it leaves temporary files open), failing on
# any problem or logged warning, with two documented exceptions:
# - check_block_length compares warcat's own re-serialisation of a block with the file
#   (its docstring: "whether Warcat will output blocks with correct whitespace"); warcat
#   writes warc-fields blocks with an extra blank line, a property of its writer, not
#   of the file;
# - a revisit's WARC-Payload-Digest is the digest of the payload it refers to (WARC 1.1,
#   6.7.2), which warcat compares with the revisit's own empty payload; our tests check
#   it against the original record instead.
_WARCAT = """
import json, logging, sys
from warcat.tool import VerifyTool

class StrictVerify(VerifyTool):
    def preprocess(self):
        super().preprocess()
        self.check_block_length = False

    def verify_payload_digest(self, record):
        if record.warc_type != "revisit":
            super().verify_payload_digest(record)

messages = []
class Collect(logging.Handler):
    def emit(self, record):
        messages.append(self.format(record))

logging.getLogger("warcat").addHandler(Collect(logging.WARNING))
tool = StrictVerify(sys.argv[1:], preserve_block=False)  # as the command line does
tool.process()
print(json.dumps({"problems": tool.problems, "records": tool.num_records,
                  "messages": messages}))
"""


def warcat_verify(files: list[Path]) -> int:
    """Run warcat's verifier over ``files`` in order; return the number of records."""
    done = subprocess.run([sys.executable, "-c", _WARCAT, *map(str, files)],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["problems"] == 0, report["messages"]
    assert report["messages"] == []
    return int(report["records"])


def warcio_check(files: list[Path]) -> subprocess.CompletedProcess[str]:
    code = "import sys; from warcio.cli import main; main(sys.argv[1:])"
    return subprocess.run([sys.executable, "-c", code, "check", "-v", *map(str, files)],
                          capture_output=True, text=True, timeout=120, check=False)


