"""`swarmdeck dispatch` with the standard OTEL_EXPORTER_OTLP_ENDPOINT exports its trace over
OTLP/HTTP to a collector on loopback (a real HTTP server decoding the protobuf request):
the session's turns and tool calls arrive, with token counts, before the process exits."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from swarmdeck.dispatch.modes import RESULT_EXAMPLES
from swarmdeck.testing.script import Script
from tests.conftest import run_cli, write_provider

pytest.importorskip("opentelemetry.exporter.otlp.proto.http")
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
)

SCRIPT = {
    "scenarios": [
        {
            "turns": [
                {"tool_calls": [{"name": "read_file", "arguments": {"path": "app.py"}}]},
                {"tool_calls": [{"name": "submit_result", "arguments": {"result": RESULT_EXAMPLES["explore"][0]}}]},
            ]
        }
    ]
}  # fmt: skip


@pytest.fixture
def collector() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    spans: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            request = ExportTraceServiceRequest.FromString(body)
            for resource in request.resource_spans:
                for scope in resource.scope_spans:
                    for span in scope.spans:
                        attrs = {a.key: _value(a.value) for a in span.attributes}
                        spans.append(
                            {
                                "name": span.name,
                                "attributes": attrs,
                                "trace_id": span.trace_id.hex(),
                                "span_id": span.span_id.hex(),
                                "parent_span_id": span.parent_span_id.hex(),
                            }
                        )
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.end_headers()

        def log_message(self, *_args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}", spans
    finally:
        server.shutdown()


def _value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [_value(x) for x in v.array_value.values]
    return getattr(v, kind)


def test_dispatch_exports_its_trace(sd_home: Path, workdir: Path, fake_llm, collector) -> None:
    endpoint, spans = collector
    fake_llm.set_script(Script.from_dict(SCRIPT))
    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    res = run_cli(
        sd_home, "dispatch", "-p", "fake", "--mode", "explore", "-C", str(workdir),
        "--task", "Where is main?", "-q",
        OTEL_EXPORTER_OTLP_ENDPOINT=endpoint, OTEL_SERVICE_NAME="sd-test",
    )  # fmt: skip
    assert res.code == 0, res.stderr
    verdict = json.loads(res.stdout.splitlines()[1])
    names = sorted(s["name"] for s in spans)
    assert names == [
        "chat scripted",
        "chat scripted",
        "execute_tool read_file",
        "execute_tool submit_result",
        "invoke_agent",
    ]
    chats = [s["attributes"] for s in spans if s["name"] == "chat scripted"]
    tokens = verdict["tokens"]
    # input_tokens counts every input token (the conventions'); the verdict splits them.
    everything = tokens["input"] + tokens["cache_read"] + tokens["cache_write"]
    assert sum(c["gen_ai.usage.input_tokens"] for c in chats) == everything
    assert sum(c["gen_ai.usage.cache_read.input_tokens"] for c in chats) == tokens["cache_read"]
    assert tokens["cache_read"] > 0  # the second turn's prefix came from the fake's cache
    assert sum(c["gen_ai.usage.output_tokens"] for c in chats) == verdict["tokens"]["output"]
    assert all(c["gen_ai.conversation.id"] == verdict["session_id"] for c in chats)


def test_a_swarm_exports_one_trace(sd_home: Path, workdir: Path, fake_llm, collector) -> None:
    """`swarmdeck swarm` in a process of its own: the coordinator's invoke_agent span is the
    root of one trace, each member's invoke_agent its child."""
    from tests.integration.test_sessions_support import Scripted
    from tests.swarm.support import coordinator, member, plan_of

    endpoint, spans = collector
    plan = plan_of(
        {"role": "security", "task": "SEC: look", "mode": "review"},
        {"role": "finder", "task": "FIND: where", "mode": "explore"},
    )
    fake_llm.set_script(
        Scripted(
            {
                "OTLP SWARM": coordinator(plan, merged="merged"),
                "SEC:": member("review"),
                "FIND:": member("explore"),
            }
        )
    )
    write_provider(sd_home, "fake", fake_llm.openai_base_url, concurrency=8)
    res = run_cli(
        sd_home, "swarm", "OTLP SWARM", "-C", str(workdir), "-m", "fake", "--json",
        OTEL_EXPORTER_OTLP_ENDPOINT=endpoint, OTEL_SERVICE_NAME="sd-test", timeout=180,
    )  # fmt: skip
    assert res.code == 0, res.stderr[-3000:]
    doc = json.loads(res.stdout)
    agents = {
        s["attributes"]["gen_ai.conversation.id"]: s for s in spans if s["name"] == "invoke_agent"
    }
    head = agents[doc["session_id"]]
    assert head["parent_span_id"] == ""
    members = [m["session_id"] for m in doc["members"]]
    assert set(agents) == {doc["session_id"], *members}
    assert {agents[m]["parent_span_id"] for m in members} == {head["span_id"]}
    assert {s["trace_id"] for s in spans} == {head["trace_id"]}
