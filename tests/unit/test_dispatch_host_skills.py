"""Playbook skills: rendered from configured providers, updated in place, removed cleanly."""

from __future__ import annotations

from pathlib import Path

import pytest

from swarmdeck.config import load_settings
from swarmdeck.dispatch.host_skills import MANIFEST, install, render, skill_dir, uninstall
from swarmdeck.errors import UsageError
from swarmdeck.secrets.store import CredentialStore
from tests.conftest import write_provider


def test_only_configured_providers_are_routed(sd_home: Path) -> None:
    write_provider(sd_home, "localfake", "http://127.0.0.1:9/v1")
    CredentialStore(load_settings().credentials_dir).set("deepseek", "ds-test-key-0123456789")
    files = render(load_settings())
    skill = files["SKILL.md"]
    assert "| explore | `deepseek`" in skill and "`localfake`" in skill
    assert "anthropic" not in skill.split("## Which provider")[1].split("## Dispatch")[0]
    for needle in ("When to delegate", "result first, flags always", "Resume before", "background"):
        assert needle in skill
    assert set(files) == {
        "SKILL.md",
        *(f"modes/{m}.md" for m in ("code", "resume", "explore", "test", "review")),
    }
    assert "severity_counts" in files["modes/review.md"] and "<FILL:" in files["modes/code.md"]
    routed = render(load_settings(), {"review": "localfake"})["SKILL.md"]
    assert "| review | `localfake`" in routed
    with pytest.raises(UsageError, match="not configured"):
        render(load_settings(), {"review": "anthropic"})


def test_install_update_uninstall(sd_home: Path, tmp_path: Path) -> None:
    target = tmp_path / "proj" / ".claude"
    first = install("claude", target, load_settings())
    assert first.path == target / "skills" / "swarmdeck" and not first.updated
    assert "No provider is configured yet" in (first.path / "SKILL.md").read_text()
    write_provider(sd_home, "localfake", "http://127.0.0.1:9/v1")
    (first.path / "notes.md").write_text("mine")  # a file the user added
    second = install("claude", target, load_settings())
    assert second.updated and "`localfake`" in (second.path / "SKILL.md").read_text()
    assert uninstall("claude", target) == first.path
    assert (first.path / "notes.md").exists() and not (first.path / MANIFEST).exists()
    assert not (first.path / "SKILL.md").exists() and not (first.path / "modes").exists()
    assert uninstall("codex", tmp_path / "none") is None


def test_foreign_skill_directory_is_left_alone(sd_home: Path, tmp_path: Path) -> None:
    where = skill_dir("codex", tmp_path)
    where.mkdir(parents=True)
    (where / "SKILL.md").write_text("someone else's")
    with pytest.raises(UsageError, match="not written by swarmdeck"):
        install("codex", tmp_path, load_settings())
    with pytest.raises(UsageError, match="not written by swarmdeck"):
        uninstall("codex", tmp_path)
    with pytest.raises(UsageError, match="unknown host"):
        skill_dir("cursor", None)


def test_every_verdict_class_has_its_own_advice(sd_home: Path) -> None:
    from typing import get_args

    from swarmdeck.dispatch.host_skills import VERDICT_ADVICE
    from swarmdeck.dispatch.verdict import SCHEMA_VERSION, VerdictClass

    assert list(VERDICT_ADVICE) == list(get_args(VerdictClass))  # the contract's order
    skill = render(load_settings())["SKILL.md"]
    verdicts = skill.split("3. `verdict`")[1].split("4. `parse_state`")[0]
    for name in get_args(VerdictClass):
        assert f"   - `{name}`: " in verdicts, name
    assert f"schema_version {SCHEMA_VERSION}" in verdicts and "docs/contract.md" in verdicts
    malformed = VERDICT_ADVICE["malformed"]
    assert "schema path" in malformed and "do not rewrite" in malformed
    assert "submit_result" in VERDICT_ADVICE["unstructured"]
    assert "rewrite the task" not in skill
    assert "worktrees ls" in skill and "worktrees rm PATH" in skill
