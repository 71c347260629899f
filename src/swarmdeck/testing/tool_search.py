"""The fake's vendor tool searches: a request may send tools with `defer_loading: true`
beside a tool search tool; a scripted turn with `tool_search` searches them, and the answer
carries the `server_tool_use` and `tool_search_tool_result` blocks Anthropic's would (the
`tool_search_call` and `tool_search_output` items of OpenAI's Responses API, whose hosted
search is BM25 here: testing/responses_wire.py).

The search is a real one over what the vendor searches (a tool's name, description, and
its arguments' names and descriptions): Python's `re.search` for the regex variant, BM25
for the other, at most five tools. A deferred tool is callable once a search of the
conversation returned it; a reply calling it before is refused, as the model could not
have seen it. Deferred tools weigh nothing in the prompt; a found one weighs its schema
where its reference stands (testing/prompt_cache.py).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from swarmdeck.testing.answer import HttpError, bad_request
from swarmdeck.testing.reply import Reply
from swarmdeck.testing.request import (
    SEARCH_TOOL_NAMES,
    SEARCH_TOOL_TYPES,
    FakeRequest,
    deferred_tools,
    found_tools,
)

MOST_FOUND = 5
MAX_PATTERN = 200
# BM25's usual constants.
K1, B = 1.2, 0.75


@dataclass(frozen=True)
class SearchTurn:
    """One search the fake model ran: what it asked, and what it found (or its error)."""

    id: str
    name: str
    query: str
    found: tuple[str, ...] = ()
    error: str | None = None

    def use_block(self) -> dict[str, Any]:
        """The server_tool_use block (its input whole)."""
        return {"type": "server_tool_use", "id": self.id, "name": self.name, "input": self.input}

    @property
    def input(self) -> dict[str, Any]:
        """What the model asked the search."""
        return {"query": self.query}

    def result_block(self) -> dict[str, Any]:
        """The tool_search_tool_result block."""
        if self.error is not None:
            content: dict[str, Any] = {
                "type": "tool_search_tool_result_error",
                "error_code": self.error,
            }
        else:
            refs = [{"type": "tool_reference", "tool_name": name} for name in self.found]
            content = {"type": "tool_search_tool_search_result", "tool_references": refs}
        return {"type": "tool_search_tool_result", "tool_use_id": self.id, "content": content}


def searchable_text(tool: Mapping[str, Any]) -> str:
    """What a search looks at: name, description, arguments' names and descriptions."""
    parts = [str(tool.get("name", "")), str(tool.get("description", ""))]
    schema = tool.get("input_schema", tool.get("parameters"))
    properties = schema.get("properties") if isinstance(schema, Mapping) else None
    for name, prop in (properties or {}).items():
        parts.append(str(name))
        if isinstance(prop, Mapping) and isinstance(prop.get("description"), str):
            parts.append(prop["description"])
    return "\n".join(parts)


def regex_search(pattern: str, tools: Mapping[str, Mapping[str, Any]]) -> list[str] | str:
    """The tools whose text `re.search` finds the pattern in; an error code for a bad one."""
    if len(pattern) > MAX_PATTERN:
        return "invalid_tool_input"
    try:
        compiled = re.compile(pattern)
    except re.error:
        return "invalid_tool_input"
    return [name for name, tool in tools.items() if compiled.search(searchable_text(tool))][
        :MOST_FOUND
    ]


def _terms(text: str) -> list[str]:
    """Lower-case words, a snake_case name both whole and in its parts."""
    words = re.findall(r"[a-z0-9_]+", text.lower())
    return [part for w in words for part in {w, *w.split("_")} if part]


def bm25_search(query: str, tools: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The tools BM25 ranks for the query, best first (ties in the request's order)."""
    docs = {name: Counter(_terms(searchable_text(tool))) for name, tool in tools.items()}
    if not docs:
        return []
    average = sum(sum(d.values()) for d in docs.values()) / len(docs)
    scored = []
    for n, (name, doc) in enumerate(docs.items()):
        size = sum(doc.values())
        score = 0.0
        for term in set(_terms(query)):
            having = sum(1 for d in docs.values() if term in d)
            if not doc[term]:
                continue
            idf = math.log(1 + (len(docs) - having + 0.5) / (having + 0.5))
            tf = doc[term]
            score += idf * tf * (K1 + 1) / (tf + K1 * (1 - B + B * size / average))
        if score > 0:
            scored.append((-score, n, name))
    return [name for _, _, name in sorted(scored)[:MOST_FOUND]]


def run_search(reply: Reply, request: FakeRequest) -> SearchTurn | None:
    """The search a reply asks for, run over the request's deferred tools."""
    if reply.tool_search is None:
        return None
    variant = request.tool_search
    if variant is None:
        raise HttpError(500, "fake LLM script searched, but the request has no tool search tool")
    tools = deferred_tools(request.body)
    query = reply.tool_search
    found = regex_search(query, tools) if variant == "regex" else bm25_search(query, tools)
    search_id = f"{'tsc' if variant == 'hosted' else 'srvtoolu'}_{request.turn}"
    name = SEARCH_TOOL_NAMES[variant]
    if isinstance(found, str):
        return SearchTurn(search_id, name, query, error=found)
    return SearchTurn(search_id, name, query, tuple(found))


def check_calls(reply: Reply, request: FakeRequest, search: SearchTurn | None) -> None:
    """Refuse a reply that calls a deferred tool no search of the conversation returned."""
    deferred = deferred_tools(request.body)
    found = {*found_tools(request.messages), *(search.found if search else ())}
    for call in reply.tool_calls:
        if call.name in deferred and call.name not in found:
            raise bad_request(
                f"tool {call.name!r} is deferred (defer_loading: true) and no tool search of "
                "this conversation returned it, so the model cannot call it"
            )


def check_tools(body: Mapping[str, Any], messages: list[Mapping[str, Any]]) -> None:
    """A request's search tool has its fixed name, not every tool is deferred, and every
    tool a search result references is defined, deferred (the vendor's 400s)."""
    tools = [t for t in body.get("tools") or [] if isinstance(t, Mapping)]
    for i, tool in enumerate(tools):
        variant = SEARCH_TOOL_TYPES.get(str(tool.get("type")))
        if variant is not None and tool.get("name") != SEARCH_TOOL_NAMES[variant]:
            wanted = SEARCH_TOOL_NAMES[variant]
            raise bad_request(f"tools.{i}.{tool['type']}: name must be {wanted!r}")
    if tools and all(t.get("defer_loading") is True for t in tools):
        raise bad_request(
            "All tools have defer_loading set. At least one tool must be non-deferred."
        )
    deferred = deferred_tools(body)
    for name in found_tools(messages):
        if name not in deferred:
            raise bad_request(f"Tool reference {name!r} has no corresponding tool definition")


def searching(script: Callable[[FakeRequest], Reply]) -> Callable[[FakeRequest], Reply]:
    """A script that searches before it calls: where the request offers the vendor's tool
    search, a reply calling deferred tools no search has found yet searches them first,
    by their names (a script written for tools shown whole then runs on either scheme)."""

    def script_fn(request: FakeRequest) -> Reply:
        reply = script(request)
        if request.tool_search is None or reply.tool_search is not None:
            return reply
        deferred, found = deferred_tools(request.body), set(request.found_tools)
        missing = [c.name for c in reply.tool_calls if c.name in deferred and c.name not in found]
        if not missing:
            return reply
        if request.tool_search == "regex":
            query = "(?m)^(" + "|".join(re.escape(name) for name in missing) + ")$"
        else:
            query = " ".join(missing)
        return replace(reply, tool_search=query)

    return script_fn
