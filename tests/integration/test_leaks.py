"""A stored key never reaches a tool, the transcript, the engine's tables, logs or output."""

from __future__ import annotations

import secrets
import subprocess
import sys
from pathlib import Path

from swarmdeck.testing.script import FakeRequest, Fault, Reply, ReplyToolCall
from tests.conftest import cli_env, run_cli, write_provider


def _files_containing(root: Path, needle: bytes) -> list[Path]:
    hits = []
    for path in root.rglob("*"):
        if path.is_file() and needle in path.read_bytes():
            hits.append(path)
    return hits


def test_key_never_leaks(sd_home: Path, workdir: Path, fake_llm) -> None:
    key = "sk-leak" + secrets.token_hex(20)
    (workdir / ".env").write_text(f"OPENAI_API_KEY={key}\n")
    seen_auth: list[str] = []

    def model(req: FakeRequest) -> Reply:
        # A model that somehow learned the key echoes it in text and in tool arguments.
        steps = [
            Reply(tool_calls=(ReplyToolCall("shell", {"argv": ["env"]}),)),
            Reply(
                text=f"the key is {key}",
                tool_calls=(
                    ReplyToolCall("read_file", {"path": ".env"}),
                    ReplyToolCall(
                        "shell", {"argv": ["cat", str(sd_home / "credentials" / "fake.key")]}
                    ),
                    ReplyToolCall("write_file", {"path": "notes.txt", "content": f"key={key}"}),
                ),
            ),
            Reply(fault=Fault(status=500, times=1), text=f"retried; key {key}"),
            Reply(text=f"final answer mentions {key}"),
        ]
        return steps[min(req.turn, len(steps) - 1)]

    fake_llm.set_script(model)
    write_provider(sd_home, "fake", fake_llm.openai_base_url, needs_key=True)
    stored = subprocess.run(
        [sys.executable, "-m", "swarmdeck", "key", "set", "fake", "--stdin"],
        input=key + "\n",
        env=cli_env(sd_home),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert stored.returncode == 0 and key not in stored.stdout + stored.stderr
    res = run_cli(
        sd_home,
        "run",
        "inspect the environment",
        "-m",
        "fake",
        "-C",
        str(workdir),
        # The short form only reads unless told (issue 10); this model also writes a file.
        "--mode",
        "code",
        OPENAI_API_KEY=key,
    )
    assert res.code == 0, res.stderr
    seen_auth = [r.headers.get("authorization", "") for r in fake_llm.requests]
    assert seen_auth and all(
        h == f"Bearer {key}" for h in seen_auth
    )  # the key did reach the provider
    assert len(fake_llm.requests) == 4  # turns 0-2, and turn 2 once more after its 500

    show = run_cli(
        sd_home,
        "sessions",
        "show",
        "--json",
        __import__("json").loads(run_cli(sd_home, "sessions", "ls", "--json").stdout)[0]["id"],
    )
    for text in (res.stdout, res.stderr, show.stdout, show.stderr):
        assert key not in text
    assert "[REDACTED]" in show.stdout
    leaked = [p for p in _files_containing(sd_home, key.encode()) if p.name != "fake.key"]
    assert leaked == [], f"key found in {leaked}"
    # The tool never saw it: env printed nothing of it and the credential file was hidden.
    assert key not in (workdir / "notes.txt").read_text()
