"""Claude Code (`claude -p --output-format stream-json --verbose`): its settings, command
line and event stream.

Lines: `system`/`init` (with `session_id`); `assistant`, one per content block of a
message (its `message.id` repeats; `message.usage` counts the input, and the output only
so far); `user` with the `tool_result` blocks; a last `result` line with the run's total
usage. A message is complete when another begins, its tool results arrive, or the run
ends; the output tokens the partial lines missed go to the run's last message, so the
totals are the runner's own.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from swarmdeck.runners import base
from swarmdeck.runners.base import Item, Step

READ_TOOLS = ["Bash", "Read", "Grep", "Glob", "LS", "TodoWrite"]
EDIT_TOOLS = ["Edit", "MultiEdit", "Write", "NotebookEdit"]
NEVER = ["WebFetch", "WebSearch"]
TOKEN_FILE = "run-token"


@dataclass
class ClaudeParser:
    """Messages as Claude Code streams them, one step each."""

    session: str | None = None
    message_id: str | None = None
    step: Step | None = None
    names: dict[str, str] = field(default_factory=dict)
    outputs: int = 0

    def feed(self, event: dict[str, Any]) -> list[Item]:
        """The items this line completes."""
        items: list[Item] = []
        sid = event.get("session_id")
        if isinstance(sid, str) and sid != self.session:
            self.session = sid
            items.append(base.RunnerSession(sid))
        kind = event.get("type")
        message = event.get("message") or {}
        if kind == "assistant":
            if message.get("id") != self.message_id:
                items += self._flush()
                self.message_id, self.step = message.get("id"), Step()
            self._add(message)
        elif kind == "user":
            items += self._flush()
            items += self._results(message)
        elif kind == "result":
            total = int((event.get("usage") or {}).get("output_tokens") or 0)
            if self.step is not None:
                # The partial lines counted part of the output: the rest is this message's.
                self.step.usage["output"] = max(self.step.usage["output"], total - self.outputs)
            cost = event.get("total_cost_usd")
            if self.step is not None and isinstance(cost, int | float):
                self.step.cost_usd = float(cost) or None
            items += self._flush()
        return items

    def _add(self, message: dict[str, Any]) -> None:
        assert self.step is not None
        for block in message.get("content") or []:
            if block.get("type") == "text":
                self.step.text += str(block.get("text") or "")
            elif block.get("type") == "tool_use":
                call_id, name = str(block.get("id")), str(block.get("name"))
                self.names[call_id] = name
                arguments = json.dumps(block.get("input") or {}, ensure_ascii=False)
                self.step.tool_calls.append({"id": call_id, "name": name, "arguments": arguments})
        usage = message.get("usage") or {}
        output = max(int(usage.get("output_tokens") or 0), self.step.usage.get("output", 0))
        self.step.usage = base.usage_counts(
            int(usage.get("input_tokens") or 0),
            output,
            int(usage.get("cache_read_input_tokens") or 0),
            int(usage.get("cache_creation_input_tokens") or 0),
        )

    def _flush(self) -> list[Item]:
        if self.step is None:
            return []
        step, self.step, self.message_id = self.step, None, None
        self.outputs += step.usage.get("output", 0)
        return [step]

    def _results(self, message: dict[str, Any]) -> list[Item]:
        content = message.get("content")
        if not isinstance(content, list):
            return []
        done: list[Item] = []
        for block in content:
            if block.get("type") != "tool_result":
                continue
            call_id = str(block.get("tool_use_id"))
            text = block.get("content")
            if isinstance(text, list):
                text = "\n".join(str(b.get("text", "")) for b in text if isinstance(b, dict))
            name = self.names.get(call_id, "tool")
            done.append(base.ToolDone(call_id, name, str(text or ""), bool(block.get("is_error"))))
        return done

    def finish(self) -> list[Item]:
        """A message cut off by a stop still counts as what it said."""
        return self._flush()


class ClaudeCode:
    """The Claude Code adapter: an Anthropic endpoint named in a per-run settings.json."""

    name = "claude"
    wire: base.Wire = "anthropic"
    kinds = ("anthropic",)

    def prepare(self, home: Path, endpoint: base.Endpoint, access: base.Access) -> None:
        """settings.json (0600) under the run's home: the endpoint, the model, the token
        through an apiKeyHelper that reads a 0600 file, and the mode's permissions."""
        token = home / ".claude" / TOKEN_FILE
        base.write_private(token, endpoint.token)
        allow = READ_TOOLS + (EDIT_TOOLS if access.writes else [])
        deny = NEVER + ([] if access.writes else EDIT_TOOLS)
        settings = {
            "apiKeyHelper": f"cat {token}",
            "model": endpoint.model,
            "env": {
                "ANTHROPIC_BASE_URL": endpoint.base_url,
                "DISABLE_TELEMETRY": "1",
                "DISABLE_AUTOUPDATER": "1",
                "DISABLE_ERROR_REPORTING": "1",
                "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            },
            "permissions": {"allow": allow, "deny": deny},
        }
        base.write_private(home / ".claude" / "settings.json", json.dumps(settings))

    def argv(self, binary: Path, prompt: str, resume: str | None, access: base.Access) -> list[str]:
        """`claude -p --output-format stream-json --verbose [--resume ID] PROMPT`."""
        argv = [str(binary), "-p", "--output-format", "stream-json", "--verbose"]
        if access.writes:
            argv += ["--permission-mode", "acceptEdits"]
        if resume:
            argv += ["--resume", resume]
        return [*argv, prompt]

    def parser(self) -> ClaudeParser:
        """A parser for one run."""
        return ClaudeParser()
