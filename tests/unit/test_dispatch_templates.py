"""Task templates and mode prompts."""

from __future__ import annotations

from swarmdeck.dispatch.modes import MODES
from swarmdeck.dispatch.templates import task_template


def test_every_mode_has_a_template_and_a_prompt() -> None:
    for name, spec in MODES.items():
        assert "<FILL:" in task_template(name) or name == "test"
        prompt = spec.prompt("/w", 9)
        assert "/w" in prompt and "9 model turns" in prompt and "submit_result" in prompt
        assert "@MODE@" not in prompt and "@WORKDIR@" not in prompt and "@STEP_CAP@" not in prompt


def test_prompts_carry_what_each_mode_must_report() -> None:
    assert "file_line" in MODES["explore"].prompt("/w")
    assert "passed" in MODES["test"].prompt("/w") and "failed" in MODES["test"].prompt("/w")
    assert "severity" in MODES["review"].prompt("/w")
    code = MODES["code"].prompt("/w")
    assert "Search before you write" in code and "files_changed" in code and "reuse" in code
    assert "`edit_file`" in code and "`apply_patch`" in code and "`write_file` only for new" in code


def test_tool_sets() -> None:
    assert "write_file" in MODES["code"].tools and "write_file" in MODES["resume"].tools
    for name in ("code", "resume"):
        assert {"edit_file", "apply_patch", "glob", "str_replace_based_edit_tool"} <= set(
            MODES[name].tools
        )
    for name in ("explore", "test", "review"):
        assert "write_file" not in MODES[name].tools and MODES[name].read_only
        assert {"glob", "str_replace_based_edit_tool"} <= set(MODES[name].tools)
        assert not {"edit_file", "apply_patch"} & set(MODES[name].tools)
    assert MODES["resume"].session_mode == "code"
    assert {m: s.step_cap for m, s in MODES.items()} == {
        "code": 120,
        "resume": 120,
        "explore": 80,
        "test": 80,
        "review": 120,
    }
