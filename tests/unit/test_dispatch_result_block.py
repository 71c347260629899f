"""The result block of runners that cannot call tools: the last block counts."""

from __future__ import annotations

from swarmdeck.dispatch.modes import RESULT_EXAMPLES
from swarmdeck.dispatch.result_block import BEGIN, END, read_block, render_block

GOOD = RESULT_EXAMPLES["test"][0]


def test_parsed_from_the_last_block() -> None:
    old = render_block({"command": "x", "passed": 0, "failed": 0, "failures": []})
    text = f"notes\n{old}\nmore work\n{render_block(GOOD)}\nbye"
    reading = read_block(text, "test")
    assert reading.state == "parsed" and reading.result == GOOD


def test_fenced_json_inside_the_block() -> None:
    text = f'{BEGIN}\n```json\n{{"command": "pytest", "passed": 1, "failed": 0, "failures": []}}\n```\n{END}'
    assert read_block(text, "test").state == "parsed"


def test_malformed_json_and_schema() -> None:
    broken = read_block(f"{BEGIN}{{not json{END}", "test")
    assert broken.state == "malformed" and "not valid JSON" in (broken.error or "")
    wrong = read_block(f'{BEGIN}{{"command": "pytest"}}{END}', "test")
    assert wrong.state == "malformed" and wrong.error == "result.passed: required field is missing"


def test_cut_off_and_absent() -> None:
    assert read_block(f'text {BEGIN}{{"command": ', "test").state == "unstructured"
    # A complete block followed by a begun one: the last one counts, and it was cut off.
    assert read_block(f"{render_block(GOOD)} {BEGIN} {{", "test").state == "unstructured"
    assert read_block("just prose", "test").state == "unavailable"
    assert read_block(None, "test").state == "unavailable"
