"""A code-mode session edits files with each tool in each vendor's shape, through the real
SDKs and the fake server: Anthropic's text editor client tool, OpenAI's apply_patch as a
custom (freeform) tool, and plain JSON tools; the failures (a missing string, two matches,
a hunk that does not apply, an edit outside the workdir) reach the model as tool errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from swarmdeck import AgentSpec, Swarm
from swarmdeck.testing.script import Reply, ReplyToolCall
from tests.conftest import write_provider
from tests.integration.test_sessions_support import Agent, Scripted, call, open_catalog, text

APP = "def main():\n    return 42\n\n\ndef other():\n    return 42\n"
GOOD_PATCH = (
    "*** Begin Patch\n*** Update File: app.py\n@@ def other():\n-    return 0\n+    return 7\n"
    "*** Add File: notes.md\n+edited\n*** End Patch\n"
)
BAD_PATCH = (
    "*** Begin Patch\n*** Update File: app.py\n@@\n-    return 99\n+    return 0\n*** End Patch\n"
)
OUTSIDE_PATCH = "*** Begin Patch\n*** Add File: ../evil.txt\n+x\n*** End Patch\n"


def _replace(tool: str, old: str, new: str, path: str = "app.py") -> ReplyToolCall:
    if tool == "str_replace_based_edit_tool":
        return call(tool, command="str_replace", path=path, old_str=old, new_str=new)
    return call(tool, path=path, old_string=old, new_string=new)


def _turns(replace_tool: str) -> list[Reply]:
    """One call per turn: a good edit, the failures, a good patch, a bad one."""
    steps = [
        _replace(replace_tool, "def main():\n    return 42", "def main():\n    return 43"),
        _replace(replace_tool, "def mian():", "x"),
        _replace(
            replace_tool, "return 42", "return 0", path="app.py"
        ),  # main's is 43 now: one left
        _replace(replace_tool, "    return", "    yield"),
        _replace(replace_tool, "outside", "in", path="../outside.txt"),
        call("apply_patch", input=BAD_PATCH),
        call("apply_patch", input=OUTSIDE_PATCH),
        call("glob", pattern="*.py"),
    ]
    return [Reply(tool_calls=(step,)) for step in steps] + [text("edited")]


SHAPES = [
    ("anthropic", None, "str_replace_based_edit_tool"),
    ("openai", "openai_apply_patch", "edit_file"),
    ("openai", "plain", "edit_file"),
    ("openai-responses", "openai_apply_patch", "edit_file"),
]


@pytest.mark.parametrize(
    ("kind", "shape", "replace_tool"), SHAPES, ids=["anthropic", "custom", "plain", "responses"]
)
async def test_edits_in_each_vendor_shape(
    sd_home: Path, tmp_path: Path, fake_llm: Any, kind: str, shape: str | None, replace_tool: str
) -> None:
    url = fake_llm.anthropic_base_url if kind == "anthropic" else fake_llm.openai_base_url
    extra = {"edit_tools": shape} if shape else {}
    write_provider(sd_home, "fake", url, kind=kind, **extra)
    work = tmp_path / "work"
    work.mkdir()
    (work / "app.py").write_text(APP)
    (tmp_path / "outside.txt").write_text("outside\n")
    turns = _turns(replace_tool)
    turns.insert(3, Reply(tool_calls=(call("apply_patch", input=GOOD_PATCH),)))
    fake_llm.set_script(Scripted({"edit the app": Agent(turns)}))
    async with Swarm() as swarm:
        # Every schema at once: the wire shape of each edit tool is what this checks.
        spec = AgentSpec("fake", mode="code", options={"tool_loading": "eager"})
        session = await swarm.start("edit the app", spec, workdir=work)
        result = await session.result(timeout=60)
    assert result.status == "completed", result.error
    assert (
        work / "app.py"
    ).read_text() == "def main():\n    return 43\n\n\ndef other():\n    return 7\n"
    assert (work / "notes.md").read_text() == "edited\n"
    assert (tmp_path / "outside.txt").read_text() == "outside\n" and not (
        tmp_path / "evil.txt"
    ).exists()
    results = [e.payload for e in open_catalog().events(session.id, kinds=["tool_result"])]
    assert [(r["name"], r["is_error"]) for r in results] == [
        (replace_tool, False),
        (replace_tool, True),
        (replace_tool, False),
        ("apply_patch", False),
        (replace_tool, True),
        (replace_tool, True),
        ("apply_patch", True),
        ("apply_patch", True),
        ("glob", False),
    ]
    contents = [r["content"] for r in results]
    assert "not in the file" in contents[1] and "nearest (line 1" in contents[1]
    assert "appears 2 times" in contents[4]
    assert results[5]["permission_denied"] and "escapes the workdir" in contents[5]
    assert "hunk 1 of app.py did not apply" in contents[6]
    assert results[7]["permission_denied"]
    _check_wire(fake_llm, kind, shape)


def _check_wire(fake_llm: Any, kind: str, shape: str | None) -> None:
    """The tools went out in the vendor's shape, and so did past calls to them."""
    bodies = [r.body for r in fake_llm.requests if isinstance(r.body, dict)]
    tools = bodies[-1]["tools"]
    names = [
        t.get("name") or (t.get("function") or t.get("custom") or {}).get("name") for t in tools
    ]
    if kind == "anthropic":
        assert {"type": "text_editor_20250728", "name": "str_replace_based_edit_tool"} in [
            {k: v for k, v in t.items() if k != "cache_control"} for t in tools
        ]
        assert "edit_file" not in names and "cache_control" in tools[-1]
        return
    assert "str_replace_based_edit_tool" not in names
    patch_tool = next(t for t in tools if "apply_patch" in str(t))
    if kind == "openai-responses":  # flat: the custom tool, its calls and their outputs
        assert (patch_tool["type"], patch_tool["format"]["syntax"]) == ("custom", "lark")
        items = bodies[-1]["input"]
        calls = [i for i in items if i.get("type") == "custom_tool_call"]
        assert calls[0] == {"type": "custom_tool_call", "call_id": calls[0]["call_id"],
                            "name": "apply_patch", "input": GOOD_PATCH}  # fmt: skip
        outputs = [i["call_id"] for i in items if i.get("type") == "custom_tool_call_output"]
        assert len(calls) == 3 and outputs == [c["call_id"] for c in calls]
        return
    history = [c for m in bodies[-1]["messages"] for c in m.get("tool_calls") or []]
    patch_calls = [c for c in history if "apply_patch" in str(c)]
    if shape == "openai_apply_patch":
        assert patch_tool["type"] == "custom"
        assert patch_tool["custom"]["format"]["grammar"]["syntax"] == "lark"
        assert patch_calls[0] == {
            "id": patch_calls[0]["id"],
            "type": "custom",
            "custom": {"name": "apply_patch", "input": GOOD_PATCH},
        }
    else:
        assert patch_tool["type"] == "function"
        assert patch_calls[0]["function"]["name"] == "apply_patch"
