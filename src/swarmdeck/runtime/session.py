"""The session loop: LLM turns and tool calls as durable steps, until the model is done.

Between turns a persistent session idles on its inbox (and its cron); a one-shot session
(a dispatched task, a sub-agent) ends when the model ends its turn.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from swarmdeck.catalog import fence
from swarmdeck.catalog.fence import Fenced
from swarmdeck.catalog.records import COMPACT_REQUEST_KIND, TERMINAL_STATUSES
from swarmdeck.runtime import tree
from swarmdeck.runtime.budget import check_budget
from swarmdeck.runtime.control import WAIT_ON_JOURNAL, ControlTools
from swarmdeck.runtime.durable import ROLLED_OVER, SUPERSEDED, Durable
from swarmdeck.runtime.events import append_event, drop_old_generations, last_model_text
from swarmdeck.runtime.execution import begin_execution
from swarmdeck.runtime.services import services
from swarmdeck.runtime.status import (
    Ending,
    describe_error,
    end_session,
    ring_parent,
    set_status,
)
from swarmdeck.runtime.tool_calls import (
    SUBMIT_RESULT,
    record_result,
    run_check,
    submit_result,
    tool_call,
)
from swarmdeck.runtime.traced import session_span, tool_span
from swarmdeck.runtime.turn import (
    LAST_TURN_MAIL,
    LastTurn,
    compact_between_turns,
    llm_turn,
    mail_waiting,
)
from swarmdeck.runtime.workspaces import materialise, release, store_workspace

DEFAULT_MAX_TURNS = 50
MAX_RESULT_ATTEMPTS = 3
IDLE_RECV_SECONDS = 3600.0
# After a wake-up, keep collecting messages that arrive this close together (up to the cap),
# so twenty children finishing at once cost the parent one turn, not twenty.
BATCH_GAP_SECONDS = 0.25
BATCH_MAX_SECONDS = 2.0
# Inbox kinds a session takes in between turns; answers are for the ask_user that waits.
# A person's request to compact (`sessions compact`) is taken at the next turn boundary too.
TURN_INBOX_KINDS = ["user", "child_update", COMPACT_REQUEST_KIND]
# The session option naming a kind of session that a registered driver runs (Services).
KIND_OPTION = "kind"
# The notice a session that waits between turns leaves when a wake-up used max_turns.
CAP_NOTICE = "turn_cap"
# The workflow format (engine/workflow.py) from which a person's message wakes an idle
# session without the batch's quiet gap (format 2 waited BATCH_GAP_SECONDS for any ring).
PERSON_WAKES_AT_ONCE = 3
# The format from which an idle session's statuses take no steps of their own: `idle` is
# stored with the turn the model ended (when it is that turn that rests), and `running`
# with the drain that woke it (a cron's tick still takes its step).
STATUS_WITH_ENTRIES = 4
# The format from which a session that rests after its turn first waits on the doorbell
# (mail that came during the turn rang it, and the ring waits in the engine) instead of
# looking at the inbox, and reads the clock only for a cron.
RING_FIRST = 5
# The format from which the loop's drains are no engine steps: the claim each takes in the
# inbox is its record. The step around it cost four statements and two commits a wake.
DRAIN_BY_CLAIM = 6


async def run_session(session_id: str, generation: int, d: Durable) -> dict[str, Any]:
    """Drive one generation of a session to its end; returns {status, reason}."""
    execution = await begin_execution(session_id, generation)
    info = execution.info
    # This execution's writes to the session land only while its epoch holds (fence.py).
    fence.enter(session_id, execution.epoch)
    if info["terminal"]:
        return {"status": info["status"], "reason": "already finished"}
    # A store workspace: its files as of the last journaled step, on this host. Asked once
    # per run: the session's end drops its cached identity, so asking again there read it.
    ws_id = store_workspace(session_id)
    if ws_id is not None:
        await asyncio.to_thread(materialise, session_id)
    unseen = workdir_unseen(session_id)
    if unseen is not None:
        # Never in the wrong directory: a worker that cannot see the session's workdir
        # (another host, no shared filesystem) refuses it, saying where and which.
        ending = Ending("failed", "", unseen, WORKDIR_UNSEEN, generation)
        await end_session(session_id, info.get("parent_id") is not None, ending)
        return {"status": "failed", "reason": WORKDIR_UNSEEN}
    kind = info["options"].get(KIND_OPTION)
    loop = None if kind else SessionLoop(d, session_id, info, execution.may_replay)
    try:
        if loop is None:
            # A driver of its own (a swarm's coordinator): it ends its session itself.
            with session_span(session_id, generation):
                return await _run_kind(kind, session_id, generation, d, info)
        try:
            with session_span(session_id, generation):
                outcome = await loop.run()
            if outcome.get("status") in TERMINAL_STATUSES and ws_id is not None:
                await asyncio.to_thread(release, ws_id)
            return outcome
        except Fenced:
            raise
        except Exception as exc:
            # A bug or an unexpected failure in a step: end the session where everyone can
            # see it (and tell its parent) instead of leaving it `running` with no workflow.
            # (Cancellation is not an Exception: it passes through.)
            return await loop.fail(exc)
    except Fenced:
        # Taken over by another worker while this one was paused: it runs the session
        # now. Stop here, quietly: no end, no error, nothing written.
        return {"status": SUPERSEDED, "reason": "taken over by another worker"}


WORKDIR_UNSEEN = "workdir_unseen"


def workdir_unseen(session_id: str) -> str | None:
    """Why this host cannot run the session in its workdir (None: it can)."""
    svc = services()
    workdir = Path(svc.session_identity(session_id).workdir)
    if workdir.is_dir():
        return None
    return (
        f"host {svc.settings.hostname} cannot see the session's workdir {workdir}: a worker "
        "runs a session in the directory it was submitted in, so every worker must see that "
        "path (a shared filesystem); start workers where they do, or run it with --local"
    )


async def _run_kind(
    kind: str, session_id: str, generation: int, d: Durable, info: dict[str, Any]
) -> dict[str, Any]:
    """A session of a kind a registered driver runs; without its driver it fails, saying
    so, rather than running as a plain agent."""
    driver = services().session_drivers.get(kind)
    if driver is not None:
        return await driver(d, session_id, info)
    error = (
        f"no driver for sessions of kind {kind!r} in this process: run it with the swarmdeck "
        "command (`swarmdeck worker`, `swarmdeck sessions resume`) or an SDK Swarm"
    )
    ending = Ending("failed", "", error, "internal_error", generation)
    await end_session(session_id, info.get("parent_id") is not None, ending)
    return {"status": "failed", "reason": "internal_error"}


class SessionLoop:
    """One generation of a session's workflow."""

    def __init__(
        self, d: Durable, session_id: str, info: dict[str, Any], may_replay: bool = True
    ) -> None:
        self.d = d
        self.sid = session_id
        # Whether this execution may retrace an earlier one's steps (execution.Execution).
        self.may_replay = may_replay
        self.options: dict[str, Any] = info["options"]
        self.offered: set[str] = set(info["offered"])
        self.generation: int = info["generation"]
        self.budgeted: bool = info["budgeted"]
        self.rollover: int = info["rollover_iterations"]
        self.turn: int = info["turns_done"]
        self.resume_resting: bool = info["resting"]
        self.has_parent: bool = info.get("parent_id") is not None
        self.max_turns = int(self.options.get("max_turns", DEFAULT_MAX_TURNS))
        # Where the current wake-up began: a session that waits between turns has
        # max_turns per wake-up (per message or tick); a one-shot one over its life.
        self.wake_turn = self.turn
        self.one_shot = bool(self.options.get("one_shot", True))
        self.cron: dict[str, Any] | None = self.options.get("cron")
        self.iterations = 0
        self.drains = 0
        self.rejected = 0
        self.last_text = ""
        # When the latest entry of the turn under way was journaled (see ControlTools.wait).
        self.journaled_at = 0.0
        self.control = ControlTools(self)

    @property
    def waits_between_turns(self) -> bool:
        """True when the session idles after the model ends a turn (instead of ending)."""
        return not self.one_shot or self.cron is not None

    async def run(self) -> dict[str, Any]:
        """Turns until the model is done, a limit is hit, or the generation rolls over."""
        if self.resume_resting and self.waits_between_turns:
            # A rolled-over generation: the model had ended its turn, so there is nothing
            # to answer yet; asking it again would cost a turn and skip the cron's schedule.
            if not await self.idle():
                return await self.roll_over()
            self.wake_turn = self.turn
        elif self.resume_resting:
            # A one-shot session resumed after its end could not be recorded: the model
            # had finished, so it ends now, without being asked again.
            self.last_text = await self.d.step("last_text", last_model_text, self.sid)
            return await self.end("completed", None, "model_done")
        while True:
            if self.turn_cap_reached():
                if not self.waits_between_turns:
                    return await self.end("completed", None, "step_cap")
                rolled = await self.rest_after_cap()
                if rolled:
                    return rolled
                continue
            ended = await self.check_budget()
            if ended:
                return ended
            # Turns and tool calls journal themselves in the catalog (see llm_turn).
            reply = await llm_turn(
                self.sid,
                self.turn,
                self.generation,
                TURN_INBOX_KINDS,
                self.status_with_turn,
                self.last_turn(),
            )
            self.iterations += 1
            if "ended" in reply:
                # Ended from outside (cancelled): whoever ended it recorded why.
                return {"status": reply["ended"]["status"], "reason": reply["ended"]["reason"]}
            if "error" in reply:
                return await self.end("failed", reply["error"], "provider_error")
            self.last_text = reply["text"] or self.last_text
            self.journaled_at = reply["at"]
            submitted = await self.run_calls(reply["tool_calls"])
            self.turn += 1
            if submitted:
                return await self.end("completed", None, "submitted")
            if self.rejected >= MAX_RESULT_ATTEMPTS:
                return await self.end("completed", None, "result_malformed")
            if reply["tool_calls"]:
                # Messages that came in meanwhile join the conversation at the next turn
                # (llm_turn takes them in), so a sub-agent hears its parent before it.
                continue
            if "end" in reply:  # stored with the turn (llm_turn's `last`)
                await ring_parent(reply["end"]["parent"])
                return {"status": "completed", "reason": "model_done"}
            if not self.waits_between_turns:
                if await mail_waiting(self.sid, self.turn, self.generation, LAST_TURN_MAIL):
                    continue  # a message arrived while the model finished: the turn takes it
                return await self.end("completed", None, "model_done")
            rolled = await self.rest(idle_stored=self.d.format >= STATUS_WITH_ENTRIES)
            if rolled:
                return rolled

    def last_turn(self) -> LastTurn | None:
        """A one-shot session's end, to be stored with a turn that calls no tool: one
        commit for both."""
        if self.waits_between_turns:
            return None
        ending = Ending("completed", self.last_text, None, "model_done", self.generation)
        return LastTurn(self.has_parent, ending)

    def turn_cap_reached(self) -> bool:
        """max_turns: over a one-shot session's life, per wake-up for one that waits
        between turns (whose lifetime limits are the budgets')."""
        start = self.wake_turn if self.waits_between_turns else 0
        return self.turn - start >= self.max_turns

    async def rest(self, idle_stored: bool = False) -> dict[str, Any] | None:
        """Between wake-ups: roll over when due (returning how), else idle until the next
        (`idle_stored`: the turn that rests stored the status with it)."""
        if self.iterations >= self.rollover or not await self.idle(idle_stored):
            # Due, or quiet cron ticks used up the generation while it idled.
            return await self.roll_over()
        self.wake_turn = self.turn
        return None

    async def rest_after_cap(self) -> dict[str, Any] | None:
        """This wake-up used its turns: say so in the transcript, then rest as if the model
        had ended its turn (the session lives on, for the next message or tick)."""
        text = (
            f"stopped after {self.max_turns} turns in this wake-up (max_turns); "
            "waiting for the next message"
        )
        payload = {"what": CAP_NOTICE, "reason": text, "wait_s": 0, "text": text}
        key = f"cap:g{self.generation}:t{self.turn}"
        await self.d.step("cap", append_event, self.sid, key, "notice", payload)
        return await self.rest()

    async def check_budget(self) -> dict[str, Any] | None:
        """The budgets, checked at every turn boundary."""
        if self.budgeted:
            exceeded = await self.d.step("budget", check_budget, self.sid)
            if exceeded:
                return await self.end("budget_exceeded", exceeded, "budget")
        return None

    def waits_on_journal(self, call: dict[str, Any]) -> bool:
        """Whether this call is a wait of format 4 (ControlTools.wait), whose statuses ride
        with the transcript entries around it."""
        return (
            call["name"] == "wait"
            and call["name"] in self.offered
            and self.d.format >= WAIT_ON_JOURNAL
        )

    def status_with_turn(self, calls: list[dict[str, Any]]) -> str | None:
        """The status stored with a turn (format 4): `waiting` when its first call is such
        a wait; `idle` when it has none and the session rests after it (see rest: it
        rolls over instead once this turn uses up the generation's iterations)."""
        if calls:
            return "waiting" if self.waits_on_journal(calls[0]) else None
        rests = self.waits_between_turns and self.iterations + 1 < self.rollover
        return "idle" if rests and self.d.format >= STATUS_WITH_ENTRIES else None

    def status_with(self, calls: list[dict[str, Any]], n: int) -> str | None:
        """The status stored with the result of call n: `waiting` when such a wait comes
        next, `running` after one (one commit for both, not one each)."""
        if n + 1 < len(calls) and self.waits_on_journal(calls[n + 1]):
            return "waiting"
        return "running" if self.waits_on_journal(calls[n]) else None

    async def run_calls(self, calls: list[dict[str, Any]]) -> bool:
        """Run a turn's tool calls in order; True when a result was accepted."""
        submitted = False
        for n, call in enumerate(calls):
            name = call["name"]
            if name == SUBMIT_RESULT and name in self.offered:
                tries_left = MAX_RESULT_ATTEMPTS - self.rejected - 1
                with tool_span(self.sid, call, "idempotent") as span:
                    outcome = await self.d.step(
                        "submit_result", submit_result, self.sid, self.turn, call, tries_left
                    )
                    span.finished(outcome["content"], outcome["is_error"])
                submitted = submitted or outcome["accepted"]
                self.rejected += 0 if outcome["accepted"] else 1
            elif name in self.offered and self.control.handles(name):
                with tool_span(self.sid, call, self.control.effect(name)) as span:
                    content, is_error = await self.control.run(name, call)
                    span.finished(content, is_error)
                status = self.status_with(calls, n)
                self.journaled_at = await record_result(
                    self.sid, self.turn, call, content, is_error, status
                )
            else:
                status = self.status_with(calls, n)
                self.journaled_at = await tool_call(self.sid, self.turn, call, status)
        return submitted

    async def drain(
        self, kinds: list[str] | None, record: bool = True, wake: bool = False, rang: bool = False
    ) -> list[dict[str, Any]]:
        """Take pending inbox messages (durably, once); `wake` marks a resting session
        running in the same transaction when it takes any; `rang`: the doorbell rang."""
        self.drains += 1
        claim = f"g{self.generation}:d{self.drains}"
        drain = tree.drain_inbox
        if self.d.format < DRAIN_BY_CLAIM:
            return await self.d.step("drain", drain, self.sid, claim, kinds, record, wake, rang)
        if self.may_replay and await self.d.replaying():
            # The first run went past this drain: it took what its claim holds, or nothing.
            return await asyncio.to_thread(tree.taken_under, self.sid, claim)
        once = True  # a rerun after the claim committed gets what the claim took, no more
        args = (self.sid, claim, kinds, record, wake, rang, once)
        return await asyncio.to_thread(drain, *args)

    async def idle(self, idle_stored: bool = False) -> bool:
        """Wait for a message or the next cron tick that wakes the model; True then, False
        when quiet ticks used up the generation (the caller rolls over). `idle_stored`: the
        status is `idle` already (stored with the turn that rests).

        A tick whose check finds nothing is quiet: no model call, no transcript entry, and
        the session stays idle. It still counts as an iteration, since its steps fill this
        generation's log like a turn's do.
        """
        if not idle_stored:
            await self.d.step("status", set_status, self.sid, "idle")
        ring_first = self.d.format >= RING_FIRST
        look = not (idle_stored and ring_first)
        rang = False
        while True:
            taken = await self.drain(None, wake=True, rang=rang) if look else []
            look, rang = True, False
            if taken and all(m["kind"] == COMPACT_REQUEST_KIND for m in taken):
                # Only a request to compact: compact now and rest on, without a model turn.
                await compact_between_turns(self.sid, self.turn)
                await self.d.step("status", set_status, self.sid, "idle")
                continue
            if taken:
                # They came while the session was busy, maybe in the middle of a burst
                # (children finishing together): let the rest land, take them in this turn.
                # A person's message alone is answered at once (format 3): only children
                # finish in bursts.
                if self.d.format < PERSON_WAKES_AT_ONCE or _from_children(taken):
                    await self.collect_batch()
                    await self.drain(None)
                if self.d.format >= STATUS_WITH_ENTRIES:
                    return True  # the drain that took them marked the session running
                break
            now = await self.d.now() if self.cron or not ring_first else 0.0
            if self.cron and now >= self.cron["next_at"]:
                if await self.tick_cron(now):
                    break
                self.iterations += 1
                if self.iterations >= self.rollover:
                    return False
                continue
            timeout = self.cron["next_at"] - now if self.cron else IDLE_RECV_SECONDS
            rang = await self.d.recv("doorbell", timeout) is not None
            if rang and self.d.format < PERSON_WAKES_AT_ONCE:
                await self.collect_batch()
            # Format 3 drains at once on a ring; the batch waits only for children's news.
        await self.d.step("status", set_status, self.sid, "running")
        return True

    async def collect_batch(self) -> None:
        """Let a burst of messages land before draining them all in one turn: until the
        doorbell stays quiet for a gap, or the cap has passed since the wake-up.

        The cap is measured on the (recorded) clock: counting rings instead would end a
        burst after eight rings however fast they came, and stale rings of messages
        already taken would use it up at once.
        """
        started = await self.d.now()
        while await self.d.recv("doorbell", BATCH_GAP_SECONDS) is not None:
            if await self.d.now() - started >= BATCH_MAX_SECONDS:
                return

    async def tick_cron(self, now: float) -> bool:
        """Fire the cron: run its check, if it has one; unless the check found nothing, a
        timer message in the transcript wakes the model. True when it does.

        Ticks missed while the session was busy or down fire once, not one by one.
        """
        assert self.cron is not None
        fired_at, interval = self.cron["next_at"], self.cron["interval"]
        missed = int((now - fired_at) // interval)
        self.cron = {**self.cron, "next_at": fired_at + (missed + 1) * interval}
        found = None
        if self.cron.get("check"):
            found = await self.d.step("cron_check", run_check, self.sid, self.cron, fired_at)
            if found["quiet"]:
                self.cron["quiet_ticks"] = int(self.cron.get("quiet_ticks", 0)) + 1
                await self.d.step("cron_next", tree.set_cron, self.sid, self.cron)
                return False
        await self.d.step("cron_next", tree.set_cron, self.sid, self.cron)
        text = f"cron tick: {self.cron['reason'] or 'recurring wake-up'}"
        if found is not None:
            text += f"\n{self.cron['check']} found:\n{found['content']}"
        await self.d.step(
            "timer", append_event, self.sid, f"cron:{fired_at}", "timer", {"text": text}
        )
        return True

    async def roll_over(self) -> dict[str, Any]:
        """Continue in a fresh workflow; the catalog keeps the whole history. A system agent
        also drops the engine history of its generations before this one."""
        if self.options.get("system_agent"):
            await self.d.step("drop_history", drop_old_generations, self.sid, self.generation)
        await self.d.restart_as_new(self.sid, self.generation)
        return {"status": ROLLED_OVER, "reason": "rollover"}

    async def end(self, status: str, error: str | None, reason: str) -> dict[str, Any]:
        """Record how the session ended and tell its parent.

        Not an engine step: every part of it is idempotent, and nothing follows it but the
        workflow's return, so a rerun after a crash repeats nothing and decides nothing.
        """
        ending = Ending(status, self.last_text, error, reason, self.generation)
        await end_session(self.sid, self.has_parent, ending)
        return {"status": status, "reason": reason}

    async def fail(self, exc: Exception) -> dict[str, Any]:
        """End the session `failed` after an unexpected error, whatever it was.

        When recording the end fails too (the store refused the final text, say), the end
        is recorded without the text: a session must never be left `running` with no
        workflow. `sessions resume` then runs it again.
        """
        error = describe_error(exc)
        try:
            return await self.end("failed", error, "internal_error")
        except Fenced:
            raise  # another execution owns the session: it records the end
        except Exception as again:
            self.last_text = ""
            why = f"{error}; recorded without its final text: {describe_error(again)}"
            return await self.end("failed", why, "internal_error")


def _from_children(taken: list[dict[str, Any]]) -> bool:
    """Whether children's news is among the messages taken (they come in bursts)."""
    return any(m["kind"] == "child_update" for m in taken)
