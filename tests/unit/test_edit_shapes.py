"""Which edit-tool shape a provider gets, and the way back from OpenAI's custom tool."""

from __future__ import annotations

import json

from swarmdeck.models.edit_shapes import edit_shape, from_vendor, to_vendor
from swarmdeck.models.registry import ProviderRegistry
from swarmdeck.models.types import Completion, ToolCall


def test_the_shape_is_the_setting_where_the_wire_has_it_else_the_vendors_default() -> None:
    assert edit_shape("anthropic", None) == "anthropic_text_editor"
    assert edit_shape("anthropic", "plain") == "plain"
    assert edit_shape("anthropic", "openai_apply_patch") == "plain"  # no custom tools there
    assert edit_shape("openai", None) == "plain"
    assert edit_shape("openai", "openai_apply_patch") == "openai_apply_patch"
    assert edit_shape("openai", "anthropic_text_editor") == "plain"


def test_packaged_openai_gets_the_custom_apply_patch(tmp_path) -> None:
    registry = ProviderRegistry.load(tmp_path)
    assert registry.get("openai").edit_tools == "openai_apply_patch"
    assert registry.get("anthropic").edit_tools is None


def test_a_custom_call_comes_back_as_neutral_json_arguments() -> None:
    patch = "*** Begin Patch\n*** Delete File: a\n*** End Patch\n"
    done = Completion("", [ToolCall("c1", "apply_patch", patch), ToolCall("c2", "glob", "{}")])
    back = from_vendor("openai_apply_patch", done)
    assert json.loads(back.tool_calls[0].arguments) == {"input": patch}
    assert back.tool_calls[1] == done.tool_calls[1]
    assert from_vendor("plain", done) is done


def test_plain_and_custom_shapes_leave_out_the_text_editor() -> None:
    tools = [
        {"type": "function", "function": {"name": n, "description": "", "parameters": {}}}
        for n in ("str_replace_based_edit_tool", "apply_patch", "edit_file")
    ]
    plain = to_vendor("plain", {"tools": [dict(t) for t in tools]})
    assert [t["function"]["name"] for t in plain["tools"]] == ["apply_patch", "edit_file"]
    custom = to_vendor("openai_apply_patch", {"tools": [dict(t) for t in tools], "messages": []})
    assert [t["type"] for t in custom["tools"]] == ["custom", "function"]
