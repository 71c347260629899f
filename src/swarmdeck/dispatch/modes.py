"""The dispatch modes: each one's tools, step cap, write access, prompt and result schema."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib.resources import files
from typing import TYPE_CHECKING, Any

from swarmdeck.errors import UsageError

if TYPE_CHECKING:
    from pydantic import BaseModel

# glob and the text editor (its view only, in a read-only mode) serve every mode.
READ_TOOLS = ("read_file", "list_dir", "grep", "glob", "str_replace_based_edit_tool")
EDIT_TOOLS = ("edit_file", "apply_patch", "write_file")
SUBMIT = "submit_result"

# What a valid result looks like, shown to the model in its system prompt.
RESULT_EXAMPLES: dict[str, tuple[dict[str, Any], str]] = {
    "explore": (
        {
            "facts": [{"fact": "load() caches the parsed file", "file_line": "src/cfg.py:42"}],
            "truncated": False,
            "more_in": [],
        },
        "`more_in` is required (non-empty) when `truncated` is true.",
    ),
    "code": (
        {
            "status": "complete",
            "files_changed": ["src/app.py", "tests/test_app.py"],
            "validation": {
                "commands": [
                    {
                        "cmd": "pytest -q tests/test_app.py",
                        "exit_code": 0,
                        "output_summary": "4 passed",
                    }
                ],
                "passed": True,
            },
            "reuse": "searched for existing date parsing; reused utils.parse_date",
            "remaining_risks": "none known",
        },
        "`status` is complete, partial or blocked.",
    ),
    "test": (
        {
            "command": "pytest -q tests/unit",
            "passed": 41,
            "failed": 1,
            "failures": [
                {"test": "tests/unit/test_io.py::test_read", "error": "AssertionError: 3 != 4"}
            ],
        },
        "`passed` and `failed` are integers.",
    ),
    "review": (
        {
            "overall": "Sound change; one unchecked error path.",
            "severity_counts": {"high": 0, "medium": 1, "low": 0},
            "findings": [
                {
                    "severity": "medium",
                    "file_line": "src/io.py:88",
                    "summary": "write() ignores a failed flush",
                    "impact": "data loss on a full disk goes unnoticed",
                    "suggested_fix": "check the return value and raise IOError",
                }
            ],
        },
        "`severity` is high, medium or low; `severity_counts` must equal the findings' tally.",
    ),
}
RESULT_EXAMPLES["resume"] = RESULT_EXAMPLES["code"]


@dataclass(frozen=True)
class ModeSpec:
    """One dispatch mode."""

    name: str
    tools: tuple[str, ...]
    step_cap: int
    read_only: bool
    # The session mode the tool policy enforces (resume continues a code session).
    session_mode: str

    @property
    def result_model(self) -> type[BaseModel]:
        """The schema of this mode's result (imported on first use: a planner's dispatch
        hands its run over before it needs any schema)."""
        from swarmdeck.dispatch.schemas import RESULT_MODELS

        return RESULT_MODELS[self.name]

    @property
    def writes(self) -> bool:
        """True when the mode may change files (and so may want a worktree)."""
        return not self.read_only

    def prompt(self, workdir: str, step_cap: int | None = None, block: bool = False) -> str:
        """The system prompt of a worker in this mode; `block`: an external runner's, which
        ends its answer with a result block instead of calling submit_result."""
        example, rule = RESULT_EXAMPLES[self.name]
        schema = f"{json.dumps(example, indent=2)}\n{rule}"
        common = (
            _prompt_text("common")
            .replace("@MODE@", self.name)
            .replace("@WORKDIR@", workdir)
            .replace("@STEP_CAP@", str(step_cap or self.step_cap))
            .replace("@RESULT_EXAMPLE@", schema)
            .replace("@FINISH@", _prompt_text("finish_block" if block else "finish_tool").strip())
        )
        return f"{common}\n{_prompt_text(self.name)}"


MODES: dict[str, ModeSpec] = {
    "code": ModeSpec(
        "code",
        (*READ_TOOLS, *EDIT_TOOLS, "shell", SUBMIT),
        120,
        False,
        "code",
    ),
    "resume": ModeSpec(
        "resume",
        (*READ_TOOLS, *EDIT_TOOLS, "shell", SUBMIT),
        120,
        False,
        "code",
    ),
    "explore": ModeSpec("explore", (*READ_TOOLS, "shell", SUBMIT), 80, True, "explore"),
    "test": ModeSpec("test", (*READ_TOOLS, "shell", SUBMIT), 80, True, "test"),
    "review": ModeSpec("review", (*READ_TOOLS, "shell", SUBMIT), 120, True, "review"),
}


def get_mode(name: str) -> ModeSpec:
    """The mode of that name, or a UsageError listing the modes."""
    spec = MODES.get(name)
    if spec is None:
        raise UsageError(f"unknown mode {name!r}", f"use one of: {', '.join(MODES)}")
    return spec


@cache
def _prompt_text(name: str) -> str:
    return (files("swarmdeck.dispatch") / "prompts" / f"{name}.md").read_text(encoding="utf-8")
