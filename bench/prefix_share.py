"""One cached prefix for a family of sessions, measured for bench/swarm.py: a swarm of four
members and a parent fanning out to twenty sub-agents, on the fake LLM server's prompt
cache (OpenAI's rules: every prefix of 1,024 tokens or more is kept, per API key; and, in
the bare directory, Anthropic's: kept at breakpoints only), with `tools.shared_prefix` on
and off in the same run, each in a process and home of its own.

Twice: in a bare directory (the lean prompt of a fan-out's sub-agent is under the 1,024
tokens a prefix needs to be cached at all, so the family's prefix is filled up to it with
schemas it would index), then in a project whose AGENTS.md (about 2.5 KB, as projects
write them) every session of the tree is shown. Each answer begins LATENCY_S after its
request and the fake keeps a prefix only then, as the vendors do: siblings sent at once
are served it only because the family's first request goes alone.

    python bench/prefix_share.py [--children 20]   (bench/swarm.py runs it)
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

MEMBERS = 4
# What a cache write and a cache read cost against an uncached input token (Anthropic's
# list prices: a read a tenth, a write a quarter more); OpenAI's reads cost half or less.
WRITE_PRICE, READ_PRICE = 1.25, 0.1
# Each answer begins this long after its request, as a vendor's reads the prompt first: a
# prefix is cached only then, so requests sent meanwhile are not served it.
LATENCY_S = 0.2
AGENTS_MD = """# Agent notes

## Layout
- `app.py` holds the entry point; `lib/` the domain code, one module per idea.
- `tests/` mirrors `lib/`; fixtures live in `tests/conftest.py`.
- Generated code sits in `generated/`: never edit it by hand, run `make gen`.

## Working here
- Run `make check` (ruff, mypy, pytest -x) before you report; a red check is not done.
- Keep functions under 60 lines and files under 400; split by responsibility.
- Public names get a one-line docstring; comments say why, not what.
- Errors are typed (`lib.errors`) and caught at the CLI edge, never bare `except`.
- Never print secrets: read keys from the environment through `lib.config.secret()`.
- Prefer the standard library; a new dependency needs a line in `docs/deps.md`.

## Style
- Names say what a thing is: no `utils`, no `helpers`, no `manager2`.
- Type hints everywhere; pydantic at the edges, dataclasses inside.
- Tests check behaviour through the public API; one test, one reason to fail.
- Use `pathlib` over `os.path`, f-strings over `%`, and `logging` over `print`.

## Reviews
- Say what you changed and why in the commit message's first line (under 72 chars).
- Point at the file and line of anything you are unsure of.
- A change to `lib/storage/` needs a migration in `migrations/` and a test of it.
- A change to the CLI needs its help text and the README updated in the same commit.

## Releases
- Versions follow semver; `CHANGELOG.md` gets a line per user-visible change.
- `make release` builds, signs and uploads; never tag by hand.
"""


def _fake_script(children: int) -> Any:
    from swarmdeck.testing.script import FakeRequest, Reply, ReplyToolCall

    plan = {"members": [{"role": f"m{i}", "task": f"MEMBER-{i}: what does app.py return?",
                         "mode": "explore"} for i in range(MEMBERS)]}  # fmt: skip
    fact = {"facts": [{"fact": "main returns 42", "file_line": "app.py:2"}], "truncated": False}

    def answer(req: FakeRequest) -> Reply:
        if "MEMBER-" in req.task or "CHILD-" in req.task:
            if req.turn == 0 and "MEMBER-" in req.task:
                return Reply(tool_calls=(ReplyToolCall("read_file", {"path": "app.py"}),))
            if "MEMBER-" in req.task:
                return Reply(tool_calls=(ReplyToolCall("submit_result", {"result": fact}),))
            return Reply(text="main returns 42")
        if "FAN OUT" in req.task:
            if req.turn == 0:
                spawns = [ReplyToolCall("spawn_agent", {"task": f"CHILD-{i}: read app.py"})
                          for i in range(children)]  # fmt: skip
                return Reply(tool_calls=tuple(spawns))
            if req.turn == 1:
                return Reply(tool_calls=(ReplyToolCall("wait_for_agents", {"timeout": 120}),))
            return Reply(text="all children answered")
        if req.turn == 0:
            return Reply(tool_calls=(ReplyToolCall("submit_plan", plan),))
        return Reply(text="merged: main returns 42")

    return answer


def _first_turns(host: Any, sids: list[str]) -> list[dict[str, int]]:
    """The usage of each session's first model turn."""
    out = []
    for sid in sids:
        turns = host.catalog.events(sid, kinds=["assistant"])
        out.append(turns[0].payload["usage"] if turns else {})
    return out


