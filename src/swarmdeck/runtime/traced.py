"""Where the runtime meets tracing: the span of a session generation, of a turn, of a tool
call. Each is the process's Tracing hook (a shared no-op when nothing is configured); the
facts a span needs are gathered only when tracing is on."""

from __future__ import annotations

from typing import Any

from swarmdeck.catalog.records import SessionRecord
from swarmdeck.integrations.telemetry.tracing import (
    TRACEPARENT_OPTION,
    SessionInfo,
    ToolInfo,
    TurnInfo,
)
from swarmdeck.runtime.services import services


def session_span(session_id: str, generation: int) -> Any:
    """Around one generation of the session's workflow (invoke_agent)."""
    svc = services()
    if not svc.tracing.enabled:
        return svc.tracing.session(None)  # type: ignore[arg-type]
    record = svc.session_identity(session_id)
    config, model = svc.provider_for(record.model)
    info = SessionInfo(
        session_id=session_id,
        generation=generation,
        agent=record.agent,
        provider=config.key,
        model=model,
        mode=record.mode,
        parent_id=record.parent_id,
        traceparent=record.options.get(TRACEPARENT_OPTION),
    )
    return svc.tracing.session(info)


def turn_span(record: SessionRecord, turn: int, purpose: str = "turn") -> Any:
    """Around one model call (chat {model}) for a turn, or for the compaction before it
    (`purpose`); yields the recorder of its outcome."""
    svc = services()
    if not svc.tracing.enabled:
        return svc.tracing.turn(None)  # type: ignore[arg-type]
    config, model = svc.provider_for(record.model)
    return svc.tracing.turn(TurnInfo(record.id, turn, config.key, model, purpose))


def tool_span(session_id: str, call: dict[str, Any], effect: str) -> Any:
    """Around one tool call (execute_tool {name}); yields the recorder of its outcome."""
    svc = services()
    if not svc.tracing.enabled:
        return svc.tracing.tool(None)  # type: ignore[arg-type]
    info = ToolInfo(session_id, call["name"], call["id"], effect, call.get("arguments") or "")
    return svc.tracing.tool(info)


def child_trace_options() -> dict[str, Any]:
    """What a child session keeps to join its parent's trace (nothing without tracing)."""
    parent = services().tracing.traceparent()
    return {TRACEPARENT_OPTION: parent} if parent else {}
