"""A swarm as the planner contract prints it: one `swarmdeck.swarm` object, read from the
coordinator's journal and the usage of its tree."""

from __future__ import annotations

import time
from typing import Any

from swarmdeck.catalog.catalog import Catalog
from swarmdeck.catalog.records import SessionRecord, UsageTotals
from swarmdeck.dispatch.verdict import Tokens
from swarmdeck.runtime.session import KIND_OPTION
from swarmdeck.swarm.phases import EVENT_KIND
from swarmdeck.swarm.spec import SPEC_OPTION, SWARM_KIND

REPORT_TYPE = "swarmdeck.swarm"
STARTED_TYPE = "swarmdeck.swarm_started"
# 1: the first version of the swarm's object.
SCHEMA_VERSION = "1"
EXIT_COMPLETED = 0
EXIT_NOT_COMPLETED = 3
# The fields of the object and of each member (docs/swarm.md lists them all).
REPORT_FIELDS = (
    "type", "schema_version", "session_id", "plan", "members", "result", "verdict", "tokens",
    "cost_usd", "duration_s",
)  # fmt: skip
MEMBER_FIELDS = (
    "role", "task", "model", "session_id", "verdict", "result", "attempts", "tokens",
    "cost_usd", "worktree",
)  # fmt: skip
VERDICTS = ("completed", "partial", "error", "malformed")


def is_swarm(record: SessionRecord) -> bool:
    """True for a swarm's coordinator session."""
    return record.options.get(KIND_OPTION) == SWARM_KIND


def started_object(record: SessionRecord) -> dict[str, Any]:
    """The `swarmdeck.swarm_started` object: a swarm's coordinator exists (its session id
    is what `session_wait` takes)."""
    team = (record.options.get(SPEC_OPTION) or {}).get("team") or {}
    return {
        "type": STARTED_TYPE,
        "schema_version": SCHEMA_VERSION,
        "session_id": record.id,
        "team": team.get("name"),
        "workdir": record.workdir,
        "model": record.model,
    }


def _tokens(usage: UsageTotals) -> dict[str, int]:
    return Tokens(**usage.tokens()).model_dump()


def _attempt(key: str) -> int:
    return int(key.rsplit(":", 1)[-1])


def _worktree(spawn: dict[str, Any] | None) -> dict[str, Any] | None:
    from swarmdeck.workspace.worktrees import Worktree, merge_command

    tree = (spawn or {}).get("worktree")
    if not tree:
        return None
    made = Worktree(tree["path"], tree["repo"], tree["base"], spawn["workdir"], 0.0)  # type: ignore[index]
    return {**tree, "merge": merge_command(made)}


def build_report(catalog: Catalog, session_id: str, live: bool = False) -> dict[str, Any]:
    """The swarm's object; `live` adds each member's session status and turns (for the
    progress table; not part of the contract)."""
    record = catalog.get_session(session_id)
    journal = {e.key: e.payload for e in catalog.events(session_id, kinds=[EVENT_KIND])}
    plan = journal.get("swarm:plan")
    done = journal.get("swarm:result")
    ended = record.terminal
    planned = plan["members"] if plan else []
    members = [_member(catalog, journal, m, live, ended) for m in planned]
    tree = [session_id, *catalog.descendant_ids(session_id)]
    usage = catalog.usage_totals(tree)
    start = (journal.get("swarm:start") or {}).get("at", record.created_at)
    end = done["at"] if done else (record.updated_at if record.terminal else time.time())
    verdict = done["verdict"] if done else ("error" if record.terminal else None)
    error = done["error"] if done else (record.error if record.terminal else None)
    return {
        "type": REPORT_TYPE,
        "schema_version": SCHEMA_VERSION,
        "session_id": session_id,
        "plan": {
            "source": plan["source"] if plan else None,
            "members": [
                {k: m[k] for k in ("role", "task", "mode", "model", "agent", "depends_on")}
                for m in (plan["members"] if plan else [])
            ],
            "dropped": plan["dropped"] if plan else [],
            "error": None if plan else error,
        },
        "members": members,
        "result": {"summary": done["summary"], "merged_by": done["merged_by"]} if done else None,
        "verdict": verdict,
        "tokens": _tokens(usage),
        "cost_usd": usage.cost_usd,
        "duration_s": round(max(0.0, end - start), 3),
        **({"status": record.status, "error": error} if live else {}),
    }


def _member(
    catalog: Catalog,
    journal: dict[str, Any],
    planned: dict[str, Any],
    live: bool,
    swarm_ended: bool,
) -> dict[str, Any]:
    index = planned["index"]
    spawns = sorted(
        ((k, p) for k, p in journal.items() if k.startswith(f"swarm:spawn:{index}:")),
        key=lambda kp: _attempt(kp[0]),
    )
    last = spawns[-1][1] if spawns else None
    end = journal.get(f"swarm:end:{index}:{last['attempt']}") if last else None
    end = end or journal.get(f"swarm:end:{index}:skip")
    ids = [p["session_id"] for _, p in spawns if p["session_id"]]
    usage = catalog.usage_totals(ids) if ids else UsageTotals()
    doc: dict[str, Any] = {
        "role": planned["role"],
        "task": planned["task"],
        "model": (end or last or planned)["model"],
        "session_id": last["session_id"] if last else None,
        # A swarm that ended without an outcome for it (cancelled): the member did not
        # complete. While the swarm runs, a member without one has none yet.
        "verdict": end["verdict"] if end else ("error" if swarm_ended else None),
        "result": end["result"] if end else None,
        "attempts": len(spawns),
        "tokens": _tokens(usage),
        "cost_usd": usage.cost_usd,
        "worktree": _worktree(last) if planned["mode"] == "code" else None,
    }
    if live:
        status = "waiting"
        if end is not None:
            status = end["verdict"] if end["session_id"] else "skipped"
        elif last is not None:
            found = catalog.find_session(last["session_id"])
            status = found.status if found else "pending"
        doc.update(
            mode=planned["mode"],
            status=status,
            turns=usage.turns,
            reason=end.get("reason") if end else None,
            assigned_role=(last or {}).get("assigned_role"),
        )
    return doc


def exit_code(report: dict[str, Any]) -> int:
    """As fanout: 0 when the swarm (every member) completed, 3 otherwise."""
    return EXIT_COMPLETED if report["verdict"] == "completed" else EXIT_NOT_COMPLETED
