"""Per-mode result schemas: the contract's shapes, cross-field rules, and error sentences."""

from __future__ import annotations

import copy

import pytest

from swarmdeck.dispatch.modes import MODES, RESULT_EXAMPLES
from swarmdeck.dispatch.schemas import VALIDATORS, validate_result


@pytest.mark.parametrize("mode", list(MODES))
def test_examples_shown_to_models_are_valid(mode: str) -> None:
    assert validate_result(mode, RESULT_EXAMPLES[mode][0]) is None
    assert VALIDATORS[mode](RESULT_EXAMPLES[mode][0]) is None


def example(mode: str) -> dict:
    return copy.deepcopy(RESULT_EXAMPLES[mode][0])


def test_explore_more_in_required_only_when_truncated() -> None:
    result = example("explore")
    result["truncated"] = True
    assert validate_result("explore", result) == (
        "result.more_in: required (non-empty) when truncated is true"
    )
    result["more_in"] = ["src/"]
    assert validate_result("explore", result) is None
    del result["more_in"]
    result["truncated"] = False
    assert validate_result("explore", result) is None


def test_review_counts_must_equal_the_tally() -> None:
    result = example("review")
    result["severity_counts"]["high"] = 2
    error = validate_result("review", result)
    assert error == "result.severity_counts.high: is 2 but findings hold 0 high-severity finding(s)"


@pytest.mark.parametrize(
    ("mode", "change", "path"),
    [
        ("explore", lambda r: r["facts"][0].pop("file_line"), "result.facts[0].file_line"),
        (
            "explore",
            lambda r: r["facts"][0].update(file_line="cfg.py"),
            "result.facts[0].file_line",
        ),
        ("code", lambda r: r.update(status="done"), "result.status"),
        ("code", lambda r: r["validation"].pop("passed"), "result.validation.passed"),
        (
            "code",
            lambda r: r["validation"]["commands"][0].update(exit_code="0"),
            "result.validation.commands[0].exit_code",
        ),
        ("resume", lambda r: r.pop("reuse"), "result.reuse"),
        ("test", lambda r: r.update(passed="41"), "result.passed"),
        ("test", lambda r: r.update(failed=-1), "result.failed"),
        ("test", lambda r: r["failures"][0].pop("error"), "result.failures[0].error"),
        (
            "review",
            lambda r: r["findings"][0].update(severity="urgent"),
            "result.findings[0].severity",
        ),
        ("review", lambda r: r.pop("overall"), "result.overall"),
    ],
)
def test_errors_name_the_schema_path(mode: str, change, path: str) -> None:
    result = example(mode)
    change(result)
    error = validate_result(mode, result)
    assert error is not None and error.startswith(path + ":"), error
    assert "\n" not in error


def test_a_non_object_is_refused_in_one_sentence() -> None:
    assert validate_result("test", [1, 2]) == "result: must be a JSON object, got list"


def test_extra_keys_are_tolerated() -> None:
    result = example("test")
    result["duration"] = "3s"
    assert validate_result("test", result) is None
