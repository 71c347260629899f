"""swarmdeck quickstart: durable LLM agent sessions from Python.

Against your own provider (any `provider:model`; the key is read from swarmdeck's store):

    swarmdeck key set openai
    python examples/quickstart.py                        # or SWARMDECK_EXAMPLE_MODEL=...

Offline, against the fake LLM server that ships in `swarmdeck.testing`, in a throwaway home:

    SWARMDECK_EXAMPLE_FAKE=1 python examples/quickstart.py
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from contextlib import ExitStack
from pathlib import Path

from swarmdeck import AgentSpec, Swarm, tool


@tool(effect="read")  # safe to run again after a crash; "once" tools never are
def word_count(text: str) -> str:
    """Count the words of a text."""
    return str(len(text.split()))


async def main(model: str, workdir: Path) -> None:
    async with Swarm(tools=[word_count]) as swarm:
        # 1. A task: the model calls tools (yours included); the session ends when it is done.
        task = await swarm.start(
            "How many words are in 'durable agents survive crashes'? Use word_count.",
            model,
            workdir=workdir,
        )
        done = await task.result(timeout=300)
        print(f"task [{done.status}]: {done.text}")

        # 2. A persistent assistant: it rests between messages, and a message sent while no
        #    process runs it waits in its durable inbox. The same msg_id twice counts once.
        notes = await swarm.start(
            "You keep a shopping list. Confirm each item in a few words.",
            AgentSpec(model, persistent=True),
            workdir=workdir,
        )
        await notes.result(timeout=300)
        for n, item in enumerate(["milk", "eggs"]):
            await notes.send(f"add {item}", msg_id=f"item-{n}")
            print(f"notes: {(await notes.result(timeout=300)).text}")
        # It stays resumable: `swarmdeck sessions send ID "add bread"` reaches it from any
        # process, and a worker (`swarmdeck worker`) carries on with it.

        # 3. A coordinator with sub-agents, under a budget its sub-agents draw from too.
        boss = await swarm.start(
            "Summarize SQLite and PostgreSQL: give each to a sub-agent (spawn_agent), wait for "
            "them (wait_for_agents), store their answers as the artifact stores.md, then stop.",
            AgentSpec(model, budget={"max_turns_total": 20}),
            workdir=workdir,
        )
        report = await boss.result(timeout=600)
        print(f"coordinator [{report.status}]: {report.text}")
        for row in swarm.host.catalog.artifacts_of([boss.id]):
            print(f"artifact://{boss.id}/{row['name']}: {Path(row['path']).read_text().strip()}")


FAKE_SCRIPT = {
    "scenarios": [
        {
            "match": "How many words",
            "turns": [
                {
                    "tool_calls": [
                        {
                            "name": "word_count",
                            "arguments": {"text": "durable agents survive crashes"},
                        }
                    ]
                },
                {"text": "There are {{last_tool_result}} words."},
            ],
        },
        {
            "match": "shopping list",
            "turns": [{"text": "Ready."}, {"text": "Added milk."}, {"text": "Added eggs."}],
        },
        {"match": "Describe", "turns": [{"text": "{{task}}: a fine database."}]},
        {
            "match": "Summarize",
            "turns": [
                {
                    "tool_calls": [
                        {"name": "spawn_agent", "arguments": {"task": "Describe SQLite"}},
                        {"name": "spawn_agent", "arguments": {"task": "Describe PostgreSQL"}},
                    ]
                },
                {"tool_calls": [{"name": "wait_for_agents", "arguments": {"timeout": 120}}]},
                {
                    "tool_calls": [
                        {
                            "name": "write_artifact",
                            "arguments": {"name": "stores.md", "content": "{{last_tool_result}}"},
                        }
                    ]
                },
                {"text": "Report stored as stores.md."},
            ],
        },
    ]
}


def run() -> None:
    """Run the quickstart, offline with the fake LLM when SWARMDECK_EXAMPLE_FAKE=1."""
    with ExitStack() as stack:
        workdir = Path.cwd()
        model = os.environ.get("SWARMDECK_EXAMPLE_MODEL", "openai:gpt-4.1-mini")
        if os.environ.get("SWARMDECK_EXAMPLE_FAKE") == "1":
            from swarmdeck.testing.fake_llm import FakeLLM

            fake = stack.enter_context(FakeLLM(FAKE_SCRIPT))
            home = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="sd-quick-")))
            (home / "providers").mkdir()
            (home / "providers" / "fake.yaml").write_text(
                f"key: fake\nkind: openai\nbase_url: {fake.openai_base_url}\n"
                "model: fake-model\nneeds_key: false\n"
            )
            os.environ["SWARMDECK_HOME"] = str(home)
            os.environ.pop("SWARMDECK_STORE", None)  # the embedded SQLite store of that home
            workdir, model = home, "fake"
        asyncio.run(main(model, workdir))


if __name__ == "__main__":
    run()
