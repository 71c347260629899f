"""`swarmdeck fake-llm`: the scripted loopback LLM server, for trying and testing agents."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from swarmdeck.cli.app import app
from swarmdeck.errors import UsageError


@app.command("fake-llm")
def fake_llm(
    script: Annotated[Path, typer.Option(help="YAML or JSON script of the model's replies.")],
    port: Annotated[
        int, typer.Option(min=0, max=65535, help="Port on 127.0.0.1 (0 picks a free one).")
    ] = 0,
) -> None:
    """Serve OpenAI- and Anthropic-compatible endpoints that answer from a script.

    Endpoints: /v1/chat/completions, /v1/responses (OpenAI's Responses API, as
    Codex CLI speaks it), /v1/messages and /v1/models.

    The script (YAML, or JSON by its .json suffix) holds `scenarios:`, a list.
    A scenario has an optional `match` (a substring of the first user message;
    the last scenario without one is the fallback) and `turns`, the answers in
    order. A turn has `text`, `tool_calls` ([{name, arguments}]), `reasoning`,
    `delay` (seconds before answering), `chunk_delay` (seconds between streamed
    events), `usage` ({input, output...}), `tool_search` (a query for Anthropic's
    tool search: the deferred tools it finds come before the turn's calls) and
    `fault` ({status, retry_after, times, body, cut_stream, malformed_arguments,
    ignore_stream, empty_stream, omit_usage}). Unknown keys are refused.

    Beside `scenarios`, `context_tokens` gives the model a window: a prompt that,
    with its max_tokens, is over it is refused as `overflow` says: `vendor` (the
    default: OpenAI's `context_length_exceeded` 400, Anthropic's `prompt is too
    long`), `vllm` or `llamacpp` (their 400s), or `empty_stream` (llama.cpp's 200
    with nothing in it). Cached tokens are reported as the vendors do: OpenAI's
    for the longest prefix seen before, Anthropic's at `cache_control` breakpoints.
    """
    from swarmdeck.testing.fake_llm import run_fake_llm

    if not script.is_file():
        raise UsageError(f"script not found: {script}", "pass a YAML or JSON file to --script")
    run_fake_llm(port, script)
