"""Fanout jobs: parsing, checks before anything runs, and the workdir rule for code jobs."""

from __future__ import annotations

from pathlib import Path

import pytest

from swarmdeck.config import load_settings
from swarmdeck.dispatch.fanout import dispatch_argv, load_jobs, parse_job_spec
from swarmdeck.errors import TaskRefusedError, UnknownProviderError, UsageError
from tests.conftest import write_provider


def test_job_specs() -> None:
    assert parse_job_spec("glm:explore:/tmp/a.md") == ("glm", "explore", "/tmp/a.md")
    assert parse_job_spec("ollama:qwen3:8b:code:t.md") == ("ollama:qwen3:8b", "code", "t.md")
    assert parse_job_spec("glm:review:C:/x.md") == ("glm", "review", "C:/x.md")
    with pytest.raises(UsageError, match="PROVIDER:MODE:TASK_FILE"):
        parse_job_spec("glm:t.md")


@pytest.fixture
def setup(sd_home: Path, tmp_path: Path) -> Path:
    write_provider(sd_home, "fake", "http://127.0.0.1:9/v1")
    (tmp_path / "t.md").write_text("look around")
    return tmp_path


def load(specs: list[str], jobs_file: Path | None = None, **kw: object) -> list:
    args = {"workdir": None, "worktree": False, "timeout_s": None, "idle_timeout_s": None, **kw}
    return load_jobs(specs, jobs_file, settings=load_settings(), **args)


def test_code_jobs_on_one_workdir_need_worktrees(setup: Path, workdir: Path) -> None:
    specs = [f"fake:code:{setup / 't.md'}", f"fake:code:{setup / 't.md'}"]
    with pytest.raises(UsageError, match="2 code jobs would write to"):
        load(specs, workdir=workdir)
    jobs = load(specs, workdir=workdir, worktree=True)
    assert all(j.worktree for j in jobs)
    assert "--worktree" in dispatch_argv(jobs[0], setup / "t.md")
    # Read-only jobs share a workdir freely, and never get a worktree.
    ro = load([f"fake:explore:{setup / 't.md'}"] * 3, workdir=workdir, worktree=True)
    assert "--worktree" not in dispatch_argv(ro[0], setup / "t.md")


def test_jobs_file(setup: Path, workdir: Path) -> None:
    jobs_file = setup / "jobs.yaml"
    jobs_file.write_text(
        f"defaults: {{workdir: {workdir}, timeout: 30}}\n"
        "jobs:\n"
        "  - {name: q1, provider: fake, mode: explore, task: 'where is main?'}\n"
        "  - {provider: fake, mode: review, task_file: t.md, idle_timeout: 5}\n"
    )
    jobs = load([], jobs_file)
    assert [j.name for j in jobs] == ["q1", "job-2"]
    assert (
        jobs[1].task_file == setup / "t.md"
        and jobs[1].timeout_s == 30
        and jobs[1].idle_timeout_s == 5
    )
    argv = dispatch_argv(jobs[1], setup / "t.md")
    assert argv[argv.index("--timeout") + 1] == "30.0"


@pytest.mark.parametrize(
    ("spec_task", "error", "match"),
    [
        ("{{GOAL}}", TaskRefusedError, "job x: task refused: unfilled"),
        ("key sk-abcdefghijklmnopqrstuvwxyz0123", TaskRefusedError, "credential"),
    ],
)
def test_bad_tasks_are_refused_up_front(
    setup: Path, workdir: Path, spec_task, error, match
) -> None:
    jobs_file = setup / "jobs.yaml"
    jobs_file.write_text(
        f"jobs: [{{name: x, provider: fake, mode: explore, task: '{spec_task}', workdir: {workdir}}}]\n"
    )
    with pytest.raises(error, match=match):
        load([], jobs_file)


def test_other_bad_input(setup: Path, workdir: Path) -> None:
    with pytest.raises(UsageError, match="no jobs"):
        load([])
    with pytest.raises(UnknownProviderError):
        load([f"nosuch:explore:{setup / 't.md'}"], workdir=workdir)
    # Without --workdir, jobs work where fanout was started; a resume goes to its session's.
    [job] = load([f"fake:explore:{setup / 't.md'}"])
    assert job.workdir == Path.cwd()
    with pytest.raises(UsageError, match="resume needs a session"):
        load([f"fake:resume:{setup / 't.md'}"], workdir=workdir)
    jobs_file = setup / "resume.yaml"
    jobs_file.write_text("jobs: [{provider: fake, mode: resume, session: s1, task: go on}]\n")
    [resume] = load([], jobs_file, workdir=workdir)
    argv = dispatch_argv(resume, setup / "t.md")
    assert "--workdir" not in argv and argv[argv.index("--session") + 1] == "s1"
    with pytest.raises(UsageError, match="not found"):
        load(["fake:explore:/nonexistent/t.md"], workdir=workdir)
    with pytest.raises(UsageError, match="jobs file not found"):
        load([], setup / "none.yaml")
