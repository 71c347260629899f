"""The external runners swarmdeck can run, by name."""

from __future__ import annotations

from swarmdeck.runners.base import Adapter
from swarmdeck.runners.claude import ClaudeCode
from swarmdeck.runners.codex import Codex
from swarmdeck.runners.opencode import OpenCode

ADAPTERS: dict[str, Adapter] = {"opencode": OpenCode(), "claude": ClaudeCode(), "codex": Codex()}
