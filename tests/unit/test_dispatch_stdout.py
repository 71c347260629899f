"""The contract's stdout: only emitted lines reach fd 1, whatever else prints."""

from __future__ import annotations

import os
import subprocess
import sys

CODE = """
import os, sys
from swarmdeck.dispatch.stdout import ContractStdout
with ContractStdout() as out:
    print("library chatter")
    os.write(1, b"C-level chatter\\n")
    out.emit('{"type": "one"}')
    sys.stdout.write("more chatter\\n")
    out.emit('{"type": "two"}')
print("after")
"""


def test_only_emitted_lines_reach_stdout() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", CODE], capture_output=True, text=True, env=os.environ, check=True
    )
    assert proc.stdout.splitlines() == ['{"type": "one"}', '{"type": "two"}', "after"]
    assert "library chatter" in proc.stderr and "C-level chatter" in proc.stderr
