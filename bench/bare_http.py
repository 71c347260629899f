"""The floor of an LLM call: a streamed chat completion with aiohttp alone, no SDK."""

from __future__ import annotations

import json
from typing import Any


async def http_turn(client: Any, body: dict[str, Any]) -> dict[str, Any]:
    """One streamed chat call with aiohttp alone (`client` is (session, url)), its SSE lines
    parsed with json: what any client of the wire format must spend, the floor under an SDK."""
    session, url = client
    text, calls = "", {}
    async with session.post(url, json=body, headers={"authorization": "Bearer bench"}) as answer:
        answer.raise_for_status()
        async for line in answer.content:
            data = line.removeprefix(b"data: ").strip()
            if not line.startswith(b"data: ") or data == b"[DONE]":
                continue
            for choice in json.loads(data).get("choices") or ():
                delta = choice.get("delta") or {}
                text += delta.get("content") or ""
                for c in delta.get("tool_calls") or ():
                    function = c.get("function") or {}
                    call = calls.setdefault(
                        c.get("index", 0),
                        {
                            "id": c.get("id"),
                            "type": "function",
                            "function": {"name": function.get("name"), "arguments": ""},
                        },
                    )
                    call["function"]["arguments"] += function.get("arguments") or ""
    return {"text": text, "calls": list(calls.values())}
