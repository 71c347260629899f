"""The coordinator: a durable session that runs a swarm's four journaled phases.

decompose  one LLM turn whose plan must validate (corrected like a result), or the plan given
spawn      one one-shot child session per member, in its dispatch mode, created under an id
           derived from the plan, so a crash never spawns a member twice
wait       on the batched child updates in the inbox (the doorbell wakes it; no polling),
           with durable member timeouts, retry delays and the swarm's own timeout
aggregate  one LLM turn over the members' structured results, or a deterministic merge

This is workflow code: between durable calls it is deterministic, and every value it
decides on comes from a recorded step, a journaled turn or the recorded clock. So a replay
after a crash takes the path the first run took: no plan is asked for twice, no member
spawned twice, no finished member run again.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from swarmdeck.catalog.fence import Fenced
from swarmdeck.runtime import tree
from swarmdeck.runtime.crashpoints import crash_point
from swarmdeck.runtime.durable import Durable
from swarmdeck.runtime.events import append_event
from swarmdeck.runtime.status import Ending, describe_error, end_session
from swarmdeck.runtime.turn import llm_turn
from swarmdeck.swarm import members, phases, planning
from swarmdeck.swarm.merge import merge
from swarmdeck.swarm.prompts import aggregate_message
from swarmdeck.swarm.spec import SPEC_OPTION, SwarmSpec

MAX_PLAN_ATTEMPTS = 3
# A person may write to the coordinator while it plans or merges; members' updates are
# taken by the wait phase itself.
TURN_INBOX = ["user"]
MIN_WAIT_SECONDS = 0.001


@dataclass
class MemberRun:
    """One planned member through its attempts."""

    member: dict[str, Any]
    attempt: int = -1
    series_start: int = 0
    session_id: str | None = None
    state: str = "waiting"  # waiting, running, retry, done
    deadline: float = math.inf
    retry_at: float = 0.0
    failed_before: str | None = None
    reassigned: bool = False
    final: dict[str, Any] | None = None
    outcomes: list[dict[str, Any]] = field(default_factory=list)

    @property
    def role(self) -> str:
        """The planned role."""
        return str(self.member["role"])


def _failure(outcome: dict[str, Any]) -> str:
    return f"{outcome['verdict']}: {outcome.get('reason') or 'no reason recorded'}"


class Coordinator:
    """One run of a swarm's coordinator workflow."""

    def __init__(self, d: Durable, session_id: str, info: dict[str, Any]) -> None:
        self.d = d
        self.sid = session_id
        self.generation: int = info["generation"]
        self.has_parent = info.get("parent_id") is not None
        self.spec = SwarmSpec.from_options(info["options"][SPEC_OPTION])
        self.turn: int = info["turns_done"]
        self.drains = 0
        self.looked_for_ended = False
        self.deadline = math.inf
        self.runs: list[MemberRun] = []
        self.peers: list[list[str]] = []
        self.aborted: str | None = None
        self.timed_out = False

    async def run(self) -> dict[str, Any]:
        """The four phases, to the swarm's end."""
        started = await self.d.step("swarm_start", phases.mark_start, self.sid)
        self.deadline = started + self.spec.max_timeout
        if self.generation > 0:
            # A later generation (`sessions resume` of a swarm that failed): what an earlier
            # one stored holds, and its turns are not asked again (their indexes are past).
            done = await self.d.step("stored", phases.stored_entry, self.sid, "swarm:result")
            if done is not None:
                return await self.finish(
                    done["verdict"], done["error"], done["summary"], done["merged_by"]
                )
        planned = await self.decompose()
        if "ended" in planned:
            return planned["ended"]
        plan = planned.get("plan")
        if plan is None:
            verdict = planned["verdict"]
            return await self.finish(verdict, planned["error"], "", "none")
        crash_point("swarm.planned")
        await self.run_members(plan)
        return await self.aggregate(plan)

    # -- decompose ------------------------------------------------------------------------

    async def decompose(self) -> dict[str, Any]:
        """{plan}, {verdict, error} when there is none, or {ended} (cancelled meanwhile)."""
        if self.generation > 0:
            stored = await self.d.step("stored", phases.stored_entry, self.sid, "swarm:plan")
            if stored is not None:
                return {"plan": stored}
        if self.spec.plan is not None:
            given = await self.d.step("plan", planning.accept_given_plan, self.sid)
            if "error" in given:
                return {"verdict": "malformed", "error": f"the plan file: {given['error']}"}
            return {"plan": given["plan"]}
        error = "no plan was submitted"
        for attempt in range(MAX_PLAN_ATTEMPTS):
            reply = await llm_turn(self.sid, self.turn, self.generation, TURN_INBOX)
            if "ended" in reply:
                return {"ended": {"status": reply["ended"]["status"], "reason": "cancelled"}}
            if "error" in reply:
                return {"verdict": "error", "error": f"the coordinator's model: {reply['error']}"}
            tries_left = MAX_PLAN_ATTEMPTS - attempt - 1
            checked = await self.d.step(
                "plan_check", planning.check_plan_turn, self.sid, self.turn, reply, tries_left
            )
            self.turn += 1
            if checked["plan"] is not None:
                return {"plan": checked["plan"]}
            error = checked["error"]
        return {"verdict": "malformed", "error": f"the plan stayed invalid: {error}"}

    # -- spawn and wait -------------------------------------------------------------------

    async def run_members(self, plan: dict[str, Any]) -> None:
        """Start members as their dependencies allow; wait for their ends; retry, reassign
        or abort by the team's policy; until every member is done or the swarm times out."""
        self.runs = [MemberRun(dict(m)) for m in plan["members"]]
        self.peers = [
            [m["role"], m["mode"], members.member_session_id(self.sid, m["index"], m["role"], 0)]
            for m in plan["members"]
        ]
        while True:
            now = await self.d.now()
            if now >= self.deadline:
                await self.time_out()
                return
            await self.start_ready(now)
            if self.aborted or all(r.state == "done" for r in self.runs):
                return
            if self.generation > 0 and not self.looked_for_ended:
                # An earlier generation may have taken some members' end updates already:
                # those members' sessions say they ended.
                running = [r.session_id for r in self.runs if r.state == "running"]
                gone = set(await self.d.step("ended", phases.ended_sessions, running))
                self.looked_for_ended = True
                for run in self.runs:
                    if run.state == "running" and run.session_id in gone:
                        await self.member_ended(run, now, timed_out=False)
                continue
            wake = min(
                self.deadline,
                *(r.deadline for r in self.runs if r.state == "running"),
                *(r.retry_at for r in self.runs if r.state == "retry"),
            )
            await self.d.recv("doorbell", max(MIN_WAIT_SECONDS, wake - now))
            ended = await self.ended_members()
            now = await self.d.now()
            for run in self.runs:
                if run.state != "running":
                    continue
                if run.session_id in ended:
                    await self.member_ended(run, now, timed_out=False)
                elif run.deadline <= now:
                    await self.expire(run, now)
                if self.aborted:
                    return

    def _deps(self, run: MemberRun) -> list[MemberRun]:
        by_role = {r.role: r for r in self.runs}
        return [by_role[d] for d in run.member["depends_on"]]

    async def start_ready(self, now: float) -> None:
        """Start (or skip) every member whose turn has come; until nothing changes."""
        changed = True
        while changed:
            changed = False
            for run in self.runs:
                if run.state == "retry" and run.retry_at <= now:
                    await self.start_attempt(run, now)
                    changed = True
                if run.state != "waiting":
                    continue
                deps = self._deps(run)
                if any(d.state != "done" for d in deps):
                    continue
                failed = [d.role for d in deps if d.final and d.final["verdict"] != "completed"]
                if failed:
                    why = f"not started: it depends on {', '.join(failed)}, which did not complete"
                    await self.skip(run, why)
                else:
                    await self.start_attempt(run, now)
                changed = True

    async def start_attempt(self, run: MemberRun, now: float) -> None:
        """Create the member's session for its next attempt and start its workflow."""
        run.attempt += 1
        dependencies = [d.final for d in self._deps(run) if d.final]
        spawned = await self.d.step(
            "spawn",
            members.spawn_member,
            self.sid,
            run.member,
            run.attempt,
            run.failed_before,
            dependencies,
            self.peers,
        )
        if spawned.get("error"):
            run.final = await self.d.step(
                "member_end",
                members.skip_member,
                self.sid,
                run.member,
                spawned["error"],
                run.attempt,
            )
            run.outcomes.append(run.final)
            run.session_id, run.state = None, "done"
            await self.recover(run, run.final, now)
            return
        crash_point("swarm.spawned")
        await self.d.start_child(spawned["session_id"])
        run.session_id = spawned["session_id"]
        run.state = "running"
        timeout = run.member.get("timeout") or self.spec.member_timeout
        run.deadline = now + timeout if timeout else math.inf

    async def ended_members(self) -> set[str]:
        """The members whose end is in the inbox (each child's end posts one update)."""
        self.drains += 1
        claim = f"g{self.generation}:w{self.drains}"
        taken = await self.d.step(
            "drain", tree.drain_inbox, self.sid, claim, ["child_update"], False
        )
        return {str(item["payload"].get("child_id")) for item in taken}

    async def member_ended(
        self, run: MemberRun, now: float, timed_out: bool, why: str | None = None
    ) -> None:
        """Classify the attempt; a completed member is done, a failed one recovers."""
        assert run.session_id is not None
        outcome = await self.d.step(
            "member_end",
            members.member_outcome,
            self.sid,
            run.member,
            run.attempt,
            run.session_id,
            timed_out,
            why,
        )
        crash_point("swarm.member_done")
        run.outcomes.append(outcome)
        run.state = "done"
        run.final = outcome
        if outcome["verdict"] != "completed" and not (self.timed_out or self.aborted):
            await self.recover(run, outcome, now)

    async def expire(self, run: MemberRun, now: float) -> None:
        """A member past its timeout: cancel it (unless it just ended by itself)."""
        timeout = run.member.get("timeout") or self.spec.member_timeout
        why = f"its timeout of {timeout:g} s ran out"
        cancelled = await self.d.step(
            "cancel", tree.cancel_tree, run.session_id, f"swarm: {why}", False
        )
        await self.member_ended(run, now, timed_out=bool(cancelled), why=why if cancelled else None)

    async def recover(self, run: MemberRun, outcome: dict[str, Any], now: float) -> None:
        """The team's recovery policy: retry after a durable delay, then abort, continue or
        reassign."""
        policy = self.spec.recovery
        which = f" ({run.session_id})" if run.session_id else ""
        run.failed_before = f"attempt {run.attempt + 1}{which} ended {_failure(outcome)}"
        # The delay counts from when the attempt's end was recorded, which is later than
        # `now` (taken before the ended members were read); entries stored before
        # `ended_at` existed count from `now`.
        retry_at = max(now, outcome.get("ended_at", now)) + policy.retry_delay
        if run.attempt - run.series_start < policy.max_retries:
            run.state, run.retry_at, run.final = "retry", retry_at, None
            return
        if policy.on_all_failed == "reassign" and not run.reassigned:
            moved = await self.d.step("reassign", members.reassigned, self.sid, run.member)
            run.reassigned = True
            if moved is not None:
                run.member = moved
                run.series_start = run.attempt + 1
                run.state, run.retry_at, run.final = "retry", retry_at, None
                return
        if policy.on_all_failed == "abort":
            attempts = run.attempt - run.series_start + 1
            self.aborted = (
                f"{run.role} failed all {attempts} attempt(s) ({_failure(outcome)}), and the "
                "team's recovery policy is abort"
            )
            await self.stop_all(f"cancelled: the swarm aborted ({run.role} failed)", now)

    async def stop_all(self, why: str, now: float) -> None:
        """Cancel every running member, and skip every one not started."""
        for run in self.runs:
            if run.state == "running":
                await self.d.step("cancel", tree.cancel_tree, run.session_id, why, False)
                await self.member_ended(run, now, timed_out=False, why=why)
            elif run.state in ("waiting", "retry"):
                await self.skip(run, f"not started: {why.removeprefix('cancelled: ')}")

    async def time_out(self) -> None:
        """The swarm's max_timeout ran out: members still running end timed out."""
        self.timed_out = True
        now = await self.d.now()
        why = f"the swarm's max_timeout of {self.spec.max_timeout:g} s ran out"
        for run in self.runs:
            if run.state == "running":
                cancelled = await self.d.step(
                    "cancel", tree.cancel_tree, run.session_id, f"swarm: {why}", False
                )
                await self.member_ended(run, now, timed_out=bool(cancelled), why=why)
            elif run.state in ("waiting", "retry"):
                await self.skip(run, f"not started: {why}")

    async def skip(self, run: MemberRun, why: str) -> None:
        """A member that will not run."""
        run.final = await self.d.step("member_skip", members.skip_member, self.sid, run.member, why)
        run.state = "done"

    # -- aggregate ------------------------------------------------------------------------

    async def aggregate(self, plan: dict[str, Any]) -> dict[str, Any]:
        """One LLM turn over the members' results; a deterministic merge when it fails."""
        outcomes = [r.final for r in self.runs if r.final is not None]
        done = [o for o in outcomes if o["verdict"] == "completed"]
        if len(done) == len(outcomes):
            verdict = "completed"
        elif self.aborted or not done:
            verdict = "error"
        else:
            verdict = "partial"
        if self.aborted:
            error: str | None = self.aborted
        elif self.timed_out:
            error = f"the swarm's max_timeout of {self.spec.max_timeout:g} s ran out"
        else:
            error = None if done else "no member completed"
        if verdict == "error":
            text = merge(outcomes, plan["dropped"], error or "the swarm failed")
            return await self.finish(verdict, error, text, "merge")
        # What members wrote to the coordinator joins the conversation before the results.
        self.drains += 1
        claim = f"g{self.generation}:w{self.drains}"
        await self.d.step("drain", tree.drain_inbox, self.sid, claim, TURN_INBOX, True)
        message = aggregate_message(outcomes, plan["dropped"])
        key = f"{phases.OWN_INPUT_KEY}aggregate"
        await self.d.step("aggregate", append_event, self.sid, key, "user", {"text": message})
        crash_point("swarm.aggregating")
        reply = await llm_turn(self.sid, self.turn, self.generation, TURN_INBOX)
        self.turn += 1
        if "ended" in reply:
            return {"status": reply["ended"]["status"], "reason": "cancelled"}
        text = "" if "error" in reply else (reply.get("text") or "").strip()
        if text:
            return await self.finish(verdict, error, text, "model")
        why = f"its turn failed: {reply['error']}" if "error" in reply else "its answer was empty"
        return await self.finish(verdict, error, merge(outcomes, plan["dropped"], why), "merge")

    async def finish(
        self, verdict: str, error: str | None, text: str, merged_by: str
    ) -> dict[str, Any]:
        """Record the swarm's verdict and merged result, end the session, tell its parent."""
        doc = {"verdict": verdict, "summary": text, "merged_by": merged_by, "error": error}
        await self.d.step("swarm_result", phases.record_swarm_result, self.sid, doc)
        status = "completed" if verdict in ("completed", "partial") else "failed"
        failure = error if status == "failed" else None
        ending = Ending(status, text, failure, f"swarm_{verdict}", self.generation)
        await end_session(self.sid, self.has_parent, ending)
        return {"status": status, "reason": ending.reason}


async def run_swarm(d: Durable, session_id: str, info: dict[str, Any]) -> dict[str, Any]:
    """The session driver of swarm coordinators (registered for the `swarm` kind)."""
    coordinator = Coordinator(d, session_id, info)
    try:
        return await coordinator.run()
    except Fenced:
        raise  # another execution owns the swarm now: it records the end (run_session)
    except Exception as exc:
        # A bug, or a step that failed for good: end where everyone can see it, never
        # leave the swarm `running` with no workflow behind it.
        error = describe_error(exc)
        ending = Ending("failed", "", error, "internal_error", coordinator.generation)
        await end_session(session_id, coordinator.has_parent, ending)
        return {"status": "failed", "reason": "internal_error"}
