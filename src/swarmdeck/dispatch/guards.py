"""Checks that refuse a dispatch before anything is stored or sent to a model."""

from __future__ import annotations

import re
from pathlib import Path

from swarmdeck.dispatch.modes import ModeSpec
from swarmdeck.errors import TaskRefusedError, UsageError
from swarmdeck.secrets.redact import Redactor

# Our templates' placeholders: `<FILL: ...>` and `{{UPPER_NAME}}`. Lower-case `{{ x }}` is
# left alone on purpose: Jinja, Helm and Go templates in a task are real content.
_PLACEHOLDER = re.compile(r"<FILL\b[^>\n]*>|\{\{\s*[A-Z][A-Z0-9_ ]*\s*\}\}")
MAX_TASK_CHARS = 200_000


def check_task_text(task: str, redactor: Redactor) -> None:
    """Refuse an empty or oversized task, one holding a credential, or an unfilled template."""
    if not task.strip():
        raise UsageError("the task is empty", "pass --task TEXT or --task-file FILE")
    if len(task) > MAX_TASK_CHARS:
        raise UsageError(
            f"the task is {len(task)} characters, over the {MAX_TASK_CHARS} limit",
            "point the worker at files instead of pasting them",
        )
    found = redactor.contains_secret(task)
    if found:
        raise TaskRefusedError(
            f"task refused: it contains a credential ({found})",
            "remove the secret from the task; workers read keys from the credential store",
        )
    unfilled = _PLACEHOLDER.search(task)
    if unfilled:
        line = task.count("\n", 0, unfilled.start()) + 1
        shown = unfilled.group(0)[:60]
        raise TaskRefusedError(
            f"task refused: unfilled template placeholder on line {line}: {shown}",
            "replace every <FILL: ...> with the real content",
        )


def check_worktree_use(spec: ModeSpec, worktree: bool) -> None:
    """A read-only mode changes nothing, so a worktree for it is a mistake."""
    if worktree and spec.read_only:
        raise UsageError(
            f"--worktree is pointless in {spec.name} mode: it changes no files",
            "drop --worktree; read-only modes work on the directory as it is",
        )
    if worktree and spec.name == "resume":
        raise UsageError(
            "--worktree cannot be used with resume: it continues in the session's own workdir",
            "drop --worktree",
        )


def read_task(task: str | None, task_file: Path | None) -> str:
    """The task text from --task or --task-file (exactly one)."""
    if (task is None) == (task_file is None):
        raise UsageError("pass exactly one of --task and --task-file", "e.g. --task-file task.md")
    if task is not None:
        return task
    assert task_file is not None
    try:
        return task_file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"task file not found: {task_file}", "check the path") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(
            f"cannot read task file {task_file}: {exc}", "pass a UTF-8 text file"
        ) from None
