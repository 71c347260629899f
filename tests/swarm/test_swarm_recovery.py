"""The recovery policy, applied: retries after a durable delay and told why, then abort,
continue or reassign; member and swarm timeouts. Through the CLI, on both stores."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from swarmdeck.testing.script import FakeRequest, Fault, Reply
from tests.conftest import Store, write_provider
from tests.integration.test_sessions_support import Agent, Scripted, call, calls, open_catalog
from tests.swarm.support import (
    RESULTS,
    coordinator,
    event_ts,
    git_project,
    member,
    plan_of,
    prompt_of,
    swarm_json,
    user_texts,
)

REFUSED = Reply(fault=Fault(status=400, body={"error": {"message": "the request is refused"}}))
RETRIED = "An earlier attempt at this task failed"


def team_file(tmp_path: Path, recovery: dict[str, Any], **extra: Any) -> Path:
    """A team of the roles the tests plan with."""
    members = extra.pop("members", [{"role": "flaky", "mode": "explore"}])
    path = tmp_path / "team.yaml"
    path.write_text(
        yaml.safe_dump({"name": "t", "members": members, "recovery": recovery, **extra})
    )
    return path


def fails_first(mode: str) -> Agent:
    """A member whose first attempt fails (its provider refuses), whose retry submits."""

    def first(req: FakeRequest) -> Reply:
        if RETRIED in user_texts(req)[0]:
            return calls(call("submit_result", result=RESULTS[mode]))
        return REFUSED

    return Agent([first])


def always_fails(_req: FakeRequest) -> Reply:
    return REFUSED


def test_a_member_fails_once_and_succeeds_on_retry(
    store: Store, sd_home: Path, workdir: Path, tmp_path: Path, fake_llm
) -> None:
    plan = plan_of(
        {"role": "flaky", "task": "FLAKY: look", "mode": "explore"},
        {"role": "steady", "task": "STEADY: look", "mode": "explore"},
    )
    tasks: list[str] = []
    flaky = fails_first("explore")

    def flaky_turn(req: FakeRequest) -> Reply:
        tasks.append(user_texts(req)[0])
        return flaky.reply(req)

    script = Scripted(
        {"RETRY": coordinator(plan), "FLAKY:": Agent([flaky_turn]), "STEADY:": member("explore")}
    )
    fake_llm.set_script(script)
    write_provider(sd_home, "fake", fake_llm.openai_base_url, concurrency=8)
    team = team_file(tmp_path, {"max_retries": 2, "retry_delay": 1.5, "on_all_failed": "abort"})
    res, doc = swarm_json(sd_home, "RETRY", workdir, "--team", str(team))
    assert doc["verdict"] == "completed"
    flaky_doc = doc["members"][0]
    assert flaky_doc["attempts"] == 2 and flaky_doc["verdict"] == "completed"
    assert flaky_doc["session_id"].endswith(".1-flaky.r1")
    assert len(tasks) == 2 and RETRIED not in tasks[0]
    # The retry is told why the last attempt failed.
    assert f"{RETRIED}: attempt 1 (" in tasks[1]
    assert "ended error: " in tasks[1] and "rejected the request (400)" in tasks[1]
    catalog = open_catalog()
    sid = doc["session_id"]
    # The retry_delay counts from when the first attempt's end was recorded.
    first_end = catalog.event_by_key(sid, "swarm:end:0:0")
    assert first_end is not None and first_end.payload["ended_at"] <= first_end.ts
    assert event_ts(catalog, sid, "swarm:spawn:0:1") - first_end.payload["ended_at"] >= 1.5
    assert catalog.get_session(f"{sid}.1-flaky").status == "failed"
    assert "flaky [explore, fake:scripted] try 2: completed" in res.stderr


def test_all_attempts_fail_under_abort(
    store: Store, sd_home: Path, workdir: Path, tmp_path: Path, fake_llm
) -> None:
    plan = plan_of(
        {"role": "flaky", "task": "DOOMED: look", "mode": "explore"},
        {"role": "slow", "task": "SLOW: look", "mode": "explore"},
    )
    script = Scripted(
        {
            "ABORT": coordinator(plan),
            "DOOMED:": Agent([always_fails]),
            "SLOW:": Agent([Reply(text="thinking", delay=60)]),
        }
    )
    fake_llm.set_script(script)
    write_provider(sd_home, "fake", fake_llm.openai_base_url, concurrency=8)
    team = team_file(tmp_path, {"max_retries": 1, "retry_delay": 0, "on_all_failed": "abort"})
    res, doc = swarm_json(sd_home, "ABORT", workdir, "--team", str(team), code=3, timeout=90)
    assert doc["verdict"] == "error"
    flaky, slow = doc["members"]
    assert flaky["attempts"] == 2 and flaky["verdict"] == "error"
    assert slow["verdict"] == "error" and slow["attempts"] == 1  # cancelled, never retried
    catalog = open_catalog()
    assert catalog.get_session(slow["session_id"]).status == "cancelled"
    assert doc["result"]["merged_by"] == "merge"
    assert script.asked["ABORT"] == 1  # no aggregate turn after an abort
    assert script.asked["DOOMED:"] == 2
    assert "team's recovery policy is abort" in res.stderr


def test_all_attempts_fail_under_continue(
    store: Store, sd_home: Path, workdir: Path, tmp_path: Path, fake_llm
) -> None:
    plan = plan_of(
        {"role": "flaky", "task": "DOOMED: look", "mode": "explore"},
        {"role": "steady", "task": "STEADY: look", "mode": "review"},
        {"role": "after", "task": "AFTER: judge", "mode": "review", "depends_on": ["flaky"]},
    )
    seen: list[str] = []

    def merge(req: FakeRequest) -> Reply:
        seen.append(user_texts(req)[-1])
        return Reply(text="partial merge")

    script = Scripted(
        {
            "CONTINUE": Agent([calls(call("submit_plan", **plan)), merge]),
            "DOOMED:": Agent([always_fails]),
            "STEADY:": member("review"),
        }
    )
    fake_llm.set_script(script)
    write_provider(sd_home, "fake", fake_llm.openai_base_url, concurrency=8)
    team = team_file(tmp_path, {"max_retries": 1, "retry_delay": 0, "on_all_failed": "continue"})
    _res, doc = swarm_json(sd_home, "CONTINUE", workdir, "--team", str(team), code=3)
    assert doc["verdict"] == "partial"
    flaky, steady, after = doc["members"]
    assert (flaky["verdict"], flaky["attempts"]) == ("error", 2)
    assert (steady["verdict"], steady["result"]) == ("completed", RESULTS["review"])
    # A member whose dependency failed is not started.
    assert (after["verdict"], after["attempts"], after["session_id"]) == ("error", 0, None)
    assert doc["result"] == {"summary": "partial merge", "merged_by": "model"}
    assert '"verdict": "completed"' in seen[0] and '"verdict": "error"' in seen[0]
    assert "not started: it depends on flaky, which did not complete" in seen[0]
    assert "AFTER:" not in script.asked


def test_all_attempts_fail_then_reassign(
    store: Store, sd_home: Path, workdir: Path, tmp_path: Path, fake_llm
) -> None:
    plan = plan_of({"role": "primary", "task": "PRIMARY: look", "mode": "explore"})
    prompts: list[str] = []

    def primary(req: FakeRequest) -> Reply:
        if req.model != "rescue":
            return REFUSED
        prompts.append(prompt_of(req))
        return calls(call("submit_result", result=RESULTS["explore"]))

    script = Scripted({"REASSIGN": coordinator(plan), "PRIMARY:": Agent([primary])})
    fake_llm.set_script(script)
    write_provider(sd_home, "fake", fake_llm.openai_base_url, concurrency=8)
    write_provider(sd_home, "backup", fake_llm.openai_base_url, model="rescue", concurrency=8)
    team = team_file(
        tmp_path,
        {"max_retries": 0, "retry_delay": 0, "on_all_failed": "reassign", "reassign_to": "spare"},
        members=[
            {"role": "primary", "mode": "explore", "model": "fake"},
            {"role": "spare", "mode": "explore", "model": "backup", "system_prompt": "SPARE ROLE"},
        ],
    )
    res, doc = swarm_json(sd_home, "REASSIGN", workdir, "--team", str(team))
    assert doc["verdict"] == "completed"
    [primary_doc] = doc["members"]
    assert primary_doc["attempts"] == 2 and primary_doc["model"] == "backup:rescue"
    assert len(prompts) == 1 and "SPARE ROLE" in prompts[0]
    assert "primary → spare [explore, backup:rescue] try 2: completed" in res.stderr


def test_member_and_swarm_timeouts(
    store: Store, sd_home: Path, workdir: Path, tmp_path: Path, fake_llm
) -> None:
    """A member past its timeout is cancelled and retried; the swarm's max_timeout ends what
    still runs, and what completed is merged."""
    plan = plan_of(
        {"role": "sleepy", "task": "SLEEPY: look", "mode": "explore"},
        {"role": "stuck", "task": "STUCK: look", "mode": "explore"},
        {"role": "quick", "task": "QUICK: look", "mode": "explore"},
    )

    def sleepy(req: FakeRequest) -> Reply:
        if RETRIED in user_texts(req)[0]:
            return calls(call("submit_result", result=RESULTS["explore"]))
        return Reply(text="zzz", delay=60)

    script = Scripted(
        {
            "TIMEOUTS": coordinator(plan, merged="merged in time"),
            "SLEEPY:": Agent([sleepy]),
            "STUCK:": Agent([Reply(text="zzz", delay=60)]),
            "QUICK:": member("explore"),
        }
    )
    fake_llm.set_script(script)
    write_provider(sd_home, "fake", fake_llm.openai_base_url, concurrency=8)
    team = team_file(
        tmp_path,
        {"max_retries": 1, "retry_delay": 0, "on_all_failed": "continue"},
        members=[
            {"role": "sleepy", "mode": "explore", "timeout": 2},
            {"role": "stuck", "mode": "explore"},
        ],
        max_timeout=12,
    )
    _res, doc = swarm_json(sd_home, "TIMEOUTS", workdir, "--team", str(team), code=3, timeout=120)
    assert doc["verdict"] == "partial"
    sleepy_doc, stuck, quick = doc["members"]
    assert (sleepy_doc["verdict"], sleepy_doc["attempts"]) == ("completed", 2)
    assert (stuck["verdict"], stuck["attempts"]) == ("error", 1)
    assert quick["verdict"] == "completed"
    assert 12 <= doc["duration_s"] < 40
    catalog = open_catalog()
    sid = doc["session_id"]
    first = catalog.get_session(f"{sid}.1-sleepy")
    assert first.status == "cancelled" and "its timeout of 2 s ran out" in (first.error or "")
    ended = event_ts(catalog, sid, "swarm:end:0:0") - event_ts(catalog, sid, "swarm:spawn:0:0")
    # The deadline counts from the clock the coordinator read just before it spawned the
    # member, a few ms before the spawn entry's own time: 1.99 s passed here once.
    assert 1.9 <= ended < 10
    assert catalog.get_session(stuck["session_id"]).status == "cancelled"
    assert doc["result"] == {"summary": "merged in time", "merged_by": "model"}


def test_a_member_that_cannot_start_fails_like_any_other(
    sd_home: Path, tmp_path: Path, fake_llm
) -> None:
    """The repository got dirty before the coder's turn came: its worktree cannot be made,
    so each attempt fails to start, and the policy (continue) decides."""
    project = git_project(tmp_path / "repo")
    plan = plan_of(
        {"role": "finder", "task": "FIND: look", "mode": "explore"},
        {"role": "coder", "task": "CODE: change", "mode": "code", "depends_on": ["finder"]},
    )

    def finder_dirties(_req: FakeRequest) -> Reply:
        (project / "DIRTY.txt").write_text("someone's edit\n")
        return calls(call("submit_result", result=RESULTS["explore"]))

    script = Scripted({"NOSTART": coordinator(plan), "FIND:": Agent([finder_dirties])})
    fake_llm.set_script(script)
    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    team = team_file(tmp_path, {"max_retries": 1, "retry_delay": 0, "on_all_failed": "continue"})
    _res, doc = swarm_json(sd_home, "NOSTART", project, "--team", str(team), code=3)
    assert doc["verdict"] == "partial"
    finder, coder = doc["members"]
    assert finder["verdict"] == "completed"
    assert (coder["verdict"], coder["attempts"], coder["session_id"]) == ("error", 2, None)
    assert "CODE:" not in script.asked
    catalog = open_catalog()
    end = catalog.event_by_key(doc["session_id"], "swarm:end:1:1")
    assert end is not None
    assert end.payload["reason"] == (
        "it could not start: the work tree has uncommitted changes: DIRTY.txt"
    )
