"""Verdict classification in the contract's order, and the verdict built from events."""

from __future__ import annotations

import json
import stat

import pytest

from swarmdeck.catalog.records import EventRecord, UsageTotals
from swarmdeck.dispatch.modes import RESULT_EXAMPLES
from swarmdeck.dispatch.result_block import render_block
from swarmdeck.dispatch.verdict import (
    RunFacts,
    Verdict,
    build_verdict,
    classify,
    write_final_text,
    write_verdict_file,
)

LONG = "x" * 200


@pytest.mark.parametrize(
    ("kw", "expected"),
    [
        ({"reason": "step_cap", "parse_state": "parsed", "failed": True}, "step_capped_partial"),
        ({"reason": "budget", "parse_state": "parsed"}, "budget_exhausted"),
        ({"reason": "submitted", "parse_state": "parsed", "timed_out": True}, "completed"),
        ({"reason": "provider_error", "failed": True, "final_text": LONG}, "error"),
        ({"reason": "timeout", "timed_out": True, "final_text": LONG}, "error"),
        ({"reason": "idle_timeout", "idle_timed_out": True}, "error"),
        ({"reason": "interrupted", "interrupted": True}, "error"),
        # Schema version 2: a long text without a result is not a completed run.
        ({"reason": "model_done", "final_text": LONG}, "unstructured"),
        ({"reason": "model_done", "final_text": "x" * 199}, "empty"),
        ({"reason": "result_malformed", "parse_state": "malformed"}, "malformed"),
        (
            {"reason": "result_malformed", "parse_state": "malformed", "final_text": LONG},
            "malformed",
        ),
        ({"reason": "timeout", "timed_out": True, "parse_state": "malformed"}, "error"),
        (
            {"reason": "model_done", "parse_state": "unstructured", "final_text": LONG},
            "unstructured",
        ),
        ({"reason": "model_done", "parse_state": "unstructured"}, "empty"),
    ],
)
def test_classification_order(kw: dict, expected: str) -> None:
    args = {
        "reason": None,
        "parse_state": "unavailable",
        "failed": False,
        "timed_out": False,
        "idle_timed_out": False,
        "interrupted": False,
        "final_text": "",
        **kw,
    }
    assert classify(**args) == expected


def ev(i: int, kind: str, **payload: object) -> EventRecord:
    return EventRecord(i, "s1", i, f"k{i}", kind, dict(payload), 1000.0 + i)


def facts(events: list[EventRecord], **kw: object) -> RunFacts:
    base = {
        "run_id": "r1",
        "session_id": "s1",
        "provider": "fake",
        "model": "fake:m",
        "mode": "test",
        "step_cap": 80,
        "duration_s": 1.23456,
        "events": events,
        "usage": UsageTotals(turns=2, input=10, output=5, cost_usd=None),
        "diagnostics": "d" * 600 + "END",
    }
    return RunFacts(**{**base, **kw})


GOOD = RESULT_EXAMPLES["test"][0]


def submission(i: int, accepted: bool, error: str | None = None) -> EventRecord:
    return ev(
        i,
        "tool_result",
        name="submit_result",
        accepted=accepted,
        error=error,
        is_error=not accepted,
    )


def test_parsed_after_a_correction() -> None:
    events = [
        ev(1, "task", text="t"),
        ev(2, "assistant", text="first", tool_calls=[]),
        submission(3, False, "result.passed: required field is missing"),
        ev(4, "assistant", text="again", tool_calls=[]),
        submission(5, True),
        ev(6, "status", status="completed", reason="submitted"),
    ]
    v = build_verdict(facts(events, stored_result=GOOD))
    assert (v.verdict, v.parse_state, v.result, v.exit_code) == ("completed", "parsed", GOOD, 0)
    assert v.parse_error is None and v.stderr_tail is None
    assert v.steps == 2 and v.tokens.input == 10 and v.duration_s == 1.235
    assert v.tool_errors.other == 0  # rejected submissions are parse errors, not tool errors


def test_malformed_names_the_path_and_keeps_result_null() -> None:
    events = [
        ev(1, "assistant", text="t", tool_calls=[]),
        submission(2, False, "result.failed: input should be a valid integer"),
        ev(3, "status", status="completed", reason="result_malformed"),
    ]
    v = build_verdict(facts(events, stored_result=None))
    assert v.parse_state == "malformed" and v.result is None
    assert v.parse_error == "result.failed: input should be a valid integer."
    assert v.verdict == "malformed" and v.exit_code == 3
    assert v.stderr_tail is None  # the contract tails error, unstructured and empty only


