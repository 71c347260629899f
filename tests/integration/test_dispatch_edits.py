"""A code-mode dispatch on either vendor format changes one line of a large file with a
targeted edit in that vendor's shape, and the verdict lists the file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from swarmdeck.testing.script import Reply
from tests.conftest import run_cli, write_provider
from tests.integration.test_sessions_support import Agent, Scripted, call

LINES = 1000
BIG = "".join(f"value_{n} = {n}\n" for n in range(LINES))
RESULT = {
    "status": "complete",
    "files_changed": ["big.py"],
    "validation": {"commands": [], "passed": True},
    "reuse": "nothing to reuse for a one-line change",
    "remaining_risks": "none known",
}
PATCH = "*** Begin Patch\n*** Update File: big.py\n@@\n value_499 = 499\n-value_500 = 500\n+value_500 = 5000\n value_501 = 501\n*** End Patch\n"


@pytest.mark.parametrize("kind", ["anthropic", "openai"])
def test_a_code_dispatch_edits_one_line_of_a_large_file(
    sd_home: Path, tmp_path: Path, fake_llm: Any, kind: str
) -> None:
    if kind == "anthropic":
        write_provider(sd_home, "fake", fake_llm.anthropic_base_url, kind="anthropic")
        edit = call(
            "str_replace_based_edit_tool",
            command="str_replace",
            path="big.py",
            old_str="value_500 = 500\n",
            new_str="value_500 = 5000\n",
        )
    else:
        write_provider(sd_home, "fake", fake_llm.openai_base_url, edit_tools="openai_apply_patch")
        edit = call("apply_patch", input=PATCH)
    submit = call("submit_result", result=RESULT)
    fake_llm.set_script(
        Scripted(
            {
                "change value_500": Agent(
                    [Reply(tool_calls=(edit,)), Reply(text="Done.", tool_calls=(submit,))]
                )
            }
        )
    )
    work = tmp_path / "work"
    work.mkdir()
    (work / "big.py").write_text(BIG)
    res = run_cli(
        sd_home, "dispatch", "--provider", "fake", "--mode", "code", "--workdir", str(work),
        "--task", "change value_500 to 5000", "--quiet", timeout=120,
    )  # fmt: skip
    verdict = json.loads(res.stdout.splitlines()[-1])
    assert res.code == 0, res.stderr
    assert verdict["verdict"] == "completed" and verdict["result"]["files_changed"] == ["big.py"]
    assert verdict["tool_errors"] == {"permission_denied": 0, "other": 0}
    assert (work / "big.py").read_text() == BIG.replace("value_500 = 500\n", "value_500 = 5000\n")
    first = next(r.body for r in fake_llm.requests if isinstance(r.body, dict))
    shapes = [t.get("type") for t in first["tools"]]
    assert ("text_editor_20250728" if kind == "anthropic" else "custom") in shapes
    # The model sent one hunk, not the file: its calls' text is a sliver of the file's.
    sent = sum(len(json.dumps(c.arguments)) for c in (edit,))
    assert sent * 20 < len(BIG)
