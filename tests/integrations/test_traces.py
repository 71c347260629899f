"""Traces of real sessions, read with the OpenTelemetry SDK's in-memory exporter: span names
and GenAI attributes, parent links (a sub-agent's spans join its parent's trace), no message
content by default, contents redacted when opted in, and a planted key in no span."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from swarmdeck import AgentSpec, Swarm
from swarmdeck.integrations.telemetry.tracing import OtelTracing
from swarmdeck.runtime.host import Host, SessionRequest, default_tools
from swarmdeck.secrets.store import CredentialStore
from swarmdeck.testing.script import FakeRequest, Reply
from swarmdeck.testing.tool_search import searching
from tests.conftest import write_provider
from tests.integration.context_support import TASK, CronReader, data_file_text
from tests.integration.test_sessions_support import (
    Agent,
    Scripted,
    await_for,
    call,
    calls,
    spawned_ids,
    status_is,
    text,
)

pytest.importorskip("opentelemetry.sdk")
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)

KEY = "sk-planted-0123456789abcdefghijklmnop"
CONTENT_ATTRS = {
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "gen_ai.tool.call.arguments",
    "gen_ai.tool.call.result",
}


@pytest.fixture
async def traced(sd_home: Path, fake_llm) -> AsyncIterator[tuple[Swarm, InMemorySpanExporter]]:
    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    CredentialStore(sd_home / "credentials").set("openai", KEY)
    swarm = Swarm()
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    swarm.host.services.tracing = OtelTracing(provider, swarm.host.services.redactor.redact)
    yield swarm, exporter
    await swarm.aclose()


def script() -> Scripted:
    def wait_child(req: FakeRequest) -> Reply:
        return calls(call("wait_for_agents", ids=spawned_ids(req), timeout=30))

    return Scripted(
        {
            "coordinate": Agent(
                [
                    calls(call("spawn_agent", task="child: summarize")),
                    wait_child,
                    calls(call("read_file", path="notes.txt")),
                    text(f"all done, and the key is {KEY}"),
                ]
            ),
            "child: summarize": Agent([text("summary ready")]),
        }
    )


async def run_tree(swarm: Swarm, fake_llm, workdir: Path) -> str:
    (workdir / "notes.txt").write_text(f"token={KEY}\n")
    fake_llm.set_script(searching(script()))
    session = await swarm.start(
        "coordinate the work",
        # Every schema, so that its prompt passes the cache's 1,024-token minimum at once.
        AgentSpec("fake", mode="code", options={"tool_loading": "eager"}),
        workdir=workdir,
    )
    result = await session.result(timeout=60)
    assert result.status == "completed", result
    return session.id


def by_name(spans: Any, name: str) -> list[Any]:
    return [s for s in spans if s.name == name]


async def test_spans_names_attributes_and_parents(traced, fake_llm, workdir: Path) -> None:
    swarm, exporter = traced
    sid = await run_tree(swarm, fake_llm, workdir)
    spans = exporter.get_finished_spans()
    [child_id] = [s.id for s in swarm.host.catalog.list_sessions() if s.parent_id == sid]
    agents = {s.attributes["gen_ai.conversation.id"]: s for s in by_name(spans, "invoke_agent")}
    assert set(agents) == {sid, child_id}
    root, child = agents[sid], agents[child_id]
    assert root.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert root.attributes["gen_ai.provider.name"] == "fake"
    assert root.attributes["gen_ai.request.model"] == "scripted"

    chats = by_name(spans, "chat scripted")
    root_chats = [c for c in chats if c.attributes["gen_ai.conversation.id"] == sid]
    assert len(root_chats) == 4 and len(chats) == 5
    for chat in chats:
        a = chat.attributes
        assert a["gen_ai.operation.name"] == "chat" and a["gen_ai.provider.name"] == "fake"
        assert a["gen_ai.request.model"] == "scripted" and a["gen_ai.response.model"]
        assert a["gen_ai.usage.input_tokens"] > 0 and a["gen_ai.usage.output_tokens"] > 0
        assert "gen_ai.usage.cache_read.input_tokens" in a
        assert a["gen_ai.response.finish_reasons"] in (("tool_calls",), ("stop",))
        owner = agents[a["gen_ai.conversation.id"]]
        assert chat.parent.span_id == owner.context.span_id
        assert chat.context.trace_id == owner.context.trace_id
    assert [c.attributes["swarmdeck.turn"] for c in root_chats] == [0, 1, 2, 3]
    # Each turn's tokens as the catalog stored them; input_tokens counts every input token
    # (the conventions'), of which the cache served cache_read (the fake's OpenAI cache
    # serves the prefix of every later turn).
    stored = [e.payload["usage"] for e in swarm.host.catalog.events(sid) if e.kind == "assistant"]
    for chat, usage in zip(root_chats, stored, strict=True):
        a = chat.attributes
        assert a["swarmdeck.chat.purpose"] == "turn"
        assert a["gen_ai.usage.cache_read.input_tokens"] == usage["cache_read"]
        assert a["gen_ai.usage.cache_creation.input_tokens"] == usage["cache_write"]
        assert a["swarmdeck.usage.uncached_input_tokens"] == usage["input"]
        assert a["gen_ai.usage.input_tokens"] == (
            usage["input"] + usage["cache_read"] + usage["cache_write"]
        )
        assert a["gen_ai.usage.output_tokens"] == usage["output"]
    assert all(c.attributes["gen_ai.usage.cache_read.input_tokens"] > 0 for c in root_chats[1:])

    tools = {s.name: s for s in spans if s.name.startswith("execute_tool ")}
    assert set(tools) == {
        "execute_tool spawn_agent",
        "execute_tool wait_for_agents",
        "execute_tool read_file",
    }
    read = tools["execute_tool read_file"].attributes
    assert read["gen_ai.tool.name"] == "read_file" and read["swarmdeck.tool.effect"] == "read"
    assert tools["execute_tool spawn_agent"].attributes["swarmdeck.tool.effect"]
    for span in tools.values():
        assert span.parent.span_id == root.context.span_id
    # The sub-agent's generation hangs below the spawn_agent call that started it.
    spawn = tools["execute_tool spawn_agent"]
    assert child.context.trace_id == root.context.trace_id
    assert child.parent.span_id == spawn.context.span_id

    # No message content by default, and the planted key in no span.
    for span in spans:
        assert not CONTENT_ATTRS & set(span.attributes), span.name
    dumped = json.dumps([json.loads(s.to_json()) for s in spans])
    assert KEY not in dumped


async def test_contents_when_opted_in_are_redacted(traced, fake_llm, workdir: Path) -> None:
    swarm, exporter = traced
    swarm.host.services.tracing.capture_content = True
    await run_tree(swarm, fake_llm, workdir)
    spans = exporter.get_finished_spans()
    [read] = by_name(spans, "execute_tool read_file")
    assert json.loads(read.attributes["gen_ai.tool.call.arguments"]) == {"path": "notes.txt"}
    assert "token=" in read.attributes["gen_ai.tool.call.result"]
    last = next(s for s in by_name(spans, "chat scripted") if s.attributes["swarmdeck.turn"] == 3)
    output = json.loads(last.attributes["gen_ai.output.messages"])
    assert output[0]["parts"][0]["content"].startswith("all done, and the key is ")
    inputs = json.loads(last.attributes["gen_ai.input.messages"])
    assert inputs[0]["role"] == "system" and inputs[1]["role"] == "user"
    dumped = json.dumps([json.loads(s.to_json()) for s in spans])
    assert KEY not in dumped


async def test_compactions_have_chat_spans_and_the_trace_sums_to_the_usage(
    sd_home: Path, workdir: Path, fake_llm
) -> None:
    """A long session on a small window (Anthropic's wire, whose cache both writes and
    reads): every summary a compaction asked for is a chat span of its own, and the chat
    spans' tokens add up to the session's usage, cache tokens included."""
    write_provider(
        sd_home, "fake", fake_llm.anthropic_base_url, kind="anthropic",
        context_tokens=8000, output_tokens=1000,
    )  # fmt: skip
    fake_llm.context_tokens = 8000
    (workdir / "data.txt").write_text(data_file_text() * 2)
    fake_llm.set_script(searching(CronReader(25)))
    host = Host(tools=default_tools())
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    host.services.tracing = OtelTracing(provider, host.services.redactor.redact)
    record = host.create_session(SessionRequest(TASK, "fake", workdir, options={"max_turns": 200}))
    host.launch()
    try:
        await host.start(record.id)
        await await_for(status_is(host.catalog, record.id, "completed", "failed"), 180)
    finally:
        await host.aclose()
    assert host.catalog.get_session(record.id).status == "completed"
    compactions = host.catalog.events(record.id, kinds=["compaction"])
    assert compactions
    chats = [s.attributes for s in by_name(exporter.get_finished_spans(), "chat scripted")]
    summaries = [a for a in chats if a["swarmdeck.chat.purpose"] == "compaction"]
    assert len(summaries) == len(compactions)
    for span, event in zip(summaries, compactions, strict=True):
        assert span["gen_ai.usage.output_tokens"] == event.payload["usage"]["output"]
    usage = host.catalog.usage_totals([record.id])
    assert usage.cache_read > 0 and usage.cache_write > 0
    assert sum(a["gen_ai.usage.output_tokens"] for a in chats) == usage.output
    assert sum(a["gen_ai.usage.cache_read.input_tokens"] for a in chats) == usage.cache_read
    assert sum(a["gen_ai.usage.cache_creation.input_tokens"] for a in chats) == usage.cache_write
    assert sum(a["swarmdeck.usage.uncached_input_tokens"] for a in chats) == usage.input


async def test_a_swarm_is_one_trace_under_its_coordinator(traced, fake_llm, workdir: Path) -> None:
    """The coordinator has its invoke_agent span and every member's invoke_agent is a child
    of it, in one trace (a swarm made four unconnected traces, and no coordinator span)."""
    from tests.swarm.support import coordinator, member, plan_of

    swarm, exporter = traced
    plan = plan_of(
        {"role": "security", "task": "SEC: look", "mode": "review"},
        {"role": "finder", "task": "FIND: where", "mode": "explore"},
        {"role": "tests", "task": "TESTS: run", "mode": "test", "depends_on": ["security"]},
    )
    fake_llm.set_script(
        Scripted(
            {
                "TRACED SWARM": coordinator(plan, merged="merged"),
                "SEC:": member("review"),
                "FIND:": member("explore"),
                "TESTS:": member("test"),
            }
        )
    )
    doc = await swarm.coordinate("TRACED SWARM", workdir=workdir, model="fake")
    assert doc["verdict"] == "completed", doc
    spans = exporter.get_finished_spans()
    agents = {s.attributes["gen_ai.conversation.id"]: s for s in by_name(spans, "invoke_agent")}
    head = agents[doc["session_id"]]
    assert head.parent is None and head.attributes["gen_ai.operation.name"] == "invoke_agent"
    members = [m["session_id"] for m in doc["members"]]
    assert set(agents) == {doc["session_id"], *members}
    for sid in members:
        assert agents[sid].parent is not None and agents[sid].parent.span_id == (
            head.context.span_id
        ), sid
    assert {s.context.trace_id for s in spans} == {head.context.trace_id}


async def test_token_usage_histogram_per_model_and_type(sd_home: Path, fake_llm, workdir) -> None:
    """gen_ai.client.token.usage (the conventions' client metric): one input and one output
    point per model call, by provider and model, summing to the ledger."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    swarm = Swarm()
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    swarm.host.services.tracing = OtelTracing(
        TracerProvider(), swarm.host.services.redactor.redact, meter_provider=meters
    )
    try:
        sid = await run_tree(swarm, fake_llm, workdir)
        totals = swarm.host.catalog.usage_totals([s.id for s in swarm.host.catalog.list_sessions()])
    finally:
        await swarm.aclose()
    [metric] = [
        m
        for rm in reader.get_metrics_data().resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
        if m.name == "gen_ai.client.token.usage"
    ]
    assert metric.unit == "{token}" and sid
    points = {p.attributes["gen_ai.token.type"]: p for p in metric.data.data_points}
    assert set(points) == {"input", "output"}
    for point in points.values():
        assert point.attributes["gen_ai.request.model"] == "scripted"
        assert point.attributes["gen_ai.provider.name"] == "fake"
        assert point.count == 5  # four turns of the parent, one of the child
    assert points["output"].sum == totals.output
    assert points["input"].sum == totals.input + totals.cache_read + totals.cache_write
