"""The per-mode result schemas of the planner contract, and one validator per mode.

A validator returns None for a valid result, else one sentence (no final period) naming the schema
path that failed; submit_result shows that sentence to the model so it can correct the result.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

# "path:line" or "path:line-line"; the line is what makes a fact checkable.
FILE_LINE_PATTERN = r"^\S.*:\d+(-\d+)?$"


class _Result(BaseModel):
    # Strict: a count sent as "3" or a flag sent as "true" is a schema error the model can
    # fix, not something to coerce silently. Extra keys are tolerated (and ignored).
    model_config = ConfigDict(strict=True, extra="ignore")


class Fact(_Result):
    """One explored fact with its evidence."""

    fact: str = Field(min_length=1)
    file_line: str = Field(pattern=FILE_LINE_PATTERN)


class ExploreResult(_Result):
    """explore: facts with file:line; where the rest is when truncated."""

    facts: list[Fact]
    truncated: bool
    more_in: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _more_in_when_truncated(self) -> ExploreResult:
        if self.truncated and not self.more_in:
            raise ValueError("more_in: required (non-empty) when truncated is true")
        return self


class ValidationCommand(_Result):
    """One command the worker ran to validate its change."""

    cmd: str = Field(min_length=1)
    exit_code: int
    output_summary: str


class Validation(_Result):
    """How the change was validated."""

    commands: list[ValidationCommand]
    passed: bool


class CodeResult(_Result):
    """code and resume: what changed, how it was validated, what was reused."""

    status: Literal["complete", "partial", "blocked"]
    files_changed: list[str]
    validation: Validation
    reuse: str
    remaining_risks: str


class TestFailure(_Result):
    """One failing test."""

    test: str = Field(min_length=1)
    error: str


class TestResult(_Result):
    """test: the command and its counts."""

    command: str = Field(min_length=1)
    passed: int = Field(ge=0)
    failed: int = Field(ge=0)
    failures: list[TestFailure]


class SeverityCounts(_Result):
    """How many findings of each severity."""

    high: int = Field(ge=0)
    medium: int = Field(ge=0)
    low: int = Field(ge=0)


class Finding(_Result):
    """One review finding."""

    severity: Literal["high", "medium", "low"]
    file_line: str = Field(pattern=FILE_LINE_PATTERN)
    summary: str = Field(min_length=1)
    impact: str
    suggested_fix: str


class ReviewResult(_Result):
    """review: an overall judgement and findings whose tally matches the counts."""

    overall: str = Field(min_length=1)
    severity_counts: SeverityCounts
    findings: list[Finding]

    @model_validator(mode="after")
    def _counts_match(self) -> ReviewResult:
        tally = Counter(f.severity for f in self.findings)
        for level in ("high", "medium", "low"):
            claimed = getattr(self.severity_counts, level)
            if claimed != tally[level]:
                raise ValueError(
                    f"severity_counts.{level}: is {claimed} but findings hold "
                    f"{tally[level]} {level}-severity finding(s)"
                )
        return self


RESULT_MODELS: dict[str, type[_Result]] = {
    "explore": ExploreResult,
    "code": CodeResult,
    "resume": CodeResult,
    "test": TestResult,
    "review": ReviewResult,
}

Validator = Callable[[Any], str | None]


def schema_path(root: str, loc: tuple[int | str, ...]) -> str:
    """`result.findings[0].severity` from pydantic's location tuple."""
    path = root
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return path


def describe_error(exc: ValidationError, root: str = "result") -> str:
    """The first validation problem as one sentence naming its schema path."""
    first = exc.errors(include_url=False)[0]
    message = str(first["msg"])
    path = schema_path(root, first["loc"])
    if first["type"] == "value_error":
        # Our cross-field rules put their own path first: "more_in: required ...".
        detail = message.removeprefix("Value error, ")
        head, sep, rest = detail.partition(": ")
        if sep and " " not in head:
            return f"{root}.{head}: {rest}"
        return f"{path}: {detail}"
    if first["type"] == "missing":
        return f"{path}: required field is missing"
    if first["type"] == "string_pattern_mismatch" and path.endswith("file_line"):
        return f"{path}: must be 'path:line' (e.g. src/app.py:42), got {first.get('input')!r}"
    return f"{path}: {message[0].lower() + message[1:]}"


def validate_result(mode: str, result: Any) -> str | None:
    """None when `result` matches the mode's schema, else one sentence saying where not."""
    model = RESULT_MODELS[mode]
    if not isinstance(result, dict):
        return f"result: must be a JSON object, got {type(result).__name__}"
    try:
        model.model_validate(result)
    except ValidationError as exc:
        return describe_error(exc)
    return None


def validator_for(mode: str) -> Validator:
    """The submit_result validator of one mode."""

    def validate(result: Any) -> str | None:
        return validate_result(mode, result)

    validate.__name__ = f"validate_{mode}"
    return validate


VALIDATORS: dict[str, Validator] = {mode: validator_for(mode) for mode in RESULT_MODELS}
