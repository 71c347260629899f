"""docs/contract.md stays true to the code: every field the lines carry, every verdict
class in the order the code classifies, the schema version and the exit codes."""

from __future__ import annotations

import re
from pathlib import Path
from typing import get_args

from swarmdeck.dispatch.result_block import ParseState
from swarmdeck.dispatch.verdict import (
    EXIT_COMPLETED,
    EXIT_NOT_COMPLETED,
    EXIT_TIMEOUT,
    EXIT_USAGE,
    SCHEMA_VERSION,
    Started,
    Verdict,
    VerdictClass,
    classify,
)

DOC = (Path(__file__).parents[2] / "docs" / "contract.md").read_text(encoding="utf-8")


def _section(title: str) -> str:
    return DOC.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]


def test_every_field_of_the_two_lines_is_documented() -> None:
    for model, title in ((Started, "`started`"), (Verdict, "`verdict`")):
        text = _section(title)
        for name in model.model_fields:
            assert f"`{name}" in text, (title, name)


# What makes each verdict class apply, alone.
TRIGGERS: dict[str, dict[str, object]] = {
    "step_capped_partial": {"reason": "step_cap"},
    "budget_exhausted": {"reason": "budget"},
    "completed": {"parse_state": "parsed"},
    "error": {"failed": True},
    "malformed": {"parse_state": "malformed"},
    "unstructured": {"final_text": "x" * 300},
    "empty": {},
}


def _classify(**kw: object) -> str:
    args: dict[str, object] = {
        "reason": None,
        "parse_state": "unavailable",
        "failed": False,
        "timed_out": False,
        "idle_timed_out": False,
        "interrupted": False,
        "final_text": "",
    }
    return classify(**{**args, **kw})  # type: ignore[arg-type]


def test_the_documented_classification_is_the_code_s() -> None:
    classification = _section("`verdict`").split("### Classification", 1)[1]
    # Each rule is "N. condition → `class`", the condition maybe over several lines.
    rules = re.findall(r"^\d\. .*?→ `(\w+)`$", classification, flags=re.MULTILINE | re.DOTALL)
    documented = list(rules)
    assert sorted(documented) == sorted(get_args(VerdictClass)) == sorted(TRIGGERS)
    for name in documented:
        assert _classify(**TRIGGERS[name]) == name
    # Where two rules both match, the one the doc lists first wins in the code too.
    for i, first in enumerate(documented):
        for later in documented[i + 1 :]:
            a, b = TRIGGERS[first], TRIGGERS[later]
            if set(a) & set(b):
                continue  # one field cannot hold both values
            assert _classify(**a, **b) == first, (first, later)
    for state in get_args(ParseState):
        assert f"`{state}`" in _section("`verdict`"), state
    assert f"**Schema version {SCHEMA_VERSION}.**" in DOC


def test_exit_codes_are_the_code_s() -> None:
    codes = _section("Exit codes").strip()
    header = codes.splitlines()[0]
    for code in (EXIT_COMPLETED, EXIT_NOT_COMPLETED, EXIT_USAGE):
        assert f"| {code} |" in header, code
    assert f"{EXIT_TIMEOUT} on a timeout" in codes


def test_every_option_of_the_planner_commands_is_documented() -> None:
    import typer

    import swarmdeck.cli.dispatch  # noqa: F401  (registers dispatch and fanout)
    from swarmdeck.cli.app import app

    commands = typer.main.get_command(app).commands  # type: ignore[attr-defined]
    text = _section("Commands")
    for name in ("dispatch", "fanout"):
        for param in commands[name].params:
            if getattr(param, "hidden", False):
                continue
            for flag in param.opts:
                if flag.startswith("--") and flag != "--help":
                    assert re.search(rf"(?<![\w-]){flag}(?![\w-])", text), (name, flag)


def test_every_mcp_tool_and_argument_is_documented() -> None:
    import asyncio

    import pytest

    pytest.importorskip("mcp")
    from swarmdeck.integrations.mcp.server import build_server

    rows = {
        line.split("|")[1].strip(): line
        for line in _section("MCP tools").splitlines()
        if line.startswith("| `")
    }
    documented = {name for cell in rows for name in re.findall(r"`(\w+)`", cell)}
    tools = asyncio.run(build_server(None).list_tools())  # type: ignore[arg-type]
    assert {t.name for t in tools} <= documented
    for tool in tools:
        [row] = [line for cell, line in rows.items() if f"`{tool.name}`" in cell]
        for arg in tool.input_schema.get("properties", {}):
            assert re.search(rf"`{arg}\??`", row), (tool.name, arg)
