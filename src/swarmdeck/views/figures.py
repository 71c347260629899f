"""The token figures every surface shows (TUI, `usage`, `sessions ls/show`, the demo, the
swarm table), defined once: `input` is all input tokens, cached or not (as the OpenTelemetry
GenAI spans count them); `cached` the input tokens a prompt cache served, with their share
of all input; `output` the tokens the model wrote; `tokens` input plus output."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class TokenFigures:
    """A session's (or a model's, or a swarm's) token figures."""

    input: int
    cached: int
    output: int
    # " (estimated)" or " (partly estimated)" when the provider reported no counts.
    note: str = ""

    @classmethod
    def of(cls, counts: Any, note: str | None = None) -> TokenFigures:
        """The figures of stored counts (a UsageTotals, or a mapping with its keys), whose
        `input` counts only the input tokens no cache served."""
        get = counts.get if isinstance(counts, Mapping) else lambda k, d=0: getattr(counts, k, d)
        read, written = get("cache_read", 0) or 0, get("cache_write", 0) or 0
        if note is None:
            note = getattr(counts, "estimated_note", "")
        return cls(get("input", 0) + read + written, read, get("output", 0), note)

    @property
    def total(self) -> int:
        """Input plus output tokens."""
        return self.input + self.output

    @property
    def cached_share(self) -> float | None:
        """The cached share of all input (None before any input)."""
        return self.cached / self.input if self.input else None

    def cached_cell(self) -> str:
        """Cached input tokens and their share of all input: `10,430 (77%)`."""
        share = self.cached_share
        return f"{self.cached:,} ({share:.0%})" if share is not None else f"{self.cached:,}"

    def line(self) -> str:
        """Every figure, labelled: `13,851 tokens: input 13,464 (cached 10,430, 77%) ·
        output 387`."""
        share = self.cached_share
        cached = f" (cached {self.cached:,}, {share:.0%})" if self.cached and share else ""
        return (
            f"{self.total:,} tokens: input {self.input:,}{cached} · "
            f"output {self.output:,}{self.note}"
        )
