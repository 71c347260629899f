"""A fleet on namespaced hosts (tests/netns.py): "db" runs PostgreSQL on its own address,
"planner" submits, "b", "c" and "d" run `swarmdeck worker`. Each worker host serves the
fake LLM on its own loopback (the same URL everywhere, a script of its own), so no model
traffic crosses hosts and each host's pace is its own.

The lab is built once per module (PostgreSQL and the hosts take seconds) and removed at
its end, also when a test fails; tests start and stop workers as they need.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests import netns, pgcluster
from tests.netns import ROOT, Lab, NsHost

REPO = Path(__file__).resolve().parents[2]
PG_PORT = 5432
LLM_PORT = 8399
WORKDIR = f"{ROOT}/work/proj"
# The planner's git repository, for dispatches whose branch comes back to it.
PLANNER_REPO = f"{ROOT}/work/repo"
LEASE_S = "3"
WORKER_LINE = re.compile(r"^worker (\S+) on ", re.MULTILINE)
START_TIMEOUT_S = 60.0
# Turn 0 runs a `once` shell command that appends a line to effects.log in the workdir;
# turn 1 answers after `slow` seconds (a worker host's own pace).
EFFECT = ["sh", "-c", "echo ran >> effects.log"]


def code_turns(answer: int, slow: float) -> list[dict[str, Any]]:
    """A code-mode dispatch: write app.py (main returns `answer`), then submit its result
    after `slow` seconds."""
    write = {"path": "app.py", "content": f"def main() -> int:\n    return {answer}\n"}
    result = {
        "status": "complete",
        "files_changed": ["app.py"],
        "validation": {"commands": [], "passed": True},
        "reuse": "none",
        "remaining_risks": "none known",
    }
    submit = {"name": "submit_result", "arguments": {"result": result}}
    return [
        {"tool_calls": [{"name": "write_file", "arguments": write}]},
        {"tool_calls": [submit], "delay": slow},
    ]


def llm_script(slow: float, reply: str) -> str:
    """The fake LLM's script on one worker host."""
    step = [{"tool_calls": [{"name": "shell", "arguments": {"argv": EFFECT}}]}]
    return yaml.safe_dump(
        {
            "scenarios": [
                {"match": "burst job", "turns": [{"text": "done", "delay": 0.2}]},
                {"match": "kill job", "turns": [*step, {"text": reply, "delay": slow}]},
                {"match": "cut job", "turns": [*step, {"text": reply, "delay": slow}]},
                {"match": "deliver job", "turns": code_turns(42, 0.0)},
                {"match": "restore job", "turns": code_turns(43, slow)},
            ]
        }
    )


PROVIDER = {
    "key": "fake",
    "kind": "openai",
    "base_url": f"http://127.0.0.1:{LLM_PORT}/v1",
    "model": "scripted",
    "display_name": "lab fake",
    "needs_key": False,
}


@dataclass
class LabFleet:
    """The lab's hosts, its store URL, and the worker process each host runs now."""

    lab: Lab
    store: str
    logs: Path
    workers: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def host(self, name: str) -> NsHost:
        """A host by name."""
        return self.lab.hosts[name]

    def probe(self, *args: str, timeout: float = 90) -> Any:
        """Run a probe command on the planner; its JSON answer."""
        planner = self.host("planner")
        out = planner.run([sys.executable, "-m", "tests.multihost.probe", *args], timeout=timeout)
        return json.loads(out.stdout.strip().splitlines()[-1])

    def log(self, name: str) -> str:
        """What the worker on this host printed (all its runs)."""
        path = self.logs / f"worker-{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def start_workers(self, *names: str) -> None:
        """Start `swarmdeck worker` on these hosts at once; returns when all serve the store."""
        before = {n: len(WORKER_LINE.findall(self.log(n))) for n in names}
        for name in names:
            self.workers[name] = self.host(name).popen(
                [sys.executable, "-m", "swarmdeck", "worker"], self.logs / f"worker-{name}.log"
            )
        deadline = time.monotonic() + START_TIMEOUT_S
        for name in names:
            while len(WORKER_LINE.findall(self.log(name))) <= before[name]:
                proc = self.workers[name]
                assert proc.poll() is None, f"worker on {name} exited:\n{self.log(name)}"
                assert time.monotonic() < deadline, f"worker on {name} did not start"
                time.sleep(0.05)

    def stop_worker(self, name: str, sig: int = signal.SIGTERM) -> None:
        """Signal a host's worker (its process group) and reap it."""
        proc = self.workers.pop(name)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        proc.wait(timeout=30)