def _prompt_size(usage: dict[str, int]) -> int:
    """All of a request's input tokens, cached or not."""
    return usage.get("input", 0) + usage.get("cache_read", 0) + usage.get("cache_write", 0)


def _totals(host: Any, sids: list[str]) -> dict[str, float]:
    t = host.catalog.usage_totals(sids)
    total = t.input + t.cache_read + t.cache_write
    billed = t.input + WRITE_PRICE * t.cache_write + READ_PRICE * t.cache_read
    return {"input": total, "cached": t.cache_read, "billed": billed}


async def _run(children: int, project: bool) -> dict[str, Any]:
    from swarmdeck import AgentSpec, Swarm

    home = Path(os.environ["SWARMDECK_HOME"])
    workdir = home.parent / "work"
    workdir.mkdir(exist_ok=True)
    (workdir / "app.py").write_text("def main():\n    return 42\n")
    if project:
        (workdir / "AGENTS.md").write_text(AGENTS_MD)
    async with Swarm() as sdk:
        doc = await sdk.coordinate("Find what main returns, and why.", workdir=workdir,
                                   model="fake")  # fmt: skip
        assert doc["verdict"] == "completed", doc
        coordinator = doc["session_id"]
        parent = await sdk.start("FAN OUT to sub-agents", AgentSpec("fake", mode="explore",
                                 options={"max_children": children}), workdir=workdir)  # fmt: skip
        assert (await parent.result(timeout=300)).status == "completed"
        # A planner's next swarm in the project, on another task, while the cache holds.
        after = await sdk.coordinate("Find what else main does.", workdir=workdir, model="fake")
        assert after["verdict"] == "completed", after
        catalog = sdk.host.catalog
        members = [s.id for s in catalog.list_sessions() if s.parent_id == coordinator]
        kids = [s.id for s in catalog.list_sessions() if s.parent_id == parent.id]
        later = [s.id for s in catalog.list_sessions() if s.parent_id == after["session_id"]]
        return {
            "swarm": _totals(sdk.host, [coordinator, *members]),
            "fanout": _totals(sdk.host, [parent.id, *kids]),
            "members": _first_turns(sdk.host, members),
            "children": _first_turns(sdk.host, kids),
            "roots": _first_turns(sdk.host, [coordinator, parent.id]),
            "next_swarm": _first_turns(sdk.host, [after["session_id"]])[0],
            "next_swarm_totals": _totals(sdk.host, [after["session_id"], *later]),
        }


def one(shared: bool, children: int, project: bool, kind: str) -> dict[str, Any]:
    """Both families, in this process, on a fake server of its own."""
    import yaml

    from swarmdeck.testing.fake_llm import FakeLLM
    from swarmdeck.testing.prompt_cache import DEFAULT_MIN_CACHED_TOKENS
    from swarmdeck.testing.tool_search import searching

    home = Path(os.environ["SWARMDECK_HOME"])
    home.mkdir(parents=True, exist_ok=True)
    (home / "settings.yaml").write_text(yaml.safe_dump({"tools": {"shared_prefix": shared}}))
    # On Anthropic, what the vendor's tool search defers is searched for before a call.
    with FakeLLM(searching(_fake_script(children)), latency=LATENCY_S) as fake:
        (home / "providers").mkdir(exist_ok=True)
        # The fake keeps OpenAI's shortest cached prefix; its loopback address is no
        # vendor's, so the provider says so, as a user of api.openai.com need not.
        url = fake.anthropic_base_url if kind == "anthropic" else fake.openai_base_url
        provider = {"key": "fake", "kind": kind, "base_url": url, "model": "scripted", "needs_key": False, "concurrency": 32,
                    "prompt_cache_min_tokens": DEFAULT_MIN_CACHED_TOKENS}  # fmt: skip
        (home / "providers" / "fake.yaml").write_text(yaml.safe_dump(provider))
        return asyncio.run(_run(children, project))


