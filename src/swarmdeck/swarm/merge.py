"""The deterministic merge: the members' results as one text, without a model. Used when the
aggregate turn fails (or says nothing), and when the swarm aborts."""

from __future__ import annotations

import json
from typing import Any

MAX_ITEMS = 50


def _review(result: dict[str, Any]) -> list[str]:
    lines = [str(result.get("overall", ""))]
    for f in result.get("findings", [])[:MAX_ITEMS]:
        lines.append(
            f"- [{f['severity']}] {f['file_line']}: {f['summary']} (fix: {f['suggested_fix']})"
        )
    return lines


def _explore(result: dict[str, Any]) -> list[str]:
    lines = [f"- {f['fact']} ({f['file_line']})" for f in result.get("facts", [])[:MAX_ITEMS]]
    if result.get("truncated"):
        lines.append(f"- (truncated; more in {', '.join(result.get('more_in', []))})")
    return lines


def _test(result: dict[str, Any]) -> list[str]:
    lines = [f"`{result['command']}`: {result['passed']} passed, {result['failed']} failed"]
    lines += [f"- {f['test']}: {f['error']}" for f in result.get("failures", [])[:MAX_ITEMS]]
    return lines


def _code(result: dict[str, Any]) -> list[str]:
    validation = result.get("validation") or {}
    changed = ", ".join(result.get("files_changed", [])) or "none"
    checks = "; ".join(
        f"{c['cmd']} -> {c['exit_code']}" for c in validation.get("commands", [])[:MAX_ITEMS]
    )
    passed = "passed" if validation.get("passed") else "not passed"
    return [
        f"status {result.get('status')}; files changed: {changed}",
        f"validation {passed}" + (f" ({checks})" if checks else ""),
        f"remaining risks: {result.get('remaining_risks', '')}",
    ]


RENDERERS = {"review": _review, "explore": _explore, "test": _test, "code": _code}


def merge(outcomes: list[dict[str, Any]], dropped: list[dict[str, Any]], why: str) -> str:
    """Every member's outcome as markdown, in plan order."""
    parts = [f"# Swarm result\n\n(merged without the coordinator's model: {why})"]
    for o in outcomes:
        head = f"## {o['role']} ({o['mode']}): {o['verdict']}"
        result = o.get("result")
        if o["verdict"] == "completed" and isinstance(result, dict):
            try:
                body = RENDERERS[o["mode"]](result)
            except (KeyError, TypeError):
                body = [json.dumps(result, ensure_ascii=False)]
        else:
            body = [f"no result: {o.get('reason') or 'the member did not complete'}"]
        parts.append("\n".join([head, "", *[line for line in body if line]]))
    if dropped:
        parts.append(
            "## dropped from the plan\n\n"
            + "\n".join(f"- {d['role']}: {d['reason']}" for d in dropped)
        )
    return "\n\n".join(parts) + "\n"
