"""A tool's JSON schema as the model needs it, without what pydantic adds for people.

Every turn sends every offered schema, so its bytes are paid again and again: pydantic's
`title` on each property (the property's own name, capitalised), the model's docstring as a
top-level description when the tool's description already says it, and `anyOf [X, null]`
with `default: null` for an optional argument (the model simply leaves it out). None of
that changes what validates: the arguments are still checked against the pydantic model.
"""

from __future__ import annotations

from typing import Any

_NULL = {"type": "null"}


def lean_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema without titles, without the argument model's docstring, with optional
    arguments shown as their type alone."""
    lean = _lean(schema)
    lean.pop("title", None)
    lean.pop("description", None)  # the model's docstring: the tool's description says it
    return lean


def _lean(node: Any) -> Any:
    if isinstance(node, list):
        return [_lean(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {k: _lean(v) for k, v in node.items() if k != "title" or not isinstance(v, str)}
    if "properties" in node and isinstance(node["properties"], dict):
        out["properties"] = {name: _lean_property(p) for name, p in node["properties"].items()}
    return out


def _lean_property(prop: Any) -> Any:
    lean = _lean(prop)
    if not isinstance(lean, dict):
        return lean
    options = lean.get("anyOf")
    if isinstance(options, list) and _NULL in options and lean.get("default", 0) is None:
        rest = [o for o in options if o != _NULL]
        if len(rest) == 1:
            merged = {k: v for k, v in lean.items() if k not in ("anyOf", "default")}
            return {**rest[0], **merged}
    return lean
