"""Control tools carried out by the session workflow itself: timers, sub-agents, ask_user.

Each handler is workflow code: deterministic between durable calls, which it makes only
through the Durable interface. It returns the text the model sees and whether it failed.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from pydantic import BaseModel

from swarmdeck.errors import ToolError
from swarmdeck.runtime import tree
from swarmdeck.runtime.crashpoints import crash_point
from swarmdeck.runtime.durable import Durable
from swarmdeck.runtime.status import set_status
from swarmdeck.tools.builtins.control import BROADCAST_TOOL, CONTROL_TOOLS

Outcome = tuple[str, bool]
ANSWER_WAIT_SECONDS = 3600.0
# The inbox kinds that end a wait early.
WAIT_KINDS = ["user"]
# The workflow format (Durable.format) from which a wait sleeps on the look that fixed
# its deadline; format 1 looked a second time before it slept.
WAIT_LOOKS_ONCE = 2
# The format from which a wait takes no step before it sleeps: its deadline counts from
# the time the entry before it was journaled, its `waiting` status rides with that entry
# and its `running` with its result, and it looks at the inbox only when the doorbell
# rings before the deadline.
WAIT_ON_JOURNAL = 4

_TOOLS = {t.name: t for t in (*CONTROL_TOOLS, BROADCAST_TOOL)}


class LoopState(Protocol):
    """What the control tools read and change of the session loop that runs them."""

    d: Durable
    sid: str
    turn: int
    # When the loop's latest transcript entry was journaled (a replay reads the same).
    journaled_at: float
    offered: set[str]
    cron: dict[str, Any] | None

    async def drain(
        self, kinds: list[str] | None, record: bool = True, wake: bool = False
    ) -> list[dict[str, Any]]:
        """Take pending inbox messages of these kinds (durably, once)."""
        ...


def format_children(rows: list[dict[str, Any]]) -> str:
    """Sub-agents as readable lines: title, status, id, then their output indented."""
    if not rows:
        return "no sub-agents"
    lines = []
    for r in rows:
        lines.append(f"- {r['title']} [{r['status']}] id={r['id']}")
        for text in (r.get("output"), r.get("error")):
            if text:
                lines.extend(f"    {line}" for line in text.splitlines())
        if r.get("result") is not None:
            lines.append(f"    result: {json.dumps(r['result'], ensure_ascii=False)}")
    return "\n".join(lines)


class ControlTools:
    """The control tools of one session loop."""

    def __init__(self, loop: LoopState) -> None:
        self.loop = loop
        self.d = loop.d
        self.sid = loop.sid
        self._handlers: dict[str, Callable[[Any, str], Awaitable[Outcome]]] = {
            "wait": self.wait,
            "cron": self.cron,
            "cancel_cron": self.cancel_cron,
            "spawn_agent": self.spawn_agent,
            "message_agent": self.message_agent,
            "broadcast": self.broadcast,
            "check_agents": self.check_agents,
            "wait_for_agents": self.wait_for_agents,
            "cancel_agent": self.cancel_agent,
            "list_sessions": self.list_sessions,
            "ask_user": self.ask_user,
        }

    def handles(self, name: str) -> bool:
        """True for the tools this class carries out."""
        return name in self._handlers

    def effect(self, name: str) -> str:
        """The effect class a control tool declares."""
        return str(_TOOLS[name].effect)

    async def run(self, name: str, call: dict[str, Any]) -> Outcome:
        """Validate the arguments (pure, so replay-safe) and carry the call out."""
        try:
            args: BaseModel = _TOOLS[name].parse_args(call["arguments"])
        except ToolError as exc:
            return f"error: {exc.message}", True
        return await self._handlers[name](args, f"{self.loop.turn}:{call['id']}")

    async def wait(self, args: Any, _key: str) -> Outcome:
        if self.d.format >= WAIT_ON_JOURNAL:
            pending = await self._wait_on_doorbell(args.seconds)
        else:
            pending = await self._wait_looking(args.seconds)
        why = f" ({args.reason})" if args.reason else ""
        if pending:
            # A message (from a person, or a parent) ended the wait: it is answered first.
            return f"wait ended early{why}: a message arrived; read it and answer it first", False
        return f"waited {args.seconds:g} seconds{why}", False

    async def _wait_on_doorbell(self, seconds: float) -> bool:
        """A wait of format 4: True when a message ended it early.

        No step before the sleep: the deadline counts from when the loop's entry before
        this call was journaled, which a replay reads back the same (so a crash before the
        engine recorded its sleep still wakes at the first deadline), and the status moves
        with the entries around it (SessionLoop.status_with). The inbox is looked at only
        when the doorbell rings early: a message that came before the wait rang it too,
        and its ring waits for this receive.
        """
        deadline = self.loop.journaled_at + seconds
        crash_point("wait.sleeping")
        while await self.d.recv_until("doorbell", deadline) is not None:
            look = await self.d.step("mail_at", tree.mail_look, self.sid, WAIT_KINDS, deadline)
            if look["over"]:
                return bool(look["pending"])
        return False

    async def _wait_looking(self, seconds: float) -> bool:
        """A wait of formats 1-3, so their workflows replay unchanged: True when a message
        ended it early."""
        # Each look at the inbox is one step that records the clock with it and moves the
        # status: the first sets `waiting` and fixes the deadline (so a crash before the
        # engine recorded its sleep still wakes at the original time, not restart +
        # seconds), the one that ends the wait sets `running` back. A step of its own for
        # the time and for each status change cost each wait three more engine steps.
        look = await self.d.step("waiting_at", tree.wait_look, self.sid, WAIT_KINDS, seconds)
        crash_point("wait.sleeping")
        if self.d.format < WAIT_LOOKS_ONCE:
            look = await self._looks_of_format_1(look, seconds)
        while not look["over"]:
            # Sleep on the last look's answer, then look again (the deadline passed, or the
            # doorbell rang). After a restart past the deadline the recv returns at once.
            await self.d.recv_until("doorbell", look["deadline"])
            look = await self.d.step(
                "mail_at", tree.wait_look, self.sid, WAIT_KINDS, seconds, look["deadline"]
            )
        return bool(look["pending"])

    async def _looks_of_format_1(self, look: dict[str, Any], seconds: float) -> dict[str, Any]:
        """A wait as workflows of format 1 (an earlier release's) took it, so they replay
        unchanged: a fresh look before each sleep, the first one right after the look that
        fixed the deadline. Returns the look that ended the wait."""
        deadline = look["deadline"]
        while not look["over"]:
            look = await self.d.step(
                "mail_at", tree.wait_look, self.sid, WAIT_KINDS, seconds, deadline
            )
            if not look["over"]:
                await self.d.recv_until("doorbell", deadline)
        return look

    async def cron(self, args: Any, _key: str) -> Outcome:
        if args.check is not None and args.check not in self.loop.offered:
            return f"error: the check {args.check} is not one of your tools", True
        now = await self.d.now()
        cron = {
            "interval": args.seconds,
            "reason": args.reason,
            "next_at": now + args.seconds,
            "check": args.check,
            "check_args": args.check_args,
        }
        await self.d.step("cron_set", tree.set_cron, self.sid, cron)
        self.loop.cron = cron
        checked = (
            f" Before each tick {args.check} runs; you are woken only when it finds something."
            if args.check
            else ""
        )
        return (
            f"cron set: every {args.seconds:g} seconds.{checked} End your turn now; you will "
            "be woken at each tick. Call cancel_cron to stop.",
            False,
        )

    async def cancel_cron(self, _args: Any, _key: str) -> Outcome:
        await self.d.step("cron_set", tree.set_cron, self.sid, None)
        had = self.loop.cron is not None
        self.loop.cron = None
        return ("cron cancelled" if had else "no cron was set"), False

    async def spawn_agent(self, args: Any, key: str) -> Outcome:
        spawned = await self.d.step("spawn", tree.spawn_child, self.sid, key, args.model_dump())
        if "error" in spawned:
            return f"error: {spawned['error']}", True
        await self.d.start_child(spawned["id"])
        return f"started sub-agent {spawned['id']}", False

    async def message_agent(self, args: Any, key: str) -> Outcome:
        mine = await self.d.step("children", tree.children_summary, self.sid, [args.agent_id])
        text = f"message from your parent {self.sid}: {args.text}"
        if "error" in mine:
            # Not a sub-agent: a member (or the head) of this session's swarm may still be.
            peer = await self.d.step("peer", tree.group_peer, self.sid, args.agent_id)
            if "error" in peer:
                return f"error: {peer['error']}", True
            text = f"message from {peer['title']} ({self.sid}): {args.text}"
        # "from:" keys: what an agent sent is never taken for a person's message.
        msg_id = f"from:{self.sid}:{key}"
        await self.d.step("post", tree.post_message, args.agent_id, msg_id, "user", {"text": text})
        return f"sent to {args.agent_id}", False

    async def broadcast(self, args: Any, key: str) -> Outcome:
        group = await self.d.step("members", tree.group_members, self.sid)
        if "error" in group:
            return f"error: {group['error']}", True
        text = f"broadcast from {group['title']} ({self.sid}): {args.text}"
        # One id for every recipient: a replay after a crash posts nothing twice. The
        # group's head gets it first, and a member that starts later is given what its
        # head got (tree.BROADCAST): so every member hears it, whenever it starts.
        msg_id = f"from:{self.sid}:{key}"
        payload = {"text": text, tree.BROADCAST: True}
        heads = [group["head"]] if group["head"] != self.sid else []
        for member in [*heads, *group["ids"]]:
            await self.d.step("post", tree.post_message, member, msg_id, "user", payload)
        live = ", ".join(group["ids"]) or "none yet"
        return (
            f"sent to the swarm: the members live now ({live}), and those that start later",
            False,
        )

    async def check_agents(self, _args: Any, _key: str) -> Outcome:
        summary = await self.d.step("children", tree.children_summary, self.sid, None)
        return format_children(summary["rows"]), False

    async def wait_for_agents(self, args: Any, _key: str) -> Outcome:
        deadline = await self.d.now() + args.timeout
        while True:
            summary = await self.d.step("children", tree.children_summary, self.sid, args.ids)
            if "error" in summary:
                return f"error: {summary['error']}", True
            now = await self.d.now()
            if summary["done"] or now >= deadline:
                break
            await self.d.recv("doorbell", deadline - now)
        if args.ids is None:
            # Their updates are in this result; they must not wake the session again.
            await self.loop.drain(["child_update"], record=False)
        rows = summary["rows"]
        head = "all finished" if summary["done"] else f"timed out after {args.timeout:g} s"
        return f"{head}\n{format_children(rows)}", False

    async def cancel_agent(self, args: Any, _key: str) -> Outcome:
        mine = await self.d.step("children", tree.children_summary, self.sid, [args.agent_id])
        if "error" in mine:
            return f"error: {mine['error']}", True
        cancelled = await self.d.step(
            "cancel", tree.cancel_tree, args.agent_id, f"cancelled by {self.sid}", False
        )
        return f"cancelled {len(cancelled)} session(s): {', '.join(cancelled)}", False

    async def list_sessions(self, _args: Any, _key: str) -> Outcome:
        rows = await self.d.step("tree", tree.tree_summary, self.sid)
        return json.dumps(rows, ensure_ascii=False), False

    async def ask_user(self, args: Any, _key: str) -> Outcome:
        await self.d.step("status", set_status, self.sid, "input_required")
        while True:
            answers = await self.loop.drain(["answer"], record=False, wake=True)
            if answers:
                break
            await self.d.recv("doorbell", ANSWER_WAIT_SECONDS)
        await self.d.step("status", set_status, self.sid, "running")
        return f"the user answered: {answers[0]['payload']['text']}", False
