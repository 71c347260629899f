"""The process-wide services a session's steps use: catalog, providers, keys, tools."""

from __future__ import annotations

import asyncio
import time
import warnings
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from swarmdeck.catalog.catalog import Catalog
from swarmdeck.catalog.records import SessionRecord
from swarmdeck.config import Settings
from swarmdeck.errors import SwarmdeckError
from swarmdeck.integrations.mcp.toolset import McpPool, McpToolset
from swarmdeck.integrations.telemetry.setup import tracing_for
from swarmdeck.integrations.telemetry.tracing import NO_TRACING, Tracing
from swarmdeck.models.available import ModelInfo, available_models
from swarmdeck.models.factory import build_chat_model
from swarmdeck.models.limiter import ProviderLimiter
from swarmdeck.models.registry import ProviderConfig, ProviderRegistry
from swarmdeck.models.types import ChatModel
from swarmdeck.plugins.tiers import PluginSet, load_plugin_set
from swarmdeck.runtime.journal import Journal
from swarmdeck.runtime.project_docs import project_docs
from swarmdeck.secrets.redact import Redactor, load_redactor, set_default_redactor
from swarmdeck.secrets.store import CredentialStore
from swarmdeck.tools.base import Tool, ToolRegistry
from swarmdeck.tools.toolsets import SessionScope, SessionToolset

# A result validator returns None when the result is valid, else a one-line error.
ResultValidator = Callable[[Any], str | None]
# A session driver runs a generation of a session of its kind (a swarm's coordinator) in
# place of the session loop: (durable primitives, session id, the generation's start info)
# -> {status, reason}. Layers above the runtime register theirs, by the `kind` option.
SessionDriver = Callable[[Any, str, dict[str, Any]], Awaitable[dict[str, Any]]]
# A session's plugin folders are read again after this long (a new project agent shows up
# without a worker restart; a turn does not pay for reading them).
PLUGIN_CACHE_SECONDS = 10.0


