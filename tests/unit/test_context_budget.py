"""The context budget's pieces: where the cut falls, what the view keeps, token counts."""

from __future__ import annotations

import gzip
import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from swarmdeck.catalog.records import EventRecord
from swarmdeck.models import estimate
from swarmdeck.models.estimate import count_tokens, encoding_for, estimate_tokens
from swarmdeck.models.registry import ProviderConfig
from swarmdeck.models.types import Message, ToolCall
from swarmdeck.runtime.context import Budget, choose_cut
from swarmdeck.runtime.journal import COMPACTION, Journal


def _event(i: int, key: str, kind: str, payload: dict) -> EventRecord:
    return EventRecord(id=i, session_id="s", seq=i, key=key, kind=kind, payload=payload, ts=0.0)


@given(st.lists(st.sampled_from(["user", "assistant+calls", "assistant"]), min_size=1))
def test_the_cut_never_falls_between_a_call_and_its_result(shape: list[str]) -> None:
    messages = [Message("user", "task")]
    for n, what in enumerate(shape):
        if what == "assistant+calls":
            messages.append(Message("assistant", "", (ToolCall(f"c{n}", "t", "{}"),)))
            messages.append(Message("tool", "x" * 40, tool_call_id=f"c{n}"))
        else:
            messages.append(Message(what.split("+")[0], "y" * 40))
    for keep in (0, 10, 100, 10_000):
        cut = choose_cut(messages, 1, [10] * (len(messages) - 1), keep)
        if cut is None:
            assert all(m.role == "tool" for m in messages[2:])
            continue
        assert 1 < cut < len(messages) and messages[cut].role != "tool"


def test_the_view_keeps_task_pinned_and_skills_verbatim() -> None:
    journal = Journal("s")
    journal.take(
        [
            _event(1, "task", "task", {"text": "the task"}),
            _event(2, "inbox:m1", "user", {"text": "remember this", "pinned": True}),
            _event(
                3,
                "turn:0",
                "assistant",
                {
                    "text": "",
                    "tool_calls": [
                        {"id": "a", "name": "load_skill", "arguments": '{"name": "s1"}'}
                    ],
                },
            ),
            _event(
                4,
                "tool:0:a",
                "tool_result",
                {"call_id": "a", "name": "load_skill", "content": "SKILL BODY"},
            ),
            _event(5, "turn:1", "assistant", {"text": "ok", "tool_calls": []}),
            _event(6, "inbox:m2", "user", {"text": "latest"}),
        ]
    )
    journal.take([_event(7, "compact:2", COMPACTION, {"through": "turn:1", "text": "SUMMARY"})])
    view = journal.view()
    assert [m.content for m in view[:1]] == ["the task"]
    assert view[1].content.startswith("SUMMARY") and "## s1\nSKILL BODY" in view[1].content
    assert [m.content for m in view[2:]] == ["remember this", "latest"]
    # The catalog's messages are all still there.
    assert len(journal.messages) == 6


def test_budget_leaves_room_for_the_answer_and_learns_a_refusal() -> None:
    config = ProviderConfig(
        key="p",
        kind="openai",
        base_url="http://x",
        model="m",
        context_tokens=8000,
        output_tokens=1000,
    )
    budget = Budget.of(config)
    assert (budget.window, budget.threshold) == (7000, 5250)
    assert Budget.of(config.model_copy(update={"output_tokens": 9000})).window == 4000
    assert budget.within(4000).threshold == 3000 and budget.within(None) is budget


def test_tiktoken_counts_openai_models_offline() -> None:
    o200k = encoding_for("openai", "gpt-5")
    assert o200k is not None and o200k.name == "o200k_base"
    assert count_tokens("hello world", o200k) == 2
    assert encoding_for("anthropic", "claude-sonnet-5-5") is None
    assert encoding_for("openai", "deepseek-chat") is None
    assert count_tokens("x" * 41, None) == estimate_tokens("x" * 41) == 11


def test_an_encoding_is_built_from_the_package_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No cache folder (another user could plant a file in /tmp), no change to the
    environment (every thread's, inherited by the processes they start); a packaged file
    that is not tiktoken's is refused by its hash, and counts fall back to the estimate."""
    monkeypatch.setattr(estimate, "_encodings", {})
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    before = dict(os.environ)
    cl100k = encoding_for("openai", "gpt-4")
    assert cl100k is not None and count_tokens("hello world", cl100k) == 2
    assert dict(os.environ) == before and list(tmp_path.iterdir()) == []
    monkeypatch.setattr(estimate, "_encodings", {})
    tampered = gzip.compress(b"cGxhbnRlZA== 0\n")
    monkeypatch.setattr(estimate.resources, "files", lambda _pkg: _Packaged(tampered))
    assert encoding_for("openai", "gpt-4") is None


class _Packaged:
    """A stand-in for the package's files: every path reads `data`."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def __truediv__(self, _part: str) -> _Packaged:
        return self

    def read_bytes(self) -> bytes:
        return self.data
