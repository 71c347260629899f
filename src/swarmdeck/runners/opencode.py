"""OpenCode (`opencode run --format json`): its config, command line and event stream.

Each stdout line is one JSON object with `type`, `sessionID` and `part`: `step_start`;
`text` (`part.text`); `tool_use` (`part.tool`, `part.callID`, `part.state` with `input`,
`output`, `status`); `step_finish` (`part.tokens` = {input, output, reasoning, cache:
{read, write}}, `part.cost`). OpenCode's `input` already leaves out the cached tokens.
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
class OpenCodeParser:
    """Steps as OpenCode reports them: text and tool parts between start and finish."""

    session: str | None = None
    step: Step = field(default_factory=Step)
    done: list[base.ToolDone] = field(default_factory=list)
    open: bool = False

    def feed(self, event: dict[str, Any]) -> list[Item]:
        """The items this line completes."""
        items: list[Item] = []
        sid = event.get("sessionID")
        if isinstance(sid, str) and sid != self.session:
            self.session = sid
            items.append(base.RunnerSession(sid))
        part = event.get("part") or {}
        kind = event.get("type")
        if kind == "step_start":
            self.open = True
        elif kind == "text":
            self.open = True
            self.step.text += str(part.get("text") or "")
        elif kind == "tool_use":
            self.open = True
            self._tool(part)
        elif kind == "step_finish":
            tokens = part.get("tokens") or {}
            cache = tokens.get("cache") or {}
            self.step.usage = base.usage_counts(
                int(tokens.get("input") or 0),
                int(tokens.get("output") or 0),
                int(cache.get("read") or 0),
                int(cache.get("write") or 0),
                int(tokens.get("reasoning") or 0),
            )
            cost = part.get("cost")
            self.step.cost_usd = float(cost) if isinstance(cost, int | float) and cost else None
            items += self._close()
        return items

    def _tool(self, part: dict[str, Any]) -> None:
        state = part.get("state") or {}
        call_id = str(part.get("callID") or part.get("id") or f"call_{len(self.done)}")
        name = str(part.get("tool") or "tool")
        arguments = json.dumps(state.get("input") or {}, ensure_ascii=False)
        self.step.tool_calls.append({"id": call_id, "name": name, "arguments": arguments})
        failed = state.get("status") == "error"
        content = state.get("error") if failed else state.get("output")
        self.done.append(base.ToolDone(call_id, name, str(content or ""), failed))

    def _close(self) -> list[Item]:
        items: list[Item] = [self.step, *self.done]
        self.step, self.done, self.open = Step(), [], False
        return items

    def finish(self) -> list[Item]:
        """A step cut off before its finish line still counts as what it said."""
        return self._close() if self.open else []


class OpenCode:
    """The OpenCode adapter: an OpenAI-compatible provider in a per-run opencode.json."""

    name = "opencode"
    wire: base.Wire = "openai"
    kinds = ("openai",)

    def prepare(self, home: Path, endpoint: base.Endpoint, access: base.Access) -> None:
        """opencode.json (0600) under the run's XDG config: the provider, the model, and
        the mode's permissions."""
        permission = {
            "edit": "allow" if access.writes else "deny",
            "bash": "allow",
            "webfetch": "deny",
            "external_directory": "deny",
        }
        config = {
            "$schema": "https://opencode.ai/config.json",
            "provider": {
                PROVIDER_ID: {
                    "npm": "@ai-sdk/openai-compatible",
                    "name": "swarmdeck",
                    "options": {"baseURL": endpoint.base_url, "apiKey": endpoint.token},
                    "models": {endpoint.model: {"name": endpoint.model}},
                }
            },
            "model": f"{PROVIDER_ID}/{endpoint.model}",
            "permission": permission,
            "autoupdate": False,
            "share": "disabled",
        }
        base.write_private(home / ".config" / "opencode" / "opencode.json", json.dumps(config))

    def argv(self, binary: Path, prompt: str, resume: str | None, access: base.Access) -> list[str]:
        """`opencode run --format json [--session ID] PROMPT`."""
        argv = [str(binary), "run", "--format", "json"]
        if resume:
            argv += ["--session", resume]
        return [*argv, prompt]

    def parser(self) -> OpenCodeParser:
        """A parser for one run."""
        return OpenCodeParser()
