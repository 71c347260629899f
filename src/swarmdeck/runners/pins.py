"""The one place the runners' npm packages and their versions are pinned."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RunnerPackage:
    """An external runner's npm package, its pinned version and its command."""

    name: str
    package: str
    version: str
    command: str


# Pinned so a worker and the tests run the version the adapters were written against.
PINS: dict[str, RunnerPackage] = {
    "opencode": RunnerPackage("opencode", "opencode-ai", "1.18.33", "opencode"),
    "claude": RunnerPackage("claude", "@anthropic-ai/claude-code", "2.1.332", "claude"),
    "codex": RunnerPackage("codex", "@openai/codex", "0.171.0", "codex"),
}
