"""`swarmdeck demo` on a fresh home: no key, no network, a whole coordinated session."""

from __future__ import annotations

import json
from importlib.resources import files
from pathlib import Path

import yaml

from tests.conftest import run_cli


def test_demo_runs_a_coordinated_session(sd_home: Path) -> None:
    res = run_cli(sd_home, "demo", timeout=120, COLUMNS="120")
    assert res.code == 0, res.stderr
    # Its process closes what it opened (aiohttp warns of an unclosed pool at exit).
    assert "Unclosed" not in res.stderr and "Traceback" not in res.stderr, res.stderr
    out = res.stdout
    assert "scripted" in out  # says plainly that the model is scripted
    assert "NOTES.md, written by the agent" in out
    assert "review-report.md" in out and "div has no test" in out
    # The closing hint names the model a real run would use: the packaged default.
    packaged = yaml.safe_load(
        (files("swarmdeck.models") / "providers" / "openai.yaml").read_text(encoding="utf-8")
    )
    assert f"--model openai:{packaged['model']} --workdir ." in out
    listed = json.loads(run_cli(sd_home, "sessions", "ls", "--json").stdout)
    # Beside the coordinated tree, one session is left waiting for your answer (the TUI
    # answers it); its process has ended, so no worker runs it now, yet it is not lost: it
    # needs you, as the TUI says (issue 30 item 19).
    [question] = [s for s in listed if s["title"] == "a question for you"]
    assert question["question"] == "Which branch should the release notes cover?"
    assert question["status"] == "input_required"
    assert f"session {question['id']} is waiting for your answer" in " ".join(out.split())
    shown = json.loads(run_cli(sd_home, "sessions", "show", question["prefix"], "--json").stdout)
    assert [e["kind"] for e in shown["events"]][-1] == "assistant"
    sessions = [s for s in listed if s is not question]
    assert len(sessions) == 4 and {s["status"] for s in sessions} == {"completed"}
    root = next(s for s in sessions if s["parent_id"] is None)
    children = [s for s in sessions if s["parent_id"] == root["id"]]
    assert len(children) == 3
    tree = run_cli(sd_home, "sessions", "tree", root["id"], COLUMNS="200")
    assert tree.code == 0 and tree.stdout.count("completed") == 4
    art = run_cli(sd_home, "artifacts", "get", f"artifact://{root['id']}/review-report.md")
    assert art.code == 0 and art.stdout.startswith("# Review of calc")


def test_run_on_the_demo_model_needs_no_server(sd_home: Path, tmp_path: Path) -> None:
    # The scripted model is served by the process that calls it: nothing to reach before
    # the run (the reachability probe refused it: "cannot reach demo at http://127.0.0.1").
    workdir = tmp_path / "project"
    workdir.mkdir()
    res = run_cli(sd_home, "run", "--model", "demo", "--workdir", str(workdir), "review calc")
    assert res.code == 0, res.stderr
    assert res.stdout.strip() == "Submitting the result."  # the scripted model's last words
    assert res.stderr.splitlines()[-1].endswith(": completed"), res.stderr
