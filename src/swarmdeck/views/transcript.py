"""A session's transcript as entries a person reads: model text, each tool call with its
result (folded: a one-line head, the whole of it on demand), messages, child updates,
timers, notices (retries, cooldowns) and status changes, where they happened."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from swarmdeck.catalog.records import (
    BUDGET_NOTE_KIND,
    BUDGET_WARNING_KIND,
    COMPACT_REQUEST_KIND,
    CONTEXT_NOTE_KIND,
    RESUMED_KIND,
    EventRecord,
)
from swarmdeck.views.text import one_line

HEAD_CHARS = 160


def _head(text: str, limit: int = HEAD_CHARS) -> str:
    flat = one_line(text)
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _arguments(arguments: str) -> str:
    try:
        args = json.loads(arguments or "{}")
    except json.JSONDecodeError:
        return arguments
    if not isinstance(args, dict):
        return arguments
    return ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)[:60]}" for k, v in args.items())


def _pretty(arguments: str) -> str:
    try:
        return json.dumps(json.loads(arguments or "{}"), indent=2, ensure_ascii=False)
    except json.JSONDecodeError:
        return arguments


@dataclass
class Entry:
    """One thing that happened, as a head line and (when there is more) a body."""

    event_id: int
    ts: float
    kind: str  # task, user, model, call, child_update, timer, notice, compaction, status, error...
    head: str
    body: str = ""
    error: bool = False
    # A tool call's id, until its result is folded in.
    call_id: str | None = None
    done: bool = True

    @property
    def foldable(self) -> bool:
        """True when the body says more than the head."""
        return bool(self.body)


def tool_searches(blocks: list[dict[str, Any]]) -> list[str]:
    """A line per search of the vendor's tool search in a turn's blocks: what the model
    asked for and which deferred tools came back (Anthropic's blocks, models/tool_search.py;
    the Responses API's items, models/responses_items.py)."""
    found: dict[str, str] = {}
    for block in blocks:
        if block.get("type") == "tool_search_output":
            # OpenAI's Responses API: the output carries the tools it loaded.
            names = _tool_names(block.get("tools"))
            found[str(block.get("call_id"))] = ", ".join(names) or "nothing"
        if block.get("type") != "tool_search_tool_result":
            continue
        content = block.get("content") or {}
        refs = content.get("tool_references") if isinstance(content, dict) else None
        names = [str(r.get("tool_name")) for r in refs or [] if isinstance(r, dict)]
        error = content.get("error_code") if isinstance(content, dict) else None
        found[str(block.get("tool_use_id"))] = (
            ", ".join(names) or "nothing" if error is None else f"error: {error}"
        )
    lines = []
    for block in blocks:
        kind = block.get("type")
        if kind == "server_tool_use":
            asked = (block.get("input") or {}).get("query", "")
            result = found.get(str(block.get("id")), "(no answer)")
            lines.append(f"tool search({asked!r}) → {result}")
        elif kind == "tool_search_call":
            arguments = block.get("arguments")
            asked = arguments.get("query", "") if isinstance(arguments, dict) else arguments
            result = found.get(str(block.get("call_id")), "(no answer)")
            lines.append(f"tool search({asked or ''!r}) → {result}")
    return lines


def _tool_names(tools: Any) -> list[str]:
    """The names of the tools a Responses search output loaded (a namespace's included)."""
    names: list[str] = []
    for tool in tools if isinstance(tools, list) else []:
        if isinstance(tool, dict) and tool.get("type") == "namespace":
            names += _tool_names(tool.get("tools"))
        elif isinstance(tool, dict) and tool.get("name"):
            names.append(str(tool["name"]))
    return names


@dataclass
class Transcript:
    """Entries in order, built up event by event (a follower adds events as they land)."""

    entries: list[Entry] = field(default_factory=list)
    cursor: int = 0
    _open_calls: dict[str, Entry] = field(default_factory=dict)

    def add(self, events: list[EventRecord]) -> list[Entry]:
        """Add events after the cursor; returns the entries that are new or changed."""
        touched: list[Entry] = []
        for ev in events:
            if ev.id <= self.cursor:
                continue
            self.cursor = ev.id
            touched.extend(self._entries(ev))
        return touched

    def _entries(self, ev: EventRecord) -> list[Entry]:
        p = ev.payload
        new: list[Entry] = []
        if ev.kind == "assistant":
            if p.get("text"):
                text = p["text"]
                new.append(
                    Entry(ev.id, ev.ts, "model", _head(text), text if len(text) > 80 else "")
                )
            for line in tool_searches(p.get("blocks") or []):
                new.append(Entry(ev.id, ev.ts, "call", line))
            for call in p.get("tool_calls") or []:
                entry = Entry(
                    ev.id,
                    ev.ts,
                    "call",
                    f"{call['name']}({_arguments(call.get('arguments', ''))})",
                    f"arguments:\n{_pretty(call.get('arguments', ''))}",
                    call_id=call.get("id"),
                    done=False,
                )
                if entry.call_id:
                    self._open_calls[entry.call_id] = entry
                new.append(entry)
            if not new:
                new.append(Entry(ev.id, ev.ts, "model", "(empty turn)"))
        elif ev.kind == "tool_result":
            call = self._open_calls.pop(str(p.get("call_id")), None)
            content = str(p.get("content", ""))
            if call is None:  # its call is before the window that was read
                new.append(Entry(ev.id, ev.ts, "result", _head(content), content))
            else:
                call.done = True
                call.error = bool(p.get("is_error"))
                call.head += f" → {_head(content, 80)}"
                call.body += f"\n\nresult:\n{content}"
                return [call]
        elif ev.kind in ("task", "user", "child_update", "timer"):
            text = str(p.get("text", ""))
            new.append(Entry(ev.id, ev.ts, ev.kind, _head(text), text if len(text) > 80 else ""))
        elif ev.kind == "notice":
            text = str(p.get("text") or p.get("reason", ""))
            new.append(Entry(ev.id, ev.ts, "notice", _head(text, 300)))
        elif ev.kind == "compaction":
            # The summary the model reads from then on, folded under the line.
            summary = str(p.get("text", ""))
            new.append(Entry(ev.id, ev.ts, "compaction", compaction_line(p), summary))
        elif ev.kind in (COMPACT_REQUEST_KIND, CONTEXT_NOTE_KIND):
            new.append(Entry(ev.id, ev.ts, "compaction", str(p.get("text", ""))))
        elif ev.kind == BUDGET_WARNING_KIND:
            new.append(Entry(ev.id, ev.ts, "budget", str(p.get("text", ""))))
        elif ev.kind == BUDGET_NOTE_KIND:
            text = str(p.get("text", ""))
            new.append(Entry(ev.id, ev.ts, "note", _head(text), text))
        elif ev.kind == RESUMED_KIND:
            new.append(Entry(ev.id, ev.ts, RESUMED_KIND, resumed_line(p)))
        elif ev.kind == "status":
            error = p.get("error")
            new.append(
                Entry(
                    ev.id, ev.ts, "status", str(p.get("status", "")), str(error or ""), bool(error)
                )
            )
        elif ev.kind == "error":
            new.append(Entry(ev.id, ev.ts, "error", _head(str(p.get("message", ""))), error=True))
        elif ev.kind == "audit":
            shown = ", ".join(
                f"{k}={v}" for k, v in p.items() if k in ("session", "runs", "files", "bytes")
            )
            new.append(Entry(ev.id, ev.ts, "audit", f"{p.get('action')} {shown}: {p.get('why')}"))
        self.entries.extend(new)
        return new


def resumed_line(p: dict[str, object]) -> str:
    """A rerun of the session's execution as a line: where it runs now, and where before."""
    after = p.get("after")
    before = f", after its run on {after} stopped" if after and after != p["executor"] else ""
    return f"on {p['executor']}{before}"


def compaction_line(p: dict[str, object]) -> str:
    """A compaction as a line: how many messages, summarized or dropped, and why."""
    how = "summarized" if p.get("summarized") else "dropped (no summary)"
    why = " to fit the window"
    if p.get("overflow"):
        why = " after a context-length error"
    elif p.get("why") == "asked":
        why = " as a person asked"
    freed = f", {p['freed']:,} tokens freed" if isinstance(p.get("freed"), int) else ""
    error = f": {p['error']}" if p.get("error") else ""
    return f"{p.get('messages', 0)} earlier messages {how}{why}{freed}{error}"
