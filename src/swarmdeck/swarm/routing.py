"""Which model a member runs on: the first found of the plan's explicit model, the team's
model for the role, its named agent's, `swarm.role_models[role]`, `swarm.member_model`, and
the coordinator's own; then through the model aliases."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Routing:
    """The settings routing reads, kept with the swarm so every replay routes alike."""

    coordinator_model: str
    member_model: str | None = None
    role_models: dict[str, str] = field(default_factory=dict)
    aliases: dict[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """Plain data for the coordinator's options."""
        return {
            "coordinator_model": self.coordinator_model,
            "member_model": self.member_model,
            "role_models": dict(self.role_models),
            "aliases": dict(self.aliases),
        }

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> Routing:
        """Back from the options."""
        return cls(
            doc["coordinator_model"],
            doc.get("member_model"),
            dict(doc.get("role_models") or {}),
            dict(doc.get("aliases") or {}),
        )


def route(
    role: str,
    explicit: str | None,
    team_model: str | None,
    agent_model: str | None,
    routing: Routing,
) -> tuple[str, str]:
    """(model, where it came from) for a member of `role`; aliases resolved."""
    candidates = (
        ("plan", explicit),
        ("team", team_model),
        ("agent", agent_model),
        ("settings swarm.role_models", routing.role_models.get(role)),
        ("settings swarm.member_model", routing.member_model),
        ("coordinator", routing.coordinator_model),
    )
    for source, value in candidates:
        if value:
            return routing.aliases.get(value, value), source
    return routing.coordinator_model, "coordinator"
