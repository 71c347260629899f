"""The edit tools in the shape each vendor trains its models on, and back.

A provider's `edit_tools` setting picks the shape (default per vendor):

- `anthropic_text_editor` (Anthropic's default): the text editor goes out as Anthropic's
  client tool type (`text_editor_20250728`, named `str_replace_based_edit_tool`) instead of
  a JSON schema; its tool_use blocks are ordinary ones, so nothing changes on the way back.
  edit_file, which does what its str_replace does, is not offered beside it.
- `openai_apply_patch` (GPT-5-family models on an endpoint with custom tools, such as
  OpenAI's): apply_patch goes out as a custom (freeform) tool constrained by the patch
  format's grammar; the model's call carries the raw patch, which comes back to the runtime
  as the JSON arguments `{"input": patch}` every other shape uses. (The Responses API's
  flat shape of it is models/responses_items.py's `custom_patch`.)
- `plain` (every other endpoint): JSON function tools only, apply_patch taking the patch as
  a JSON string.

The text editor is only offered in its Anthropic shape. The adapters call `to_vendor` on the
request body they built and `from_vendor` on the completion they read.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Literal

from swarmdeck.models.types import Completion, ToolCall

EditShape = Literal["anthropic_text_editor", "openai_apply_patch", "plain"]
TEXT_EDITOR = "str_replace_based_edit_tool"
TEXT_EDITOR_TYPE = "text_editor_20250728"
APPLY_PATCH = "apply_patch"
EDIT_FILE = "edit_file"
# The Lark grammar of the patch format (as Codex gives it to GPT-5-family models).
PATCH_GRAMMAR = r"""start: begin_patch hunk+ end_patch
begin_patch: "*** Begin Patch" LF
end_patch: "*** End Patch" LF?

hunk: add_hunk | delete_hunk | update_hunk
add_hunk: "*** Add File: " filename LF add_line+
delete_hunk: "*** Delete File: " filename LF
update_hunk: "*** Update File: " filename LF change_move? change?

filename: /(.+)/
add_line: "+" /(.*)/ LF -> line

change_move: "*** Move to: " filename LF
change: (change_context | change_line)+ eof_line?
change_context: ("@@" | "@@ " /(.+)/) LF
change_line: ("+" | "-" | " ") /(.*)/ LF
eof_line: "*** End of File" LF

%import common.LF
"""


def edit_shape(kind: str, setting: str | None) -> EditShape:
    """The shape a provider of this wire format gets: its setting where the wire has that
    shape, else the vendor's default."""
    if kind == "anthropic":
        return "anthropic_text_editor" if setting in (None, "anthropic_text_editor") else "plain"
    return "openai_apply_patch" if setting == "openai_apply_patch" else "plain"


def to_vendor(shape: EditShape, body: dict[str, Any]) -> dict[str, Any]:
    """The request body with its edit tools (and past calls to them) in the vendor's shape."""
    tools = body.get("tools")
    if not tools:
        return body
    if shape == "anthropic_text_editor":
        if TEXT_EDITOR not in {t.get("name") for t in tools}:
            return body
        # The cache breakpoint stays on the last tool shown (deferred ones follow it).
        mark = next((t.pop("cache_control") for t in tools if "cache_control" in t), None)
        body["tools"] = [_anthropic_tool(t) for t in tools if t.get("name") != EDIT_FILE]
        shown = [t for t in body["tools"] if not t.get("defer_loading")]
        if mark is not None and shown:
            shown[-1]["cache_control"] = mark
        return body
    body["tools"] = [t for t in tools if _name(t) != TEXT_EDITOR]
    if shape == "openai_apply_patch":
        body["tools"] = [_custom_tool(t) if _name(t) == APPLY_PATCH else t for t in body["tools"]]
        for message in body.get("messages") or []:
            if message.get("tool_calls"):
                message["tool_calls"] = [_custom_call(c) for c in message["tool_calls"]]
    return body


def from_vendor(shape: EditShape, completion: Completion) -> Completion:
    """The completion with its edit calls in the neutral shape (JSON object arguments)."""
    if shape != "openai_apply_patch":
        return completion
    calls = [
        ToolCall(c.id, c.name, json.dumps({"input": c.arguments}))
        if c.name == APPLY_PATCH and not _is_json_object(c.arguments)
        else c
        for c in completion.tool_calls
    ]
    return dataclasses.replace(completion, tool_calls=calls)


def _name(tool: dict[str, Any]) -> str:
    function = tool.get("function")
    return str((function or tool).get("name", ""))


def _anthropic_tool(tool: dict[str, Any]) -> dict[str, Any]:
    if tool.get("name") != TEXT_EDITOR:
        return tool
    deferred = {"defer_loading": True} if tool.get("defer_loading") else {}
    return {"type": TEXT_EDITOR_TYPE, "name": TEXT_EDITOR, **deferred}


def _custom_tool(tool: dict[str, Any]) -> dict[str, Any]:
    function = tool["function"]
    grammar = {"syntax": "lark", "definition": PATCH_GRAMMAR}
    custom = {
        "name": APPLY_PATCH,
        "description": function.get("description", "")
        + " This is a FREEFORM tool: send the patch itself, not JSON.",
        "format": {"type": "grammar", "grammar": grammar},
    }
    return {"type": "custom", "custom": custom}


def _custom_call(call: dict[str, Any]) -> dict[str, Any]:
    """A past call to apply_patch as the custom tool call it was."""
    function = call.get("function") or {}
    if function.get("name") != APPLY_PATCH:
        return call
    try:
        patch = json.loads(function.get("arguments") or "{}").get("input", "")
    except (ValueError, AttributeError):
        patch = function.get("arguments") or ""
    return {"id": call["id"], "type": "custom", "custom": {"name": APPLY_PATCH, "input": patch}}


def _is_json_object(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False
