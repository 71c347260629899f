"""Codex CLI (`codex exec --json`): its config, command line and event stream.

Lines: `thread.started` (`thread_id`, what `codex exec resume` takes); `item.completed`
with an `agent_message` (`text`), a `command_execution` (`command`, `aggregated_output`,
`exit_code`) or a `file_change` (`changes`); `turn.completed` with the turn's usage, summed
over its requests (`input_tokens` includes `cached_input_tokens`, as OpenAI counts).
The turn's items are held until its usage arrives, which goes on its last response.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from swarmdeck.runners import base
from swarmdeck.runners.base import Item, Step

PROVIDER_ID = "swarmdeck"


@dataclass
class CodexParser:
    """A turn's items, released with its usage."""

    held: list[Item] = field(default_factory=list)

    def feed(self, event: dict[str, Any]) -> list[Item]:
        """The items this line completes."""
        kind = event.get("type")
        if kind == "thread.started" and event.get("thread_id"):
            return [base.RunnerSession(str(event["thread_id"]))]
        if kind == "item.completed":
            self.held += _items(event.get("item") or {})
        elif kind == "turn.completed":
            self._usage(event.get("usage") or {})
            return self.finish()
        return []

    def _usage(self, usage: dict[str, Any]) -> None:
        steps = [item for item in self.held if isinstance(item, Step)]
        if not steps:
            steps = [Step()]
            self.held.append(steps[0])
        cached = int(usage.get("cached_input_tokens") or 0)
        steps[-1].usage = base.usage_counts(
            int(usage.get("input_tokens") or 0) - cached,
            int(usage.get("output_tokens") or 0),
            cached,
            int(usage.get("cache_write_input_tokens") or 0),
            int(usage.get("reasoning_output_tokens") or 0),
        )

    def finish(self) -> list[Item]:
        """The items held (a turn cut off still said what it said)."""
        held, self.held = self.held, []
        return held


def _items(item: dict[str, Any]) -> list[Item]:
    """A completed item as a response (and the tool result it had)."""
    kind, item_id = item.get("type"), str(item.get("id") or "item")
    if kind == "agent_message":
        return [Step(text=str(item.get("text") or ""))]
    if kind == "command_execution":
        arguments = json.dumps({"command": item.get("command") or ""}, ensure_ascii=False)
        call = {"id": item_id, "name": "shell", "arguments": arguments}
        failed = item.get("exit_code") not in (0, None) or item.get("status") == "failed"
        output = str(item.get("aggregated_output") or "")
        return [Step(tool_calls=[call]), base.ToolDone(item_id, "shell", output, failed)]
    if kind == "file_change":
        changes = item.get("changes") or []
        arguments = json.dumps({"changes": changes}, ensure_ascii=False)
        call = {"id": item_id, "name": "apply_patch", "arguments": arguments}
        failed = item.get("status") == "failed"
        done = ", ".join(f"{c.get('kind')} {c.get('path')}" for c in changes) or "no change"
        return [Step(tool_calls=[call]), base.ToolDone(item_id, "apply_patch", done, failed)]
    return []  # reasoning, advisory errors, plans: not part of the conversation


def _toml(value: str) -> str:
    """A TOML basic string (JSON's escapes are TOML's)."""
    return json.dumps(value)


class Codex:
    """The Codex adapter: a Responses API provider in a per-run config.toml."""

    name = "codex"
    wire: base.Wire = "openai"
    # Codex speaks the Responses API: a Responses provider's server is what it wants.
    kinds = ("openai", "openai-responses")

    def prepare(self, home: Path, endpoint: base.Endpoint, access: base.Access) -> None:
        """`~/.codex/config.toml` (0600) in the run's home: the provider with the run's
        token, no update checks, analytics, feedback or plugin fetches, one attempt per
        request (swarmdeck's proxy and timeouts decide the rest)."""
        lines = [
            f"model = {_toml(endpoint.model)}",
            f'model_provider = "{PROVIDER_ID}"',
            'approval_policy = "never"',
            "check_for_update_on_startup = false",
            "",
            "[analytics]",
            "enabled = false",
            "",
            "[feedback]",
            "enabled = false",
            "",
            "[features]",
            "plugins = false",
            "",
            f"[model_providers.{PROVIDER_ID}]",
            'name = "swarmdeck"',
            f"base_url = {_toml(endpoint.base_url)}",
            'wire_api = "responses"',
            f"experimental_bearer_token = {_toml(endpoint.token)}",
            "request_max_retries = 0",
            "stream_max_retries = 0",
        ]
        base.write_private(home / ".codex" / "config.toml", "\n".join(lines) + "\n")

    def argv(self, binary: Path, prompt: str, resume: str | None, access: base.Access) -> list[str]:
        """`codex exec --json ... [resume ID] PROMPT`.

        Codex's own sandbox (bubblewrap in a user namespace) cannot start inside
        swarmdeck's, where it fails every command closed; swarmdeck's sandbox confines the
        whole process to the mode instead, so Codex is told to run commands as they are.
        """
        argv = [str(binary), "exec", "--json", "--skip-git-repo-check"]
        argv += ["--sandbox", "danger-full-access"]
        if resume:
            argv += ["resume", resume]
        return [*argv, prompt]

    def parser(self) -> CodexParser:
        """A parser for one run."""
        return CodexParser()
