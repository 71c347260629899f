"""Long sessions stay inside the context window: compaction, context-length errors, tool
pairs after compaction on both wire formats, large tool outputs, prompt caching."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import pytest

from swarmdeck import tool
from swarmdeck.runtime.context import SUMMARY_SYSTEM
from swarmdeck.runtime.host import Host, SessionRequest, default_tools
from swarmdeck.testing.fake_llm import FakeLLM
from swarmdeck.testing.script import FakeRequest, Reply, ReplyToolCall
from swarmdeck.testing.tool_search import searching
from tests.conftest import write_provider
from tests.integration.context_support import (
    TASK,
    CronReader,
    data_file_text,
    is_summary_request,
    window_of,
)
from tests.integration.test_sessions_support import await_for, status_is

WINDOW = 8000


def is_summary_request_body(recorded: object) -> bool:
    """A recorded request that asked for a summary."""
    return SUMMARY_SYSTEM in json.dumps(getattr(recorded, "body", None))


OUTPUT = 1000


def small_window(home: Path, fake: FakeLLM, kind: str) -> None:
    """A provider with an 8,000-token window on the fake server (which enforces it)."""
    url = fake.anthropic_base_url if kind == "anthropic" else fake.openai_base_url
    write_provider(home, "fake", url, kind=kind, context_tokens=WINDOW, output_tokens=OUTPUT)
    fake.context_tokens = WINDOW


async def run_to_end(
    workdir: Path, options: dict[str, object], timeout: float = 600, tools: list | None = None
) -> tuple:
    """Run a session of TASK in this process to its end; (host, session id)."""
    host = Host(tools=[*default_tools(), *(tools or [])])
    record = host.create_session(SessionRequest(TASK, "fake", workdir, options=options))
    host.launch()
    try:
        await host.start(record.id)
        await await_for(status_is(host.catalog, record.id, "completed", "failed"), timeout)
    finally:
        await host.aclose()
    return host, record.id


async def read_with_cron(workdir: Path, fake: FakeLLM) -> tuple:
    """A session reading data.txt on a cron, on the fake's 8,000-token window, run to its
    completion; (host, session id, the scripted model)."""
    fake.context_tokens = WINDOW
    (workdir / "data.txt").write_text(data_file_text())
    model = CronReader(12)
    fake.set_script(searching(model))
    host, sid = await run_to_end(workdir, {"max_turns": 100}, timeout=120)
    assert host.catalog.get_session(sid).status == "completed"
    return host, sid, model


@pytest.mark.parametrize(
    ("kind", "iterations"), [("openai", 500), ("anthropic", 150)], ids=["openai", "anthropic"]
)
async def test_a_long_cron_session_stays_inside_its_window(
    sd_home: Path, workdir: Path, fake_llm: FakeLLM, kind: str, iterations: int
) -> None:
    small_window(sd_home, fake_llm, kind)
    (workdir / "data.txt").write_text(data_file_text())
    model = CronReader(iterations)
    fake_llm.set_script(searching(model))
    options = {"max_turns": 4 * iterations, "rollover_iterations": 100}
    host, sid = await run_to_end(workdir, options)
    record = host.catalog.get_session(sid)
    assert record.status == "completed", record.error
    assert model.ticks == iterations and model.task_seen_at_end
    sent = [r.body for r in fake_llm.requests if r.path.endswith(("/completions", "/messages"))]
    assert max(window_of(b, kind) for b in sent) <= WINDOW
    compactions = host.catalog.events(sid, kinds=["compaction"])
    assert len(compactions) >= 3 and all(c.payload["summarized"] for c in compactions)
    assert model.summaries == len(compactions)
    # The catalog keeps every turn; only what the model sees was compacted.
    assert len(host.catalog.events(sid, kinds=["tool_result"])) >= iterations
    # Once compaction started, the prompts stay flat: none above the threshold plus a turn.
    assert max(model.prompts) < WINDOW - OUTPUT


@pytest.mark.parametrize("kind", ["openai", "anthropic", "openai-responses"])
async def test_tool_pairs_survive_compaction_on_both_wire_formats(
    sd_home: Path, workdir: Path, fake_llm: FakeLLM, kind: str
) -> None:
    """Every request after a compaction passed the fake server's pairing checks (the
    vendors' own): a result without its call, or a call without its result, is a 400."""
    small_window(sd_home, fake_llm, kind)
    (workdir / "data.txt").write_text(data_file_text() * 2)
    model = CronReader(25)
    fake_llm.set_script(searching(model))
    host, sid = await run_to_end(workdir, {"max_turns": 200}, timeout=120)
    assert host.catalog.get_session(sid).status == "completed"
    assert host.catalog.events(sid, kinds=["compaction"])
    assert not host.catalog.events(sid, kinds=["error"])
    # The last request came after several compactions and still carries a call with its
    # result (the fake checked every request's pairs, as the vendor would).
    last = json.dumps(fake_llm.requests[-1].body)
    first_summary = next(i for i, r in enumerate(fake_llm.requests) if is_summary_request_body(r))
    assert first_summary < len(fake_llm.requests) - 10
    pair = {"openai": "tool_call_id", "anthropic": "tool_use_id"}.get(kind, "function_call_output")
    assert f'"{pair}"' in last


