"""`status` calls a keyless local provider (Ollama, vLLM, a llama.cpp box) ready only when
its server answers; otherwise it says "not answering" and why, within a short timeout."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

from tests.conftest import run_cli, write_provider


def test_keyless_providers_are_ready_only_when_they_answer(sd_home: Path, fake_llm) -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        closed_port = closed.getsockname()[1]
    # Accepts connections (the kernel's backlog) but never says a word.
    mute = socket.socket()
    mute.bind(("127.0.0.1", 0))
    mute.listen(8)
    try:
        write_provider(sd_home, "up", fake_llm.openai_base_url)
        write_provider(sd_home, "gone", f"http://127.0.0.1:{closed_port}/v1")
        write_provider(sd_home, "mute", f"http://127.0.0.1:{mute.getsockname()[1]}/v1")
        began = time.monotonic()
        res = run_cli(sd_home, "status", "--json")
        took = time.monotonic() - began
        text = run_cli(sd_home, "status")
    finally:
        mute.close()
    assert res.code == 0, res.stderr
    by_key = {p["key"]: p for p in json.loads(res.stdout)["providers"]}
    assert (by_key["up"]["ready"], by_key["up"]["answering"]) == (True, True)
    assert any(r.path == "/v1/models" for r in fake_llm.requests)
    assert (by_key["gone"]["ready"], by_key["gone"]["not_answering"]) == (
        False,
        "connection refused",
    )
    assert by_key["mute"]["ready"] is False
    # The demo's scripted provider serves itself in the process that calls it: never probed.
    assert (by_key["demo"]["ready"], by_key["demo"]["scripted"]) == (True, True)
    assert by_key["mute"]["not_answering"].startswith("no answer within")
    assert took < 15  # the probes run at once, each with a short timeout
    assert text.code == 0
    ready_line = next(
        line for line in text.stdout.splitlines() if line.startswith("providers ready")
    )
    assert "up" in ready_line.split(":", 1)[1].replace(",", " ").split()
    assert "gone" not in ready_line and "mute" not in ready_line
    assert "provider gone not answering: connection refused" in text.stdout


def test_status_never_breaks_a_hint_at_80_columns(sd_home: Path) -> None:
    """Each hint is whole on one line, and no line is wider than the terminal (issue 30,
    item 18: `status` wrapped "(swarmdeck key / set NAME)" mid-phrase)."""
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    write_provider(sd_home, "a-local-box", f"http://127.0.0.1:{port}/v1")
    res = run_cli(sd_home, "status", COLUMNS="80")
    assert res.code == 0, res.stderr
    lines = res.stdout.splitlines()
    # Paths are printed whole (this test's home is long), everything else fits.
    assert max(len(line) for line in lines if str(sd_home) not in line) <= 80, res.stdout
    assert any(f"{sd_home}/swarmdeck.sqlite" in line for line in lines), res.stdout
    hints = [
        "swarmdeck key set NAME",
        "start its server, or fix base_url: swarmdeck provider show a-local-box",
    ]
    for hint in hints:
        assert any(hint in line for line in lines), res.stdout
