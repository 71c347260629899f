"""Concurrency of the swarm's shared state, with real processes on both stores:

- the inbox: 20 processes post 100 messages each, with retried ids (a client's own retry and
  another client's), while a consumer drains: every unique message is delivered once and
  taken once;
- the blackboard: 8 processes make 100 memory_set calls each on shared keys, through the
  tool: every write landed (and is in the history, at the version it was told) or was told
  it conflicted; the history accounts for all 800.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import sqlalchemy as sa

from swarmdeck.catalog import schema
from swarmdeck.catalog.blackboard import memory_history
from tests.conftest import Store, cli_env
from tests.integration.test_sessions_support import open_catalog
from tests.swarm.support import bare_session

POSTERS = 20
MESSAGES = 100
RECIPIENTS = 4
UNIQUE_IDS = 1200
WRITERS = 8
WRITES = 100

POSTER = """
import json, os, sys, time
from pathlib import Path
from swarmdeck.catalog.catalog import Catalog
from swarmdeck.config import load_settings
p, go = int(sys.argv[1]), Path(sys.argv[2])
catalog = Catalog.open(load_settings().store_url)
while not go.exists():
    time.sleep(0.005)
fresh = []
for k in range({messages}):
    # Every id goes out twice from here (a retry), and some also from a neighbour.
    n = (p * 37 + (k // 2) * 11) % {unique}
    msg_id = f"m{{n}}"
    target = f"inbox-{{n % {recipients}}}"
    if catalog.post(target, msg_id, "user", {{"text": f"payload {{msg_id}}"}}):
        fresh.append(msg_id)
print(json.dumps(fresh))
"""

DRAINER = """
import json, sys, time
from pathlib import Path
from swarmdeck.catalog.catalog import Catalog
from swarmdeck.config import load_settings
go, done = Path(sys.argv[1]), Path(sys.argv[2])
catalog = Catalog.open(load_settings().store_url)
while not go.exists():
    time.sleep(0.005)
taken, claims = [], 0
while True:
    finished = done.exists()
    got = 0
    for r in range({recipients}):
        claims += 1
        for item in catalog.drain(f"inbox-{{r}}", f"drainer:{{claims}}", ["user"]):
            taken.append([f"inbox-{{r}}", item.msg_id])
            got += 1
    if finished and not got:
        break
    time.sleep(0.01)
print(json.dumps(taken))
"""

WRITER = """
import asyncio, json, sys, time
from pathlib import Path
from swarmdeck.catalog.catalog import Catalog
from swarmdeck.config import load_settings
from swarmdeck.tools.base import ToolContext
from swarmdeck.tools.builtins.memory import MEMORY_TOOLS
p, member, go = int(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
catalog = Catalog.open(load_settings().store_url)
tools = {{t.name: t for t in MEMORY_TOOLS}}

async def call(name, key, args):
    ctx = ToolContext(member, Path("."), "explore", Path("."), {{"catalog": catalog}}, call_key=key)
    return await tools[name].call(ctx, json.dumps(args))

async def main():
    while not go.exists():
        await asyncio.sleep(0.005)
    outcomes = []
    for i in range({writes}):
        key = f"{{p}}:{{i}}"
        if i % 2 == 0:  # read-modify-write of a counter: a compare-and-set
            got = json.loads((await call("memory_get", f"{{key}}:get", {{"key": "counter"}})).content)
            count = got["value"]["count"] if got["found"] else 0
            args = {{"key": "counter", "value": {{"count": count + 1, "by": key}},
                     "expected_version": got["version"]}}
        else:  # a blind write to one of four shared keys
            args = {{"key": f"k{{i % 4}}", "value": {{"by": key}}}}
        out = await call("memory_set", key, args)
        if out.is_error:
            current = json.loads(out.content.split("Current: ", 1)[1])
            outcomes.append({{"id": key, "key": args["key"], "landed": False,
                              "expected": args.get("expected_version"),
                              "current": current["current_version"]}})
        else:
            doc = json.loads(out.content)
            outcomes.append({{"id": key, "key": args["key"], "landed": True,
                              "version": doc["version"]}})
    print(json.dumps(outcomes))

asyncio.run(main())
"""


def _spawn(home: Path, code: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", code, *args],
        env=cli_env(home),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        cwd=str(Path(__file__).resolve().parents[2]),
    )


def _result(proc: subprocess.Popen[str], timeout: float = 240) -> object:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err[-3000:]
    return json.loads(out.strip().splitlines()[-1])


def test_twenty_posters_every_unique_message_once(
    store: Store, sd_home: Path, tmp_path: Path
) -> None:
    catalog = open_catalog()
    for r in range(RECIPIENTS):
        bare_session(catalog, f"inbox-{r}")
    go, done = tmp_path / "go", tmp_path / "done"
    drainer = _spawn(sd_home, DRAINER.format(recipients=RECIPIENTS), str(go), str(done))
    posters = [
        _spawn(
            sd_home,
            POSTER.format(messages=MESSAGES, unique=UNIQUE_IDS, recipients=RECIPIENTS),
            str(p),
            str(go),
        )
        for p in range(POSTERS)
    ]
    time.sleep(1.0)  # let every process open the store and wait at the start line
    go.touch()
    fresh: list[str] = []
    for proc in posters:
        fresh += _result(proc)  # type: ignore[operator]
    done.touch()
    taken = _result(drainer)

    sent = {
        f"m{(p * 37 + (k // 2) * 11) % UNIQUE_IDS}" for p in range(POSTERS) for k in range(MESSAGES)
    }
    assert len(sent) < POSTERS * MESSAGES  # ids were retried, within and across processes
    # Each unique message was taken in by exactly one post...
    assert sorted(fresh) == sorted(sent)
    inbox = schema.inbox
    with catalog.engine.connect() as conn:
        rows = conn.execute(
            sa.select(inbox.c.session_id, inbox.c.msg_id, inbox.c.consumed_by)
        ).all()
    stored = Counter((r.session_id, r.msg_id) for r in rows)
    expected = {(f"inbox-{int(m[1:]) % RECIPIENTS}", m) for m in sent}
    # ...is stored once, at its recipient...
    assert set(stored) == expected and set(stored.values()) == {1}
    # ...and was consumed once: nothing lost, nothing twice.
    assert sorted(map(tuple, taken)) == sorted(expected)  # type: ignore[arg-type]
    assert all(r.consumed_by for r in rows)


def test_eight_writers_every_write_landed_or_told(
    store: Store, sd_home: Path, tmp_path: Path
) -> None:
    catalog = open_catalog()
    bare_session(catalog, "swarm-head", group="swarm-head")
    for p in range(WRITERS):
        bare_session(catalog, f"member-{p}", group="swarm-head", parent="swarm-head")
    go = tmp_path / "go"
    writers = [
        _spawn(sd_home, WRITER.format(writes=WRITES), str(p), f"member-{p}", str(go))
        for p in range(WRITERS)
    ]
    time.sleep(1.0)
    go.touch()
    outcomes = [o for proc in writers for o in _result(proc)]  # type: ignore[union-attr]

    assert len(outcomes) == WRITERS * WRITES
    landed = [o for o in outcomes if o["landed"]]
    conflicted = [o for o in outcomes if not o["landed"]]
    h = memory_history
    with catalog.engine.connect() as conn:
        history = conn.execute(
            sa.select(h.c.key, h.c.version, h.c.write_id, h.c.value).where(
                h.c.scope == "swarm", h.c.scope_id == "swarm-head"
            )
        ).all()
    # Every write that landed is in the history once, at the version it was told...
    assert sorted((r.key, r.version, r.write_id) for r in history) == sorted(
        (o["key"], o["version"], f"member-{o['id'].split(':')[0]}/{o['id']}") for o in landed
    )
    # ...so the history and the conflicts account for all 800 writes.
    assert len(history) + len(conflicted) == WRITERS * WRITES
    for key in ("counter", "k0", "k1", "k2", "k3"):
        versions = sorted(r.version for r in history if r.key == key)
        assert versions == list(range(1, len(versions) + 1)), key  # no gap, no version twice
    # Blind writes never conflict; a compare-and-set conflicted only over a newer version.
    assert {o["key"] for o in conflicted} <= {"counter"}
    assert all(o["current"] > o["expected"] for o in conflicted)
    assert conflicted, "the writers raced (no conflict at all: the test did not contend)"
    # No lost update: the counter counts exactly the increments that landed.
    counter = [r for r in history if r.key == "counter"]
    last = max(counter, key=lambda r: r.version)
    assert json.loads(last.value)["count"] == len(counter)
