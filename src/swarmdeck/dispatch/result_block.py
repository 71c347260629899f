"""The result block read against a dispatch mode's schema (the block: runners/result_block)."""

from __future__ import annotations

from swarmdeck.dispatch.schemas import validate_result
from swarmdeck.runners import result_block
from swarmdeck.runners.result_block import (  # noqa: F401 (the block's public names)
    BEGIN,
    END,
    BlockReading,
    ParseState,
    render_block,
)


def read_block(text: str | None, mode: str) -> BlockReading:
    """Parse the last block of `text` and validate it against the mode's schema."""
    return result_block.read_block(text, lambda result: validate_result(mode, result))
