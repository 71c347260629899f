"""The budgets of a session and its ancestors, checked at every turn boundary: a warning at
80 % of one (once), the end of the session when one is spent."""

from __future__ import annotations

from dataclasses import dataclass

from swarmdeck.catalog.records import (
    BUDGET_NOTE_KIND,
    BUDGET_WARNED_OPTION,
    BUDGET_WARNING_KIND,
    SessionRecord,
    UsageTotals,
)
from swarmdeck.runtime.crashpoints import crash_point
from swarmdeck.runtime.services import services

BUDGET_KEYS = ("max_tokens", "max_cost", "max_turns_total")
# A budget warns when this share of it is spent, once per budget (and limit).
WARN_SHARE = 0.8
# The transcript kinds of a warning: the record in the budget owner's transcript (what
# `run`, `dispatch`, `sessions ls` and the TUI show), and the note in each warned session's
# conversation, which the model reads at its next turn so that it can wrap up.
WARNING_KIND = BUDGET_WARNING_KIND
NOTE_KIND = BUDGET_NOTE_KIND
# The session option that marks a warned session in `sessions ls` and the TUI.
WARNED_OPTION = BUDGET_WARNED_OPTION
# What a budget counts, in words.
UNITS = {"max_tokens": "tokens", "max_cost": "USD", "max_turns_total": "turns"}


@dataclass(frozen=True)
class Spend:
    """What is spent of one budget of one session (over its subtree)."""

    owner: str
    key: str
    spent: float
    limit: float

    @property
    def share(self) -> float:
        """The spent share of the limit."""
        return self.spent / self.limit if self.limit else 1.0

    def amount(self) -> str:
        """`8,200 of 10,000 tokens`, `$0.81 of $1`, `4 of 5 turns`."""
        if self.key == "max_cost":
            return f"${self.spent:,.4g} of ${self.limit:,.4g}"
        return f"{self.spent:,.0f} of {self.limit:,.0f} {UNITS[self.key]}"

    def whose(self, session_id: str) -> str:
        """`this session's`, or `ancestor ID's`: whose budget it is, from one session."""
        return "this session's" if self.owner == session_id else f"ancestor {self.owner}'s"


def with_ancestors(record: SessionRecord) -> list[SessionRecord]:
    """The session, its parent, grandparent... up to the root: whose budgets cover it."""
    catalog = services().catalog
    chain = [record]
    while chain[-1].parent_id:
        chain.append(catalog.get_session(chain[-1].parent_id))
    return chain


def budget_of(record: SessionRecord) -> dict[str, float]:
    """The budgets set on this session (not its ancestors'), by key."""
    budget = record.options.get("budget") or {}
    return {k: float(v) for k, v in budget.items() if k in BUDGET_KEYS and v is not None}


def spent_of(used: UsageTotals) -> dict[str, float]:
    """What usage spends of each kind of budget."""
    return {
        # A token read from a prompt cache is still a token of the prompt.
        "max_tokens": used.input + used.cache_read + used.cache_write + used.output,
        "max_cost": used.cost_usd or 0.0,
        "max_turns_total": used.turns,
    }


def spends(session_id: str) -> list[Spend]:
    """Every budget covering the session, with what its owner's subtree spent of it.

    A child draws from its parent's budget: an ancestor's budget covers its whole subtree.
    """
    catalog = services().catalog
    found: list[Spend] = []
    for record in with_ancestors(catalog.get_session(session_id)):
        budget = budget_of(record)
        if not budget:
            continue
        spent = spent_of(catalog.usage_totals([record.id, *catalog.descendant_ids(record.id)]))
        found.extend(Spend(record.id, key, spent[key], limit) for key, limit in budget.items())
    return found


def check_budget(session_id: str) -> str | None:
    """None while the session and every ancestor are within budget; else why not. A budget
    80 % spent warns first, once (see warn)."""
    covering = spends(session_id)
    for spend in covering:
        if spend.spent >= spend.limit:
            owner = "its" if spend.owner == session_id else f"ancestor {spend.owner}'s"
            return f"budget exceeded: {spend.key} {spend.spent:g} of {owner} limit {spend.limit:g}"
    for spend in covering:
        if spend.share >= WARN_SHARE:
            warn(session_id, spend)
    return None


def warn(session_id: str, spend: Spend) -> None:
    """Say once that a budget is 80 % spent: in its owner's transcript (for whoever follows
    the run) and in this session's conversation (for its model). Idempotent by key: a rerun,
    and every later turn boundary, finds both written. A new limit (a resume's fresh
    allowance) warns again."""
    svc = services()
    catalog = svc.catalog
    tag = f"{spend.owner}:{spend.key}:{spend.limit:g}"
    if svc.journal(session_id).get(f"{NOTE_KIND}:{tag}") is not None:
        return  # warned already (the note is written last), as of the turn's refresh
    percent = int(spend.share * 100)
    line = f"{percent}% of {spend.whose(spend.owner)} {spend.key} budget spent: {spend.amount()}"
    record = {"owner": spend.owner, "key": spend.key, "spent": spend.spent}
    record |= {"limit": spend.limit, "percent": percent, "text": line}
    catalog.append_event(spend.owner, f"{WARNING_KIND}:{tag}", WARNING_KIND, record)
    _mark(spend.owner, spend.key, percent)
    note = (
        f"[budget] {percent}% of {spend.whose(session_id)} {spend.key} budget is spent "
        f"({spend.amount()}). The run stops when it is spent, at a turn boundary. Wrap up "
        "now: finish the essential part and give your result with what you have."
    )
    payload = {**record, "text": note}
    crash_point("budget.warned")
    if session_id != spend.owner:
        _mark(session_id, spend.key, percent)
    catalog.append_event(session_id, f"{NOTE_KIND}:{tag}", NOTE_KIND, payload)


def _mark(session_id: str, key: str, percent: int) -> None:
    """Mark the session as warned (its row in `sessions ls` and the TUI shows it), once
    per kind of budget: a rerun after a crash finds it marked."""
    catalog = services().catalog
    options = dict(catalog.get_session(session_id).options)
    if str(options.get(WARNED_OPTION) or "").startswith(f"{key} "):
        return
    options[WARNED_OPTION] = f"{key} {percent}%"
    catalog.update_session(session_id, options=options)
