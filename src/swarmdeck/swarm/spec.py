"""What a swarm is made of, fixed when it starts and kept in its coordinator's options, so
every replay and every worker that takes it over sees the same team, limits and routing."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from swarmdeck.swarm.routing import Routing
from swarmdeck.swarm.team import RecoveryPolicy, Team

# The session kind of a coordinator (runtime/session.py runs it with the swarm's driver).
SWARM_KIND = "swarm"
# The coordinator's session mode: only submit_plan is offered in it.
SWARM_MODE = "swarm"
SPEC_OPTION = "swarm"


@dataclass
class SwarmSpec:
    """A swarm's fixed parts."""

    task: str
    routing: Routing
    max_members: int
    max_timeout: float
    recovery: RecoveryPolicy = field(default_factory=RecoveryPolicy)
    team: Team | None = None
    team_source: str | None = None
    # A plan given up front (`--plan FILE`): the decompose phase is skipped.
    plan: Any = None
    member_timeout: float | None = None
    # Why code members cannot work in this workdir (no clean git repository), or None.
    code_refusal: str | None = None
    no_sandbox: bool = False
    plugins: list[str] = field(default_factory=list)

    @property
    def coordinator_model(self) -> str:
        """The coordinator's own model."""
        return self.routing.coordinator_model

    def as_options(self) -> dict[str, Any]:
        """Plain data for the coordinator session's options."""
        return {
            "task": self.task,
            "routing": self.routing.as_dict(),
            "max_members": self.max_members,
            "max_timeout": self.max_timeout,
            "recovery": self.recovery.model_dump(mode="json"),
            "team": self.team.model_dump(mode="json") if self.team else None,
            "team_source": self.team_source,
            "plan": self.plan,
            "member_timeout": self.member_timeout,
            "code_refusal": self.code_refusal,
            "no_sandbox": self.no_sandbox,
            "plugins": list(self.plugins),
        }

    @classmethod
    def from_options(cls, doc: dict[str, Any]) -> SwarmSpec:
        """Back from a coordinator's options."""
        return cls(
            task=doc["task"],
            routing=Routing.from_dict(doc["routing"]),
            max_members=int(doc["max_members"]),
            max_timeout=float(doc["max_timeout"]),
            recovery=RecoveryPolicy.model_validate(doc.get("recovery") or {}),
            team=Team.model_validate(doc["team"]) if doc.get("team") else None,
            team_source=doc.get("team_source"),
            plan=doc.get("plan"),
            member_timeout=doc.get("member_timeout"),
            code_refusal=doc.get("code_refusal"),
            no_sandbox=bool(doc.get("no_sandbox")),
            plugins=list(doc.get("plugins") or []),
        )