async def test_a_context_length_error_compacts_once_and_retries(
    sd_home: Path, workdir: Path, fake_llm: FakeLLM
) -> None:
    """The provider's window is smaller than swarmdeck was told: its 400 mid-session gets
    one compaction and one retry, and the session goes on."""
    write_provider(
        sd_home, "fake", fake_llm.openai_base_url, context_tokens=64_000, output_tokens=OUTPUT
    )
    host, sid, model = await read_with_cron(workdir, fake_llm)
    compactions = host.catalog.events(sid, kinds=["compaction"])
    rejected = [r for r in fake_llm.requests if window_of(r.body, "openai") > WINDOW]
    # One rejection, one compaction for it; then the window the provider showed is the
    # budget, and the later compactions come before the prompt is over it.
    assert len(rejected) == 1
    assert compactions[0].payload["overflow"] and compactions[0].payload["summarized"]
    assert not any(c.payload["overflow"] for c in compactions[1:])
    assert all(c.payload["refused_at"] == compactions[0].payload["refused_at"] for c in compactions)
    assert not host.catalog.events(sid, kinds=["error"])
    assert model.ticks == 12


async def test_a_failed_summary_drops_the_oldest_turns_with_a_marker(
    sd_home: Path, workdir: Path, fake_llm: FakeLLM
) -> None:
    small_window(sd_home, fake_llm, "openai")
    (workdir / "data.txt").write_text(data_file_text())
    model = CronReader(20)

    def no_summaries(req: FakeRequest) -> Reply:
        if is_summary_request(req):
            return Reply(text="")
        return model(req)

    fake_llm.set_script(searching(no_summaries))
    host, sid = await run_to_end(workdir, {"max_turns": 200}, timeout=120)
    assert host.catalog.get_session(sid).status == "completed"
    compactions = host.catalog.events(sid, kinds=["compaction"])
    assert compactions and not any(c.payload["summarized"] for c in compactions)
    last = fake_llm.requests[-1].body["messages"]
    assert any("dropped to fit the context window" in str(m.get("content")) for m in last)


async def test_a_megabyte_tool_output_becomes_an_artifact(
    sd_home: Path, workdir: Path, fake_llm: FakeLLM
) -> None:
    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    big = "".join(f"row {i:07d}\n" for i in range(80_000))  # ~1 MB
    assert len(big) > 900_000

    @tool(effect="read")
    def dump_table() -> str:
        """Print the whole table."""
        return big

    seen: dict[str, str] = {}

    def reader(req: FakeRequest) -> Reply:
        results = [m for m in req.messages if m.get("role") == "tool"]
        if not results:
            return Reply(tool_calls=(ReplyToolCall("dump_table", {}),))
        if len(results) == 1:
            seen["first"] = str(results[0]["content"])
            link = re.search(r"artifact://\S+", seen["first"])
            assert link is not None
            args = {"name": link.group(0), "offset": 500_000, "limit": 24}
            return Reply(tool_calls=(ReplyToolCall("read_artifact", args),))
        seen["part"] = str(results[1]["content"])
        return Reply(text="read")

    fake_llm.set_script(searching(reader))
    host, sid = await run_to_end(workdir, {"max_turns": 10}, timeout=60, tools=[dump_table])
    assert host.catalog.get_session(sid).status == "completed"
    shown = seen["first"]
    assert len(shown) < 6000
    assert "row 0000000" in shown and "row 0079999" in shown and "row 0040000" not in shown
    assert f"artifact://{sid}/tool-output-0-" in shown
    artifact = host.catalog.artifacts_of([sid])[0]
    stored = Path(artifact["path"]).read_text()
    assert artifact["size"] > 900_000
    assert stored == big
    assert seen["part"].startswith(big[500_000:500_024])
    assert "[characters 500000-500024 of" in seen["part"]