def _start_postgres(db: NsHost, logs: Path) -> str:
    """initdb and postgres on the db host, listening on its own address; the store URL."""
    bin_dir = pgcluster.find_bin_dir()
    assert bin_dir is not None
    data = "/tmp/pg"
    as_pg = ["runuser", "-u", "postgres", "--"]
    db.run([*as_pg, str(bin_dir / "initdb"), "-D", data, "-U", "postgres", "--auth=trust",
            "--encoding=UTF8", "--locale=C", "--no-sync", "--no-instructions"])  # fmt: skip
    db.run(["sh", "-c", f"echo 'host all all {netns.SUBNET}.0/24 trust' >> {data}/pg_hba.conf"])
    settings = {**pgcluster.SETTINGS, "listen_addresses": db.address}
    flags = [f"-c{k}={v.strip(chr(39))}" for k, v in settings.items() if k != "log_line_prefix"]
    db.popen([*as_pg, str(bin_dir / "postgres"), "-D", data, "-p", str(PG_PORT), "-k", "/tmp",
              *flags], logs / "postgres.log")  # fmt: skip
    return f"postgresql://postgres@{db.address}:{PG_PORT}/postgres"


def _wait_for_store(planner: NsHost, url: str) -> None:
    """Block until PostgreSQL answers the planner over the lab's network."""
    code = (
        "import psycopg, sys, time\n"
        "end = time.monotonic() + 30\n"
        "while True:\n"
        "    try:\n"
        "        psycopg.connect(sys.argv[1], connect_timeout=2).close(); break\n"
        "    except psycopg.OperationalError:\n"
        "        if time.monotonic() > end: raise\n"
        "        time.sleep(0.05)\n"
    )
    planner.run([sys.executable, "-c", code, url], timeout=60)


def _prepare_host(host: NsHost, logs: Path, slow: float | None, reply: str) -> None:
    """The provider, the workdir and (on a worker host) its fake LLM on its loopback."""
    host.write(f"{ROOT}/home/providers/fake.yaml", yaml.safe_dump(PROVIDER))
    host.run(["mkdir", "-p", WORKDIR])
    if slow is None:
        return
    host.write(f"{ROOT}/llm.yaml", llm_script(slow, reply))
    host.popen(
        [sys.executable, "-m", "swarmdeck", "fake-llm", "--script", f"{ROOT}/llm.yaml",
         "--port", str(LLM_PORT)], logs / f"llm-{host.name}.log",
    )  # fmt: skip


def _planner_repo(planner: NsHost) -> None:
    """A git repository with one commit in the planner's work root."""
    planner.write(f"{PLANNER_REPO}/app.py", "def main() -> int:\n    return 41\n")
    git = ["git", "-C", PLANNER_REPO, "-c", "user.name=planner", "-c", "user.email=p@lab"]
    planner.run(["git", "init", "-q", "-b", "main", PLANNER_REPO])
    planner.run([*git, "add", "-A"])
    planner.run([*git, "commit", "-q", "-m", "the planner's project"])


def _lab_env() -> dict[str, str]:
    bin_dirs = [str(Path(sys.executable).parent), "/usr/sbin", "/usr/bin", "/sbin", "/bin"]
    return {
        "PATH": ":".join(bin_dirs),
        "HOME": f"{ROOT}/user",
        "SWARMDECK_HOME": f"{ROOT}/home",
        "SWARMDECK_LEASE_SECONDS": LEASE_S,
        "TMPDIR": "/tmp",
        "LANG": "C.UTF-8",
        "PYTHONPATH": str(REPO),
    }


@pytest.fixture(scope="module")
def lab_fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabFleet]:
    """The namespaced fleet of this module; every namespace and link goes at its end."""
    reason = netns.unavailable_reason() or pgcluster.unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    logs = tmp_path_factory.mktemp("multihost")
    lab = Lab(_lab_env())
    try:
        db = lab.add_host("db", 10)
        planner = lab.add_host("planner", 11)
        for i, name in enumerate(("b", "c", "d")):
            lab.add_host(name, 12 + i)
        url = _start_postgres(db, logs)
        _prepare_host(planner, logs, None, "")
        _planner_repo(planner)
        _prepare_host(lab.hosts["b"], logs, 8.0, "late from b")
        for name in ("c", "d"):
            _prepare_host(lab.hosts[name], logs, 0.0, f"finished on {name}")
        for host in lab.hosts.values():
            host.base_env["SWARMDECK_STORE"] = url
        _wait_for_store(planner, url)
        yield LabFleet(lab, url, logs)
    finally:
        lab.close()
