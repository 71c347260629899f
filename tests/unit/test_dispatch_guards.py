"""Guards and run preparation: everything that refuses a dispatch before a model is called."""

from __future__ import annotations

from pathlib import Path

import pytest

from swarmdeck.config import load_settings
from swarmdeck.dispatch.guards import check_task_text, check_worktree_use, read_task
from swarmdeck.dispatch.modes import MODES, get_mode
from swarmdeck.dispatch.plan import DispatchOptions, prepare
from swarmdeck.dispatch.templates import task_template
from swarmdeck.errors import MissingKeyError, TaskRefusedError, UnknownProviderError, UsageError
from swarmdeck.secrets.redact import Redactor
from tests.conftest import write_provider

KEY = "zz-configured-key-0123456789"


@pytest.mark.parametrize(
    "task",
    [
        f"use this key: {KEY}",
        "call it with sk-proj-abcdefghijklmnopqrstuvwxyz123456",
        "-----BEGIN RSA PRIVATE KEY-----\nMIIB\n-----END RSA PRIVATE KEY-----",
    ],
)
def test_credentials_are_refused(task: str) -> None:
    with pytest.raises(TaskRefusedError, match="credential"):
        check_task_text(task, Redactor([KEY]))


@pytest.mark.parametrize("mode", list(MODES))
def test_an_unfilled_template_is_refused(mode: str) -> None:
    with pytest.raises(TaskRefusedError, match="unfilled template placeholder on line"):
        check_task_text(task_template(mode), Redactor())


def test_placeholder_shapes() -> None:
    with pytest.raises(TaskRefusedError, match=r"\{\{GOAL\}\}"):
        check_task_text("# Goal\n{{GOAL}}\n", Redactor())
    # Template languages in real content are fine.
    check_task_text("fix {{ .Values.image }} and {{ user.name }} in the chart", Redactor())
    check_task_text("Explain where the <FILE> marker is parsed.", Redactor())


def test_empty_and_task_sources(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="empty"):
        check_task_text("  \n", Redactor())
    with pytest.raises(UsageError, match="exactly one"):
        read_task("a", tmp_path / "t.md")
    with pytest.raises(UsageError, match="exactly one"):
        read_task(None, None)
    with pytest.raises(UsageError, match="not found"):
        read_task(None, tmp_path / "missing.md")
    (tmp_path / "t.md").write_text("do it")
    assert read_task(None, tmp_path / "t.md") == "do it"


def test_worktree_is_refused_in_read_only_modes_and_resume() -> None:
    for mode in ("explore", "test", "review", "resume"):
        with pytest.raises(UsageError, match="--worktree"):
            check_worktree_use(get_mode(mode), True)
    check_worktree_use(get_mode("code"), True)
    with pytest.raises(UsageError, match="unknown mode"):
        get_mode("agentic")


def opts(**kw: object) -> DispatchOptions:
    return DispatchOptions(**{"provider": "fake", "mode": "explore", "task": "look", **kw})


def test_prepare_resolves_and_checks(sd_home: Path, workdir: Path) -> None:
    write_provider(sd_home, "fake", "http://127.0.0.1:9/v1", model="m1")
    write_provider(sd_home, "keyed", "http://127.0.0.1:9/v1", needs_key=True)
    plan = prepare(opts(workdir=workdir, max_turns=7), load_settings())
    assert (plan.model_ref, plan.step_cap, plan.workdir) == ("fake:m1", 7, workdir.resolve())
    assert plan.timeout_s == 1800 and plan.idle_timeout_s == 600
    doc = plan.dry_run_doc()
    assert doc["type"] == "swarmdeck.dry_run" and "submit_result" in doc["tools"]
    assert str(workdir.resolve()) in doc["system_prompt"]
    assert prepare(opts(workdir=workdir, timeout_s=0), load_settings()).timeout_s is None
    assert prepare(opts(workdir=workdir, mode="code"), load_settings()).step_cap == 120
    (sd_home / "dispatch.yaml").write_text("step_caps: {explore: 5}\nidle_timeout_s: 30\n")
    plan = prepare(opts(workdir=workdir), load_settings())
    assert (plan.step_cap, plan.idle_timeout_s) == (5, 30)
    with pytest.raises(UnknownProviderError):
        prepare(opts(workdir=workdir, provider="nosuch"), load_settings())
    with pytest.raises(MissingKeyError, match="no key for provider keyed"):
        prepare(opts(workdir=workdir, provider="keyed"), load_settings())
    with pytest.raises(UsageError, match="--workdir is required"):
        prepare(opts(), load_settings())
    with pytest.raises(UsageError, match="needs --session"):
        prepare(opts(workdir=workdir, mode="resume"), load_settings())
    with pytest.raises(UsageError, match="--mode resume"):
        prepare(opts(workdir=workdir, session="abc"), load_settings())
    with pytest.raises(UsageError, match="not in one"):
        prepare(opts(workdir=workdir, mode="code", worktree=True), load_settings())
