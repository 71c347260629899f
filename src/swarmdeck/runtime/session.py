"""The session loop: LLM turns and tool calls as durable steps, until the model is done."""

from __future__ import annotations

from typing import Any

from swarmdeck.runtime import steps
from swarmdeck.runtime.durable import Durable

DEFAULT_MAX_TURNS = 50
MAX_RESULT_ATTEMPTS = 3


async def run_session(session_id: str, d: Durable) -> dict[str, Any]:
    """Drive one session to its end; returns {status, reason}."""
    info = await d.step("load", steps.load_session, session_id)
    if info["terminal"]:
        return {"status": info["status"], "reason": "already finished"}
    options = info["options"]
    max_turns = int(options.get("max_turns", DEFAULT_MAX_TURNS))
    turn = info["turns_done"]
    rejected = 0
    last_text = ""
    while True:
        if turn >= max_turns:
            return await _end(d, session_id, "completed", last_text, None, "step_cap")
        reply = await d.step("llm_turn", steps.llm_turn, session_id, turn)
        if "error" in reply:
            return await _end(d, session_id, "failed", last_text, reply["error"], "provider_error")
        last_text = reply["text"] or last_text
        submitted = False
        for call in reply["tool_calls"]:
            if call["name"] == steps.SUBMIT_RESULT:
                outcome = await d.step("submit_result", steps.submit_result, session_id, turn, call)
                submitted = submitted or outcome["accepted"]
                rejected += 0 if outcome["accepted"] else 1
            else:
                await d.step("tool", steps.tool_call, session_id, turn, call)
        turn += 1
        if submitted:
            return await _end(d, session_id, "completed", last_text, None, "submitted")
        if rejected >= MAX_RESULT_ATTEMPTS:
            return await _end(d, session_id, "completed", last_text, None, "result_malformed")
        if not reply["tool_calls"]:
            return await _end(d, session_id, "completed", last_text, None, "model_done")


async def _end(
    d: Durable, session_id: str, status: str, text: str, error: str | None, reason: str
) -> dict[str, Any]:
    await d.step("finish", steps.finish, session_id, status, text, error, reason)
    return {"status": status, "reason": reason}