class EngineOps(Protocol):
    """What steps may ask of the engine without importing it."""

    executor_id: str

    async def ring(self, session_id: str) -> None:
        """Wake the session if it waits on its inbox (best effort; the inbox is durable)."""
        ...

    async def cancel(self, session_ids: list[str]) -> None:
        """Stop these sessions' workflows."""
        ...

    async def outside_workflow(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> Any:
        """Run engine calls as this process, not as steps of the workflow that asks."""
        ...

    async def ended_workflows(self) -> list[tuple[str, str, float]]:
        """(workflow id, status, ended at) of every ended session workflow kept."""
        ...

    async def workflow_history(self, workflow_ids: list[str]) -> tuple[int, int, int]:
        """(runs, steps, bytes of step outputs) these workflows hold."""
        ...

    async def delete_workflows(self, workflow_ids: list[str]) -> list[str]:
        """Delete the history of these workflows that have ended; returns those deleted."""
        ...


@dataclass
class Services:
    """Everything steps need, built once per process."""

    settings: Settings
    catalog: Catalog
    providers: ProviderRegistry
    credentials: CredentialStore
    redactor: Redactor
    limiter: ProviderLimiter
    tools: ToolRegistry
    result_validators: dict[str, ResultValidator] = field(default_factory=dict)
    session_drivers: dict[str, SessionDriver] = field(default_factory=dict)
    # The external runners installed on this host (set by runners/driver.register): a
    # worker takes from the fleet only the runner sessions it can run.
    runners_here: Callable[[], list[str]] = field(default=lambda: [])
    engine_ops: EngineOps | None = None
    # Tools found per session (its MCP servers'), beside the registry's.
    toolsets: list[SessionToolset] = field(default_factory=list)
    # Spans of sessions, turns and tool calls (a no-op unless OpenTelemetry is configured).
    tracing: Tracing = NO_TRACING
    _models: dict[str, ChatModel] = field(default_factory=dict)
    # Per-session caches of this process: a session's identity (model, mode, workdir, prompt,
    # tools) never changes, and its transcript only grows, so each turn reads only what is
    # new. Rebuilt from the catalog after a restart.
    _records: dict[str, SessionRecord] = field(default_factory=dict)
    _journals: dict[str, Journal] = field(default_factory=dict)
    _plugins: dict[tuple[str, tuple[str, ...]], tuple[float, PluginSet]] = field(
        default_factory=dict
    )

    def executor_id(self) -> str:
        """The executor id of this process's engine (who runs the sessions here)."""
        if self.engine_ops is None:
            raise SwarmdeckError("swarmdeck runtime is not started", "launch the engine first")
        return self.engine_ops.executor_id

    def session_identity(self, session_id: str) -> SessionRecord:
        """The session's record as created (its identity fields are immutable)."""
        record = self._records.get(session_id)
        if record is None:
            record = self._records[session_id] = self.catalog.get_session(session_id)
        return record

    def pin_identity(self, record: SessionRecord) -> None:
        """Use this record as the session's identity in this process: a store workspace's
        session runs in the directory this host materialised it in (runtime/workspaces)."""
        self._records[record.id] = record

    def remember(self, record: SessionRecord) -> None:
        """Keep a session's record that a step read anyway, for session_identity (its
        identity fields are immutable): the turn that follows need not read it again."""
        self._records.setdefault(record.id, record)

    def journal(self, session_id: str, fresh: bool = False) -> Journal:
        """The session's transcript as this process last read it (read now if never);
        `fresh` takes in what is new as well (one read either way)."""
        journal = self._journals.get(session_id)
        if journal is None:
            journal = self._journals[session_id] = Journal(session_id)
            journal.refresh(self.catalog)
        elif fresh:
            journal.refresh(self.catalog)
        return journal

    def journal_with_mail(self, session_id: str, claim: str) -> tuple[Journal, bool]:
        """journal(fresh=True), and in the same read whether messages of any kind wait in
        the session's inbox (or were taken under `claim` and not recorded)."""
        journal = self._journals.get(session_id)
        if journal is None:
            journal = self._journals[session_id] = Journal(session_id)
        return journal, journal.refresh_with_mail(self.catalog, None, claim)

    def plugins_for(self, workdir: str, given: list[str] | tuple[str, ...] = ()) -> PluginSet:
        """The plugins a session in `workdir` sees (every tier, then its given folders)."""
        key = (workdir, tuple(given))
        now = time.monotonic()
        cached = self._plugins.get(key)
        if cached is not None and now - cached[0] < PLUGIN_CACHE_SECONDS:
            return cached[1]
        found = load_plugin_set(self.settings.home, Path(workdir), [Path(g) for g in given])
        self._plugins[key] = (now, found)
        return found

    def session_plugins(self, record: SessionRecord) -> PluginSet:
        """The plugins of this session."""
        return self.plugins_for(record.workdir, record.options.get("plugins") or ())

    def project_docs_for(self, workdir: Path) -> str:
        """The project's instructions for a new session in `workdir` ("" when the settings
        turn them off or the project has none)."""
        if not self.settings.project_docs:
            return ""
        return project_docs(workdir, self.settings.home, self.redactor)

    def available_models(self) -> list[ModelInfo]:
        """The exact provider:model names a session may use now (ready providers only)."""
        return available_models(self.providers, self.credentials.has)

    def preflight(self, scope: SessionScope) -> None:
        """Refuse a session a toolset could not serve (its MCP servers without the SDK)."""
        for toolset in self.toolsets:
            toolset.preflight(scope)

    async def close_toolsets(self) -> None:
        """Stop what the toolsets started in this process (its MCP servers)."""
        for toolset in self.toolsets:
            await toolset.close()

    def forget(self, session_id: str) -> SessionRecord | None:
        """Drop a finished session's caches; its record, if this process had it."""
        self._journals.pop(session_id, None)
        return self._records.pop(session_id, None)

    @classmethod
    def build(cls, settings: Settings, tools: list[Tool]) -> Services:
        """Open the store and load providers and keys; one redactor guards every sink."""
        credentials = CredentialStore(settings.credentials_dir)
        redactor = load_redactor(credentials)
        set_default_redactor(redactor)
        catalog = Catalog.open(settings.store_url, redactor.redact)
        mcp = McpToolset(
            McpPool(_guarded_lookup(credentials, redactor), settings.home / "logs" / "mcp")
        )
        return cls(
            settings=settings,
            catalog=catalog,
            providers=ProviderRegistry.load(settings.providers_dir),
            credentials=credentials,
            redactor=redactor,
            limiter=ProviderLimiter(catalog.engine),
            tools=ToolRegistry(tools),
            toolsets=[mcp],
            tracing=tracing_for(settings.home, redactor.redact),
        )

    async def aclose(self) -> None:
        """Release what this process opened for its sessions: the toolsets' MCP servers,
        then the adapters' connection pools."""
        await self.close_toolsets()
        await self.close_models()

    async def close_models(self) -> None:
        """Close the adapters' connection pools (on the loop that opened them), so none is
        reported unclosed when the process ends."""
        for model in self._models.values():
            aclose = getattr(model, "aclose", None)
            if aclose is not None:
                try:
                    await aclose()
                except Exception:  # closing is best effort: the process is ending anyway
                    continue
        self._models.clear()  # closed: a later model() builds a new adapter

    def close_models_now(self) -> None:
        """close_models() from code outside any event loop, such as a shutdown: the pools
        of loops still running elsewhere (the engine's) are closed there."""
        if not self._models:
            return
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            asyncio.run(self.close_models())
            return
        # Inside a loop nothing can block on it: async callers await close_models() (or
        # aclose() on the Host or Swarm) first. Said, since the pools would stay open.
        warnings.warn(
            "closing inside a running event loop leaves the model connection pools open: "
            "await aclose() instead of calling close() or shutdown()",
            RuntimeWarning,  # shown by default, unlike ResourceWarning
            stacklevel=4,
        )

    def provider_for(self, model_ref: str) -> tuple[ProviderConfig, str]:
        """Resolve `provider:model` to its fixed provider config and model name."""
        return self.providers.resolve(model_ref)

    def model(self, model_ref: str) -> ChatModel:
        """The adapter for `provider:model`; the key is read inside each call, not here."""
        if model_ref not in self._models:
            config, name = self.provider_for(model_ref)
            self._models[model_ref] = build_chat_model(
                config, name, lambda: self.credentials.get(config.key), self.limiter
            )
        return self._models[model_ref]


def _guarded_lookup(
    credentials: CredentialStore, redactor: Redactor
) -> Callable[[str], str | None]:
    """Reads a stored key for an MCP server's env or headers, and makes the redactor mask it
    first (a key stored after this process started is masked all the same)."""

    def lookup(name: str) -> str | None:
        value = credentials.get(name)
        if value:
            redactor.add(value)
        return value

    return lookup


_current: Services | None = None


def set_services(services: Services | None) -> None:
    """Install the process's services (the engine does this at launch)."""
    global _current
    _current = services


def services() -> Services:
    """The process's services; steps call this."""
    if _current is None:
        raise SwarmdeckError("swarmdeck runtime is not started", "launch the engine first")
    return _current
