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


def test_the_documented_jobs_file_loads_as_documented(sd_home: Path, tmp_path: Path) -> None:
    doc = (Path(__file__).parents[2] / "docs" / "fanout.md").read_text()
    example = doc.split("```yaml\n", 1)[1].split("```", 1)[0]
    here = tmp_path / "plans"
    (here / "tasks").mkdir(parents=True)
    for name in ("config.md", "fix.md", "more.md"):
        (here / "tasks" / name).write_text(f"the {name} task")
    jobs_file = here / "jobs.yaml"
    jobs_file.write_text(example)
    jobs = load([], jobs_file)
    assert [j.name for j in jobs] == ["where-is-config", "review-parser", "fix-parser", "job-4"]
    assert all(j.workdir == here / ".." and j.timeout_s == 900 for j in jobs)
    assert jobs[0].task_file == here / "tasks" / "config.md"
    assert jobs[1].task and jobs[1].task.startswith("# What to review")
    assert (jobs[1].max_turns, jobs[2].worktree, jobs[2].max_tokens) == (40, True, 200000)
    assert jobs[3].session == "0194f2c3a1b2c3"
    argv = dispatch_argv(jobs[2], jobs[2].task_file)
    assert argv[argv.index("--max-tokens") + 1] == "200000" and "--worktree" in argv


def test_jobs_file_reads_the_old_max_steps_and_refuses_typos(setup: Path, workdir: Path) -> None:
    jobs_file = setup / "jobs.yaml"
    jobs_file.write_text(
        f"defaults: {{workdir: {workdir}}}\n"
        "jobs: [{provider: fake, mode: explore, task: t, max_steps: 7}]\n"
    )
    [job] = load([], jobs_file)
    assert job.max_turns == 7 and "--max-turns" in dispatch_argv(job, setup / "t.md")
    jobs_file.write_text(
        f"defaults: {{workdir: {workdir}}}\n"
        "jobs: [{name: q, provider: fake, mode: explore, task: t, max_token: 7}]\n"
    )
    with pytest.raises(UsageError, match="job q: max_token"):
        load([], jobs_file)


def test_no_sandbox_reaches_the_writing_jobs_only(setup: Path, workdir: Path) -> None:
    task = setup / "t.md"
    jobs = load([f"fake:code:{task}", f"fake:explore:{task}"], workdir=workdir, no_sandbox=True)
    assert "--no-sandbox" in dispatch_argv(jobs[0], task)
    assert "--no-sandbox" not in dispatch_argv(jobs[1], task)  # dispatch would refuse it
    assert "--no-sandbox" not in dispatch_argv(
        load([f"fake:code:{task}"], workdir=workdir)[0], task
    )
    jobs_file = setup / "jobs.yaml"
    jobs_file.write_text(
        f"jobs:\n  - {{provider: fake, mode: code, task: t, workdir: {workdir}, no_sandbox: true}}\n"
    )
    assert "--no-sandbox" in dispatch_argv(load([], jobs_file)[0], task)
    jobs_file.write_text(
        f"jobs:\n  - {{name: ro, provider: fake, mode: review, task: t, workdir: {workdir}, "
        "no_sandbox: true}\n"
    )
    with pytest.raises(UsageError, match="job ro: no_sandbox does not apply to review mode"):
        load([], jobs_file)
