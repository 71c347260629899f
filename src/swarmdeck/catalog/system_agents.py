"""Which system agents are enabled on this store, and on which model (sd_system_agents)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from swarmdeck.catalog import schema

_table = schema.system_agents


@dataclass(frozen=True)
class SystemAgentRow:
    """One enabled (or stopped) system agent."""

    agent_id: str
    model: str
    enabled: bool
    plugins: list[str]
    restarted_at: float
    updated_at: float


class SystemAgents:
    """Reads and writes of sd_system_agents."""

    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine

    def rows(self) -> list[SystemAgentRow]:
        """Every system agent ever enabled here, by id."""
        with self.engine.connect() as conn:
            found = conn.execute(sa.select(_table).order_by(_table.c.agent_id)).all()
        return [
            SystemAgentRow(
                r.agent_id,
                r.model,
                bool(r.enabled),
                json.loads(r.plugins or "[]"),
                r.restarted_at,
                r.updated_at,
            )
            for r in found
        ]

    def enable(self, agent_ids: list[str], model: str, plugins: list[str]) -> None:
        """Enable these agents on `model` (insert or update); a restart may happen at once."""
        now = time.time()
        values = {
            "model": model,
            "enabled": True,
            "plugins": json.dumps(plugins),
            "restarted_at": 0.0,
            "updated_at": now,
        }
        for agent_id in agent_ids:
            with self.engine.begin() as conn:
                changed = conn.execute(
                    _table.update().where(_table.c.agent_id == agent_id).values(**values)
                ).rowcount
                if changed:
                    continue
            try:
                with self.engine.begin() as conn:
                    conn.execute(_table.insert().values(agent_id=agent_id, **values))
            except IntegrityError:  # enabled by another process meanwhile: same outcome
                continue

    def disable(self, agent_ids: list[str] | None = None) -> list[str]:
        """Stop keeping these agents (all when None) running; returns those that were on."""
        where = _table.c.enabled.is_(True)
        if agent_ids is not None:
            where = sa.and_(where, _table.c.agent_id.in_(agent_ids))
        with self.engine.begin() as conn:
            ids = [r[0] for r in conn.execute(sa.select(_table.c.agent_id).where(where))]
            conn.execute(_table.update().where(where).values(enabled=False, updated_at=time.time()))
        return ids

    def claim_restart(self, agent_id: str, seen: float) -> bool:
        """Take the right to restart the agent's session: True for the one process whose
        compare-and-set on the restart time (as it read it) wins."""
        with self.engine.begin() as conn:
            won = conn.execute(
                _table.update()
                .where(
                    _table.c.agent_id == agent_id,
                    _table.c.restarted_at == seen,
                    _table.c.enabled.is_(True),
                )
                .values(restarted_at=time.time())
            ).rowcount
        return won == 1