def test_long_text_without_a_result_is_unstructured_and_exits_3() -> None:
    events = [
        ev(1, "assistant", text=LONG, tool_calls=[]),
        ev(2, "status", status="completed", reason="model_done"),
    ]
    v = build_verdict(facts(events))
    assert (v.verdict, v.exit_code, v.parse_state, v.result) == (
        "unstructured",
        3,
        "unavailable",
        None,
    )
    assert v.stderr_tail is not None and v.stderr_tail.endswith("END") and len(v.stderr_tail) == 500


def test_cut_off_submission_is_unstructured() -> None:
    events = [submission(1, False, "arguments are not valid JSON (Expecting value)")]
    assert build_verdict(facts(events)).parse_state == "unstructured"


def test_cut_off_last_try_is_malformed() -> None:
    # The model was shown the error twice and its third try was still not JSON.
    events = [
        submission(1, False, "result.passed: required field is missing"),
        submission(2, False, "result.passed: required field is missing"),
        submission(3, False, "arguments are not valid JSON (Expecting value)"),
        ev(4, "status", status="completed", reason="result_malformed"),
    ]
    v = build_verdict(facts(events))
    assert (v.verdict, v.parse_state, v.exit_code) == ("malformed", "malformed", 3)
    assert v.parse_error == "arguments are not valid JSON (Expecting value)."


def test_result_block_in_final_text_is_read() -> None:
    text = "Ran the tests.\n" + render_block(GOOD)
    events = [
        ev(1, "assistant", text=text, tool_calls=[]),
        ev(2, "status", status="completed", reason="model_done"),
    ]
    v = build_verdict(facts(events))
    assert v.parse_state == "parsed" and v.result == GOOD and v.verdict == "completed"


def test_failures_tool_errors_and_flags() -> None:
    events = [
        ev(1, "assistant", text="", tool_calls=[]),
        ev(2, "tool_result", name="shell", is_error=True, permission_denied=True),
        ev(3, "tool_result", name="read_file", is_error=True, permission_denied=False),
        ev(4, "error", message="provider said no"),
        ev(5, "status", status="failed", reason="provider_error"),
    ]
    v = build_verdict(facts(events))
    assert v.verdict == "error" and v.reason == "provider_error"
    assert (v.tool_errors.permission_denied, v.tool_errors.other) == (1, 1)
    timed = build_verdict(
        facts(events[:3], reason="timeout", timed_out=True, timeout_exit_code=124)
    )
    assert (timed.verdict, timed.timed_out, timed.exit_code, timed.reason) == (
        "error",
        True,
        124,
        "timeout",
    )


def test_step_cap_wins() -> None:
    events = [
        ev(1, "assistant", text=LONG, tool_calls=[]),
        ev(2, "status", status="completed", reason="step_cap"),
    ]
    assert build_verdict(facts(events)).verdict == "step_capped_partial"


def test_files_are_private_and_final_text_always_exists(tmp_path) -> None:
    path = tmp_path / "run" / "final.txt"
    write_final_text(path, [])
    assert path.read_text() == "no model output\n"
    write_final_text(path, [ev(1, "assistant", text="the answer", tool_calls=[])])
    assert path.read_text() == "the answer"
    v = build_verdict(facts([]))
    vpath = tmp_path / "run" / "verdict.json"
    write_verdict_file(vpath, v)
    assert stat.S_IMODE(vpath.stat().st_mode) == 0o600
    assert Verdict.model_validate(json.loads(vpath.read_text())) == v


def test_every_contract_field_is_there() -> None:
    doc = json.loads(build_verdict(facts([])).line())
    for name in [
        "type",
        "schema_version",
        "run_id",
        "session_id",
        "provider",
        "model",
        "mode",
        "verdict",
        "exit_code",
        "timed_out",
        "idle_timed_out",
        "interrupted",
        "steps",
        "step_cap",
        "duration_s",
        "tokens",
        "cost_usd",
        "tool_errors",
        "parse_state",
        "parse_error",
        "result",
        "final_text_path",
        "artifacts",
        "stderr_tail",
    ]:
        assert name in doc, name
    assert doc["type"] == "swarmdeck.verdict" and doc["schema_version"] == "3"
    assert set(doc["tokens"]) == {"input", "output", "reasoning", "cache_read", "cache_write"}
    assert set(doc["tool_errors"]) == {"permission_denied", "other"}