def _flat(body: dict, kind: str) -> list:
    """A request's prompt in cache order, without its cache breakpoints."""

    def clean(item: object) -> object:
        if isinstance(item, dict):
            return {k: clean(v) for k, v in item.items() if k != "cache_control"}
        if isinstance(item, list):
            return [clean(v) for v in item]
        return item

    flat: list = [("tool", clean(t)) for t in body.get("tools", [])]
    if kind == "anthropic":
        flat.append(("system", clean(body["system"])))
        for message in body["messages"]:
            content = message["content"]
            blocks = content if isinstance(content, list) else [{"type": "text", "text": content}]
            flat += [(message["role"], clean(b)) for b in blocks]
    elif kind == "openai-responses":
        flat.append(("instructions", body["instructions"]))
        flat += [("item", clean(i)) for i in body["input"]]
    else:
        flat += [("message", clean(m)) for m in body["messages"]]
    return flat


@pytest.mark.parametrize("kind", ["openai", "anthropic", "openai-responses"])
async def test_between_compactions_the_prompt_only_grows_at_its_end(
    sd_home: Path, workdir: Path, fake_llm: FakeLLM, kind: str
) -> None:
    url = fake_llm.anthropic_base_url if kind == "anthropic" else fake_llm.openai_base_url
    write_provider(sd_home, "fake", url, kind=kind)
    (workdir / "data.txt").write_text(data_file_text())
    fake_llm.set_script(searching(CronReader(6)))
    host, sid = await run_to_end(workdir, {"max_turns": 50}, timeout=60)
    assert host.catalog.get_session(sid).status == "completed"
    prompts = [_flat(r.body, kind) for r in fake_llm.requests if r.body]
    assert len(prompts) >= 12
    for before, after in itertools.pairwise(prompts):
        assert after[: len(before)] == before  # byte for byte, once serialized
    usage = host.catalog.usage_totals([sid])
    # Every turn after the first reads the prefix the one before it left.
    assert usage.cache_share is not None and usage.cache_share > 0.6
    if kind == "anthropic":
        body = fake_llm.requests[-1].body
        assert body["system"][-1]["cache_control"] == {"type": "ephemeral"}
        # On the last tool in the prompt: the deferred ones after it are not (tool search).
        shown = [t for t in body["tools"] if not t.get("defer_loading")]
        assert shown[-1]["cache_control"] == {"type": "ephemeral"}
        assert body["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    if kind == "openai-responses":  # cron was deferred: the hosted search found it
        body = fake_llm.requests[-1].body
        assert {"type": "tool_search"} in body["tools"]
        assert any(item.get("type") == "tool_search_output" for item in body["input"])


async def test_an_empty_answer_over_a_window_only_the_server_knows_compacts_once(
    sd_home: Path, workdir: Path, fake_llm: FakeLLM
) -> None:
    """llama.cpp with a window the provider file does not set: its empty 200 near the
    window its /props states gets one compaction and one retry, as a 400 would."""
    from swarmdeck.models import window

    window._known.clear()
    write_provider(sd_home, "fake", fake_llm.openai_base_url, output_tokens=OUTPUT)
    fake_llm.overflow = "empty_stream"
    host, sid, model = await read_with_cron(workdir, fake_llm)
    compactions = host.catalog.events(sid, kinds=["compaction"])
    assert compactions and compactions[0].payload["overflow"]
    assert not host.catalog.events(sid, kinds=["error"])
    assert [r.path for r in fake_llm.requests].count("/props") == 1
    assert model.ticks == 12
