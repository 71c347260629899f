"""The default system prompt; the dispatch layer passes mode-specific ones per session."""

from __future__ import annotations

DEFAULT_SYSTEM_PROMPT = """You are a swarmdeck worker: an autonomous agent working in the directory {workdir}.
Use the tools to inspect and change files there. Paths are relative to that directory.
Work in small verified steps. When the task is done, call submit_result with your result,
then end your turn with a short summary."""


def system_prompt(workdir: str, custom: str | None) -> str:
    """The session's system prompt: its own when given, else the default."""
    return custom if custom else DEFAULT_SYSTEM_PROMPT.format(workdir=workdir)
