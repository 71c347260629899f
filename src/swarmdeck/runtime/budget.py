"""The budgets of a session and its ancestors, checked at every turn boundary."""

from __future__ import annotations

from swarmdeck.catalog.records import SessionRecord
from swarmdeck.runtime.services import services

BUDGET_KEYS = ("max_tokens", "max_cost", "max_turns_total")


def with_ancestors(record: SessionRecord) -> list[SessionRecord]:
    """The session, its parent, grandparent... up to the root: whose budgets cover it."""
    catalog = services().catalog
    chain = [record]
    while chain[-1].parent_id:
        chain.append(catalog.get_session(chain[-1].parent_id))
    return chain


def budget_of(record: SessionRecord) -> dict[str, float]:
    budget = record.options.get("budget") or {}
    return {k: float(v) for k, v in budget.items() if k in BUDGET_KEYS and v is not None}


def check_budget(session_id: str) -> str | None:
    """None while the session and every ancestor are within budget; else why not.

    A child draws from its parent's budget: an ancestor's budget covers its whole subtree.
    """
    catalog = services().catalog
    for record in with_ancestors(catalog.get_session(session_id)):
        budget, sid = budget_of(record), record.id
        if not budget:
            continue
        used = catalog.usage_totals([sid, *catalog.descendant_ids(sid)])
        spent = {
            # A token read from a prompt cache is still a token of the prompt.
            "max_tokens": used.input + used.cache_read + used.cache_write + used.output,
            "max_cost": used.cost_usd or 0.0,
            "max_turns_total": used.turns,
        }
        for key, limit in budget.items():
            if spent[key] >= limit:
                owner = "its" if sid == session_id else f"ancestor {sid}'s"
                return f"budget exceeded: {key} {spent[key]:g} of {owner} limit {limit:g}"
    return None