def measure(shared: bool, children: int, project: bool, kind: str) -> dict[str, Any]:
    """`one` in a process of its own, with a home of its own."""
    with tempfile.TemporaryDirectory(prefix="sd-bench-prefix-") as tmp:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SWARMDECK_")}
        env["SWARMDECK_HOME"] = str(Path(tmp) / "home")
        args = [sys.executable, __file__, "--one", str(int(shared)), str(children)]
        args += [str(int(project)), kind]
        done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise SystemExit(f"prefix_share ({shared=}) failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def scenario(children: int, project: bool, kind: str = "openai") -> tuple[float, float]:
    """Print one directory's figures, shared against separate prompts; returns its
    summary: the cached share of input and of first requests on the shared prefix."""
    shared = measure(True, children, project, kind)
    separate = measure(False, children, project, kind)
    where = "in a project whose AGENTS.md every session is shown" if project else (
        "in a bare directory")  # fmt: skip
    print(f"  {where}{', on Anthropic' if kind == 'anthropic' else ''}:")
    print("    (billed: in input tokens' worth, a cached read a tenth, a write 1.25x)")
    for label, r in (("shared prefix", shared), ("own prompts", separate)):
        for family in ("swarm", "fanout"):
            t = r[family]
            print(
                f"    {label:<14} {family:<7} input {t['input']:>7,.0f}  cached "
                f"{t['cached'] / max(1, t['input']):6.1%}  billed {t['billed']:>7,.0f}"
            )
    firsts = shared["members"] + shared["children"]
    hits = [u.get("cache_read", 0) > 0 for u in firsts]
    print("    members' first requests (cached tokens of their prompt):")
    for n, u in enumerate(shared["members"]):
        print(f"      member {n}: {u.get('cache_read', 0):>5} of {_prompt_size(u):>5}")
    kid_hits = sum(1 for u in shared["children"] if u.get("cache_read", 0) > 0)
    print(f"      {children} sub-agents: {kid_hits} of {children} on the shared prefix")
    # What no sharing can serve: each family's first request, on a cold cache.
    floors = [
        f"{family} {_prompt_size(u) / max(1, shared[family]['input']):.1%}"
        for family, u in zip(("swarm", "fanout"), shared["roots"], strict=True)
    ]
    print(f"    first request of the tree (cold), of all input: {', '.join(floors)}")
    nxt, totals = shared["next_swarm"], shared["next_swarm_totals"]
    share = totals["cached"] / max(1, totals["input"])
    print(f"    the next swarm in the project, another task: {share:.1%} of its input cached;")
    print(
        f"      its coordinator's first request: {nxt.get('cache_read', 0)} of "
        f"{_prompt_size(nxt)} tokens cached"
    )
    inputs = sum(shared[f]["input"] for f in ("swarm", "fanout"))
    cached = sum(shared[f]["cached"] for f in ("swarm", "fanout"))
    billed = sum(shared[f]["billed"] for f in ("swarm", "fanout"))
    before = sum(separate[f]["billed"] for f in ("swarm", "fanout"))
    print(f"    billed against own prompts: {billed / max(1.0, before):.2f}x")
    return cached / max(1, inputs), sum(hits) / max(1, len(hits))


def report(children: int) -> None:
    """Both directories on OpenAI's rules, the bare one on Anthropic's (cached only at
    breakpoints, a write priced 1.25x), then the closing line: the bare directory's
    figures on OpenAI's rules (where a fan-out's lean prompts need the filling), the
    others' on the lines before."""
    bare = scenario(children, False)
    project = scenario(children, True)
    anthropic = scenario(children, False, "anthropic")
    for where, (cached, firsts) in (
        ("in the project", project),
        ("bare, on Anthropic", anthropic),
    ):
        print(f"  {where}: {cached:.1%} cached, first requests on the prefix {firsts:.1%}")
    print(
        f"cached share of input: {bare[0]:.1%}, members' first requests on the shared "
        f"prefix: {bare[1]:.1%}"
    )


if __name__ == "__main__":
    if sys.argv[1:2] == ["--one"]:
        found = one(sys.argv[2] == "1", int(sys.argv[3]), sys.argv[4] == "1", sys.argv[5])
        print(json.dumps(found))
    else:
        report(int(sys.argv[2]) if sys.argv[1:2] == ["--children"] else 20)
