"""`swarmdeck swarm` end to end through the CLI: the fake LLM behind the real SDK, a real git
repository, real worktrees, on both stores."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import yaml

from swarmdeck.swarm.report import MEMBER_FIELDS, REPORT_FIELDS
from swarmdeck.testing.script import FakeRequest, Fault, Reply
from tests.conftest import Store, run_cli, write_provider
from tests.integration.test_sessions_support import (
    Agent,
    Scripted,
    call,
    calls,
    finish,
    open_catalog,
    popen_cli,
    text,
    wait_for,
)
from tests.swarm.support import (
    RESULTS,
    coordinator,
    event_ts,
    git_project,
    journal,
    member,
    plan_of,
    prompt_of,
    report_of,
    run_swarm,
    swarm_json,
    tool_texts,
    user_texts,
)

FOUR = plan_of(
    {"role": "security", "task": "SEC: review app.py for holes", "mode": "review"},
    {"role": "explorer", "task": "EXP: where is main defined", "mode": "explore"},
    {"role": "coder", "task": "CODE: add FEATURE.md", "mode": "code"},
    {"role": "tester", "task": "TEST: run the tests", "mode": "test", "depends_on": ["coder"]},
)


def test_four_members_end_to_end(store: Store, sd_home: Path, tmp_path: Path, fake_llm) -> None:
    project = git_project(tmp_path / "repo")
    seen: dict[str, object] = {}

    def tester_looks(req: FakeRequest) -> Reply:
        # The tester depends on the coder: its task carries the coder's result, and it works
        # in the coder's worktree (so it sees the change).
        seen["tester_task"] = user_texts(req)[0]
        return calls(call("list_dir"))

    def tester_submits(req: FakeRequest) -> Reply:
        seen["tester_listing"] = tool_texts(req)[-1]
        return calls(call("submit_result", result=RESULTS["test"]))

    def merge(req: FakeRequest) -> Reply:
        outcomes = json.loads(user_texts(req)[-1].split("outcomes:\n", 1)[1].split("\n\n")[0])
        seen["outcomes"] = outcomes
        verdicts = ",".join(f"{o['role']}={o['verdict']}" for o in outcomes)
        return text(f"MERGED {verdicts}")

    script = Scripted(
        {
            "SWARMTASK": Agent([calls(call("submit_plan", **FOUR)), merge]),
            "SEC:": member("review"),
            "EXP:": member("explore"),
            "CODE:": member("code", calls(call("write_file", path="FEATURE.md", content="new\n"))),
            "TEST:": Agent([tester_looks, tester_submits]),
        }
    )
    fake_llm.set_script(script)
    write_provider(sd_home, "fake", fake_llm.openai_base_url, concurrency=8)

    res, doc = swarm_json(sd_home, "SWARMTASK: review and extend", project)
    assert doc["verdict"] == "completed"
    assert doc["result"] == {
        "summary": "MERGED security=completed,explorer=completed,coder=completed,tester=completed",
        "merged_by": "model",
    }
    assert [m["role"] for m in doc["members"]] == ["security", "explorer", "coder", "tester"]
    expected = [RESULTS["review"], RESULTS["explore"], RESULTS["code"], RESULTS["test"]]
    assert [m["result"] for m in doc["members"]] == expected
    assert {m["verdict"] for m in doc["members"]} == {"completed"}
    assert all(m["attempts"] == 1 and m["model"] == "fake:scripted" for m in doc["members"])
    assert all(m["tokens"]["input"] > 0 for m in doc["members"])
    member_tokens = sum(m["tokens"]["input"] for m in doc["members"])
    assert doc["tokens"]["input"] > member_tokens  # the coordinator's own turns count too
    assert doc["plan"]["source"] == "model" and doc["plan"]["dropped"] == []
    assert doc["duration_s"] > 0
    assert list(doc) == list(REPORT_FIELDS)
    assert all(list(m) == list(MEMBER_FIELDS) for m in doc["members"])
    # Asked once each: the plan, the merge, and every member turn.
    assert script.asked == {"SWARMTASK": 2, "SEC:": 2, "EXP:": 2, "CODE:": 3, "TEST:": 2}

    catalog = open_catalog()
    sid = doc["session_id"]
    entries = journal(catalog, sid)
    # Three members started at once; the tester only once the coder had ended.
    first_end = min(event_ts(catalog, sid, f"swarm:end:{i}:0") for i in range(3))
    assert max(event_ts(catalog, sid, f"swarm:spawn:{i}:0") for i in range(3)) < first_end
    assert event_ts(catalog, sid, "swarm:spawn:3:0") >= event_ts(catalog, sid, "swarm:end:2:0")
    assert "Results of the members this task depends on" in str(seen["tester_task"])
    assert '"files_changed"' in str(seen["tester_task"])
    coder = doc["members"][2]
    tree = coder["worktree"]
    assert tree["repo"] == str(project) and Path(tree["path"]).is_dir()
    assert entries["swarm:spawn:3:0"]["workdir"] == entries["swarm:spawn:2:0"]["workdir"]
    assert "FEATURE.md" in str(seen["tester_listing"])
    assert not (project / "FEATURE.md").exists()  # the main tree is untouched...
    assert tree["merge"] in res.stderr
    subprocess.run(tree["merge"], shell=True, check=True, capture_output=True)
    assert (project / "FEATURE.md").read_text() == "new\n"  # ...until the merge command
    staged = subprocess.run(
        ["git", "diff", "--cached", "--name-only"], cwd=project, capture_output=True, text=True
    ).stdout.split()
    assert staged == ["FEATURE.md"]
    # The read-only members shared the swarm's workdir.
    assert entries["swarm:spawn:0:0"]["workdir"] == str(project)
    members = [catalog.get_session(m["session_id"]) for m in doc["members"]]
    assert {r.status for r in members} == {"completed"}
    assert {r.parent_id for r in members} == {sid} and {r.group for r in members} == {sid}
    for line in ("security [review, fake:scripted] try 1: completed", "completed · 4/4 members"):
        assert line in res.stderr

    shown = run_cli(sd_home, "sessions", "tree", sid)
    assert shown.code == 0
    for m in doc["members"]:
        assert m["session_id"] in shown.stdout
    assert "swarm: SWARMTASK" in shown.stdout


def test_a_team_and_a_plan_file(
    store: Store, sd_home: Path, workdir: Path, tmp_path: Path, fake_llm
) -> None:
    """--plan skips the decomposition; the review team's roles bring their prompts; stdout
    is the merged result."""
    prompts: dict[str, str] = {}

    def security(req: FakeRequest) -> Reply:
        prompts["security"] = prompt_of(req)
        return calls(call("submit_result", result=RESULTS["review"]))

    script = Scripted(
        {
            "REVIEW IT": Agent([text("the merged review")]),
            "SEC:": Agent([security]),
            "PERF:": member("review"),
        }
    )
    fake_llm.set_script(script)
    write_provider(sd_home, "fake", fake_llm.openai_base_url, concurrency=8)
    plan_file = tmp_path / "plan.yaml"
    plan_file.write_text(
        yaml.safe_dump(
            [
                {"role": "security", "task": "SEC: look for holes"},  # mode from the team
                {"role": "performance", "task": "PERF: look for slow paths"},
            ]
        )
    )
    res = run_swarm(
        sd_home,
        "REVIEW IT",
        "-C",
        str(workdir),
        "-m",
        "fake",
        "--team",
        "review",
        "--plan",
        str(plan_file),
    )
    assert res.code == 0, res.stderr[-3000:]
    assert res.stdout == "the merged review\n"
    assert script.asked["REVIEW IT"] == 1  # no decompose turn: only the merge
    assert "Review for security only" in prompts["security"]
    assert "## The swarm" in prompts["security"] and "memory_set" in prompts["security"]


def test_max_members_cuts_the_plan_and_says_why(
    store: Store, sd_home: Path, workdir: Path, fake_llm
) -> None:
    big = plan_of(
        {"role": "a", "task": "A: one", "mode": "explore"},
        {"role": "b", "task": "B: two", "mode": "explore"},
        {"role": "c", "task": "C: three", "mode": "explore"},
        {"role": "d", "task": "D: four", "mode": "review", "depends_on": ["c"]},
    )
    script = Scripted({"BIG": coordinator(big), "A:": member("explore"), "B:": member("explore")})
    fake_llm.set_script(script)
    write_provider(sd_home, "fake", fake_llm.openai_base_url, concurrency=8)
    res, doc = swarm_json(sd_home, "BIG job", workdir, "--max-members", "2")
    assert [m["role"] for m in doc["members"]] == ["a", "b"]
    assert doc["plan"]["dropped"] == [
        {"role": "c", "task": "C: three", "reason": "over the limit of 2 members (max_members)"},
        {"role": "d", "task": "D: four", "reason": "it depends on c, which was dropped"},
    ]
    assert "dropped c: over the limit of 2 members (max_members)" in res.stderr
    assert "dropped d: it depends on c, which was dropped" in res.stderr
    assert "C:" not in script.asked and "D:" not in script.asked


def test_a_malformed_plan_then_corrected(
    store: Store, sd_home: Path, workdir: Path, fake_llm
) -> None:
    bad = plan_of(
        {"role": "finder", "task": "FIND: look", "mode": "explore"},
        {"role": "judge", "task": "JUDGE: judge", "mode": "review", "depends_on": ["seeker"]},
    )
    good = plan_of(
        {"role": "finder", "task": "FIND: look", "mode": "explore"},
        {"role": "judge", "task": "JUDGE: judge", "mode": "review", "depends_on": ["finder"]},
    )
    shown: list[str] = []

    def corrected(req: FakeRequest) -> Reply:
        shown.append(tool_texts(req)[-1])
        return calls(call("submit_plan", **good))

    script = Scripted(
        {
            "PLANME": Agent([calls(call("submit_plan", **bad)), corrected, text("merged")]),
            "FIND:": member("explore"),
            "JUDGE:": member("review"),
        }
    )
    fake_llm.set_script(script)
    write_provider(sd_home, "fake", fake_llm.openai_base_url, concurrency=8)
    res = run_swarm(sd_home, "PLANME", "-C", str(workdir), "-m", "fake", "--json")
    assert res.code == 0, res.stderr[-3000:]
    assert len(shown) == 1
    assert shown[0].endswith(
        "error: plan rejected: plan[1].depends_on[0]: 'seeker' is not a role of this plan "
        "(roles: finder, judge). Fix it and call submit_plan again (2 tries left)."
    )
    doc = report_of(res)
    assert doc["verdict"] == "completed"
    assert [m["role"] for m in doc["members"]] == ["finder", "judge"]
    assert script.asked["PLANME"] == 3


def test_a_plan_that_stays_malformed(store: Store, sd_home: Path, workdir: Path, fake_llm) -> None:
    no_mode = plan_of({"role": "x", "task": "X: do"})
    script = Scripted({"NOPLAN": coordinator(no_mode, no_mode, no_mode)})
    fake_llm.set_script(script)
    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    _res, doc = swarm_json(sd_home, "NOPLAN", workdir, code=3)
    assert doc["verdict"] == "malformed" and doc["members"] == [] and doc["result"] is not None
    # Its transcript says no merge happened (it said "merged by the none").
    shown = run_cli(sd_home, "sessions", "show", doc["session_id"]).stdout
    assert "swarm malformed, nothing merged: the plan stayed invalid" in shown, shown
    assert "by the none" not in shown
    assert doc["plan"]["error"] == (
        "the plan stayed invalid: plan[0].mode: required field is missing "
        "(one of code, explore, test, review)"
    )
    assert script.asked["NOPLAN"] == 3


def test_the_aggregate_turn_fails_and_the_merge_is_deterministic(
    store: Store, sd_home: Path, workdir: Path, fake_llm
) -> None:
    two = plan_of(
        {"role": "finder", "task": "FIND: where", "mode": "explore"},
        {"role": "judge", "task": "JUDGE: how", "mode": "review"},
    )
    script = Scripted(
        {
            "MERGEFAIL": Agent([calls(call("submit_plan", **two)), _bad_request]),
            "FIND:": member("explore"),
            "JUDGE:": member("review"),
        }
    )
    fake_llm.set_script(script)
    write_provider(sd_home, "fake", fake_llm.openai_base_url, concurrency=8)
    _res, doc = swarm_json(sd_home, "MERGEFAIL", workdir)
    assert doc["verdict"] == "completed"
    shown = run_cli(sd_home, "sessions", "show", doc["session_id"]).stdout
    assert "swarm completed, merged without the coordinator's model" in shown, shown
    summary = doc["result"]["summary"]
    assert doc["result"]["merged_by"] == "merge"
    assert "merged without the coordinator's model: its turn failed" in summary
    assert "## finder (explore): completed" in summary
    assert "- load() caches the parsed file (src/cfg.py:42)" in summary
    assert "- [medium] src/io.py:88: write() ignores a failed flush" in summary


def _bad_request(_req: FakeRequest) -> Reply:
    return Reply(fault=Fault(status=400, body={"error": {"message": "the request is refused"}}))


def test_bad_input_is_one_line_and_exit_2(sd_home: Path, workdir: Path, tmp_path: Path) -> None:
    write_provider(sd_home, "fake", "http://127.0.0.1:9/v1")
    cases = {
        ("swarm", "TASK", "-C", str(workdir)): "the swarm needs a model for its coordinator",
        ("swarm", "TASK", "-C", str(workdir), "-m", "fake", "--team", "nope"): "no team named",
        ("swarm", "TASK", "-C", str(tmp_path / "missing"), "-m", "fake"): "workdir does not exist",
        ("swarm", "  ", "-C", str(workdir), "-m", "fake"): "the task is empty",
        ("swarm", "-C", str(workdir), "-m", "fake"): "the task or --task-file",
        ("swarm", "--task-file", str(tmp_path / "none.md"), "-m", "fake"): "task file not found",
        (
            "swarm",
            "T",
            "--task-file",
            str(tmp_path / "t.md"),
            "-m",
            "fake",
        ): "the task or --task-file",
    }
    bad_plan = tmp_path / "plan.json"
    bad_plan.write_text(json.dumps([{"role": "x", "task": "t", "mode": "code"}]))
    cases[("swarm", "T", "-C", str(workdir), "-m", "fake", "--plan", str(bad_plan))] = (
        "plan[0].mode: code members need a clean git repository"
    )
    key = "sk-ant-" + "a1b2c3d4" * 4
    leaky = tmp_path / "leaky.yaml"
    leaky.write_text(f"- {{role: x, task: 'use {key}', mode: explore}}\n")
    cases[("swarm", "T", "-C", str(workdir), "-m", "fake", "--plan", str(leaky))] = (
        "role x: task refused: it contains a credential"
    )
    cases[("swarm", f"use {key}", "-C", str(workdir), "-m", "fake")] = (
        "task refused: it contains a credential"
    )
    for args, needle in cases.items():
        res = run_cli(sd_home, *args)
        assert res.code == 2, (args, res.stderr)
        assert needle in res.stderr, (args, res.stderr)
        assert len(res.stderr.strip().splitlines()) == 1 and "Traceback" not in res.stderr
        assert res.stdout == "" and key not in res.stderr
    for args in (("TASK", "-C", str(workdir), "--json"), ("TASK", "--bogus", "--json")):
        res = run_cli(sd_home, "swarm", *args)
        assert res.code == 2
        assert json.loads(res.stdout)["type"] == "swarmdeck.error"


def test_an_interrupt_cancels_the_swarm(sd_home: Path, workdir: Path, fake_llm) -> None:
    """SIGINT: the swarm and its members are cancelled, the object still printed, exit 3."""
    plan = plan_of({"role": "slow", "task": "SLOW: think", "mode": "explore"})
    fake_llm.set_script(
        Scripted({"HALT": coordinator(plan), "SLOW:": Agent([Reply(text="zzz", delay=60)])})
    )
    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    proc = popen_cli(sd_home, "swarm", "HALT", "-C", str(workdir), "-m", "fake", "--json")
    catalog = open_catalog()
    wait_for(
        lambda: any(s.status == "running" and s.parent_id for s in catalog.list_sessions()),
        timeout=60,
    )
    proc.send_signal(signal.SIGINT)
    code, out, err = finish(proc, timeout=60)
    assert code == 3, err[-3000:]
    doc = json.loads(out.strip().splitlines()[-1])
    assert doc["verdict"] == "error" and doc["members"][0]["verdict"] == "error"
    assert "interrupted: cancelling the swarm" in err
    assert {s.status for s in catalog.list_sessions()} == {"cancelled"}


def test_a_role_runs_as_a_named_agent(sd_home: Path, workdir: Path, fake_llm) -> None:
    """A member naming an agent uses its prompt and tools, and its model when nothing
    routes the role otherwise."""
    agents = workdir / ".swarmdeck" / "agents"
    agents.mkdir(parents=True)
    (agents / "auditor.agent.md").write_text(
        "---\nname: auditor\ndescription: audits code\nmodel: other\ntools: [view]\n---\n"
        "AUDITOR BODY: audit carefully.\n"
    )
    seen: dict[str, object] = {}

    def auditor(req: FakeRequest) -> Reply:
        seen["prompt"] = prompt_of(req)
        seen["tools"] = sorted(t["function"]["name"] for t in req.body.get("tools", []))
        seen["model"] = req.model
        return calls(call("submit_result", result=RESULTS["review"]))

    plan = plan_of({"role": "audit", "task": "AUDIT: app.py", "mode": "review", "agent": "auditor"})
    fake_llm.set_script(Scripted({"AGENTS": coordinator(plan), "AUDIT:": Agent([auditor])}))
    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    write_provider(sd_home, "other", fake_llm.openai_base_url, model="agentmodel")
    _res, doc = swarm_json(sd_home, "AGENTS", workdir)
    assert doc["members"][0]["model"] == "other:agentmodel" and seen["model"] == "agentmodel"
    prompt = str(seen["prompt"])
    assert prompt.index("AUDITOR BODY") < prompt.index(
        "in review mode"
    )  # its prompt, then the mode's
    tools = set(seen["tools"])  # type: ignore[arg-type]
    assert {"read_file", "submit_result", "broadcast", "memory_set"} <= tools
    assert "grep" not in tools and "write_file" not in tools  # the agent's tools, not the mode's


def test_a_plan_written_as_json_text_counts(sd_home: Path, workdir: Path, fake_llm) -> None:
    """A model that answers the plan in a fenced JSON block instead of calling submit_plan
    is held to the same schema; an answer with no plan is told so."""
    plan = [{"role": "finder", "task": "FIND: it", "mode": "explore"}]
    told: list[str] = []

    def in_text(req: FakeRequest) -> Reply:
        told.append(user_texts(req)[-1])
        return text(f"Here is the plan:\n```json\n{json.dumps(plan)}\n```")

    script = Scripted(
        {
            "TEXTPLAN": Agent([text("I will think about it."), in_text, text("merged")]),
            "FIND:": member("explore"),
        }
    )
    fake_llm.set_script(script)
    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    _res, doc = swarm_json(sd_home, "TEXTPLAN", workdir)
    assert told == ['Your answer held no plan: call submit_plan with {"members": [...]}.']
    assert [m["role"] for m in doc["members"]] == ["finder"] and doc["verdict"] == "completed"
    shown = run_cli(sd_home, "sessions", "show", doc["session_id"])
    assert "swarm plan: finder (explore, fake:scripted)" in shown.stdout
    assert "swarm finder: completed" in shown.stdout
