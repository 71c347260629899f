"""`swarmdeck provider`, `key`, `status` and `usage` end to end."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from pathlib import Path

from tests.conftest import cli_env, run_cli, write_provider


def _key_set(home: Path, provider: str, key: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "swarmdeck", "key", "set", provider, "--stdin"],
        input=key,
        env=cli_env(home),
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_provider_add_show_rm(sd_home: Path) -> None:
    add = run_cli(
        sd_home,
        "provider",
        "add",
        "local",
        "--base-url",
        "http://127.0.0.1:8000/v1",
        "--model",
        "qwen",
        "--no-needs-key",
    )
    assert add.code == 0, add.stderr
    shown = json.loads(run_cli(sd_home, "provider", "show", "local").stdout)
    assert shown["base_url"] == "http://127.0.0.1:8000/v1" and shown["source"].endswith(
        "local.yaml"
    )
    keys = [p["key"] for p in json.loads(run_cli(sd_home, "provider", "ls", "--json").stdout)]
    assert {"openai", "anthropic", "deepseek", "kimi", "glm", "ollama", "local"} <= set(keys)
    assert run_cli(sd_home, "provider", "rm", "local").code == 0
    refused = run_cli(sd_home, "provider", "rm", "openai")
    assert refused.code == 2 and "packaged" in refused.stderr and "Traceback" not in refused.stderr
    bad = run_cli(sd_home, "provider", "add", "Bad Name", "--base-url", "x", "--model", "m")
    assert bad.code == 2 and len(bad.stderr.strip().splitlines()) == 1


def test_provider_add_takes_the_responses_kind(sd_home: Path) -> None:
    args = ("--base-url", "https://api.openai.com/v1", "--model", "gpt-5.4")
    add = run_cli(sd_home, "provider", "add", "resp", "--kind", "openai-responses", *args)
    assert add.code == 0, add.stderr
    shown = json.loads(run_cli(sd_home, "provider", "show", "resp").stdout)
    assert (shown["kind"], shown["tool_search"]) == ("openai-responses", None)
    assert "kind: openai-responses" in (sd_home / "providers" / "resp.yaml").read_text()
    bad = run_cli(sd_home, "provider", "add", "resp2", "--kind", "openai-chat", *args)
    assert bad.code == 2 and "--kind" in bad.stderr and "Traceback" not in bad.stderr


def test_key_store_permissions_and_status(sd_home: Path) -> None:
    key = "sk-status-0123456789abcdefghij"
    res = _key_set(sd_home, "deepseek", key)
    assert res.returncode == 0, res.stderr
    assert key not in res.stdout + res.stderr
    key_file = sd_home / "credentials" / "deepseek.key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(key_file.parent.stat().st_mode) == 0o700
    status = run_cli(sd_home, "status", "--json")
    assert key not in status.stdout
    doc = json.loads(status.stdout)
    by_key = {p["key"]: p for p in doc["providers"]}
    assert by_key["deepseek"]["has_key"] is True and by_key["openai"]["has_key"] is False
    assert doc["sandbox"]["active"] in (True, False) and doc["sandbox"]["reason"]
    assert doc["store"]["kind"] == "sqlite"
    # A key file others can read is refused, with the fix named.
    key_file.chmod(0o644)
    loose = run_cli(sd_home, "run", "t", "-m", "deepseek", "-C", str(sd_home))
    assert loose.code == 2 and "chmod 600" in loose.stderr
    key_file.chmod(0o600)
    assert run_cli(sd_home, "key", "rm", "deepseek").code == 0
    assert not key_file.exists()
    # Removing a key that is not there is said, one line, exit 2 (it exited 0 silently).
    again = run_cli(sd_home, "key", "rm", "deepseek")
    assert again.code == 2 and again.stdout == "", again
    [line] = again.stderr.strip().splitlines()
    assert "no stored key for deepseek; nothing was removed" in line and "key ls" in line
    unknown = _key_set(sd_home, "nosuch", "x")
    assert unknown.returncode == 2 and "unknown provider" in unknown.stderr


def test_usage_reports_tokens(sd_home: Path, workdir: Path, fake_llm) -> None:
    fake_llm.set_script(
        {"scenarios": [{"turns": [{"text": "hi", "usage": {"input": 120, "output": 30}}]}]}
    )
    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    assert run_cli(sd_home, "run", "t", "-m", "fake", "-C", str(workdir)).code == 0
    doc = json.loads(run_cli(sd_home, "usage", "--json").stdout)
    assert doc["turns"] == 1 and doc["tokens"]["output"] == 30
    assert doc["tokens"]["input"] + doc["tokens"]["cache_read"] == 120
    table = run_cli(sd_home, "usage", "--since", "2020-01-01")
    assert "fake:scripted" in table.stdout
    assert run_cli(sd_home, "usage", "--since", "yesterday").code == 2
