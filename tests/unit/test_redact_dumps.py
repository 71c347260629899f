"""A key a tool prints spread over lines (hex dumps, wrapped base64) is masked like one on a
single line: every line of the real tool's output that shows three or more of the key's
bytes becomes [REDACTED], and the lines that show none of it are left as they were."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from swarmdeck.secrets.redact import REDACTED, Redactor

KEY = "sk-proj-" + "Ab3dEf9hIj" * 4

# Each tool and how many input bytes one of its output lines shows.
TOOLS = {
    "xxd": 16,
    "xxd -g1": 16,
    "xxd -p": 30,
    "hexdump -C": 16,
    "hexdump": 16,
    "od -c": 16,
    "od -An -c": 16,
    "od": 16,
    "od -x": 16,
    "base64": 57,
    "base64 -w 20": 15,
}


def _dump(tool: str, data: bytes) -> str:
    if shutil.which(tool.split()[0]) is None:
        pytest.skip(f"{tool.split()[0]} is not installed")
    return subprocess.run(tool.split(), input=data, capture_output=True, check=True).stdout.decode()


@pytest.mark.parametrize("tool", TOOLS)
@pytest.mark.parametrize("before", [0, 1, 2, 5, 13, 31])
def test_every_line_showing_the_key_is_masked(tool: str, before: int) -> None:
    data = b"x" * before + KEY.encode() + b"\nand some text after it\n" * 3
    shown = _dump(tool, data).split("\n")
    out = Redactor([KEY]).redact("\n".join(shown)).split("\n")
    assert len(out) == len(shown)
    per_line = TOOLS[tool]
    first, last = before, before + len(KEY)
    for index, line in enumerate(shown):
        start, stop = index * per_line, (index + 1) * per_line
        held = max(0, min(stop, last) - max(start, first))
        if held >= 3:
            assert out[index] == REDACTED, (tool, index, line)
        elif held == 0 and line.strip():
            assert out[index] == line, (tool, index, line)


@pytest.mark.parametrize("tool", ["xxd", "od -c", "base64 -w 20"])
def test_a_dump_of_the_key_counts_as_holding_it(tool: str) -> None:
    assert Redactor([KEY]).contains_secret(_dump(tool, KEY.encode())) == "configured key"


def test_a_dump_of_other_bytes_is_left_alone() -> None:
    text = _dump("xxd", b"nothing secret here, only bytes " * 4)
    assert Redactor([KEY]).redact(text) == text


def test_a_long_line_of_spaces_does_not_stall_the_reader() -> None:
    # The od -c pattern's fields are fixed-width, so a near miss cannot backtrack for long.
    text = ("0000000" + " " * 5000 + "x\n") * 3
    assert Redactor([KEY]).redact(text) == text
