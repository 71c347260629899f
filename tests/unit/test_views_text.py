"""The read model's text for narrow columns: a hint is never broken mid-phrase."""

from __future__ import annotations

from swarmdeck.views.text import hinted


def test_a_hint_that_does_not_fit_goes_whole_on_its_own_line() -> None:
    assert hinted("workers alive: 0", "start one", 80) == ["workers alive: 0  (start one)"]
    text = "providers without a key: anthropic, deepseek, glm, kimi, openai"
    assert hinted(text, "swarmdeck key set NAME", 80) == [text, "    → swarmdeck key set NAME"]
    long = "word " * 30
    lines = hinted(long.strip(), "swarmdeck provider show a-name-longer-than-the-screen", 40)
    assert all(len(line) <= 40 for line in lines[:-1])  # the text wraps between words
    assert lines[-1] == "    → swarmdeck provider show a-name-longer-than-the-screen"
