"""What a session's model is offered: its tools (its mode's, its skills', its toolsets'),
its skills, and the context each tool call runs with."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from swarmdeck.catalog.records import SessionRecord
from swarmdeck.models.edit_shapes import TEXT_EDITOR, edit_shape
from swarmdeck.models.estimate import estimate_tokens, tools_text
from swarmdeck.plugins.aliases import resolve_tools
from swarmdeck.plugins.definitions import SkillDef
from swarmdeck.runtime.agents import skills_shown
from swarmdeck.runtime.catalog_io import catalog_write
from swarmdeck.runtime.family import Family
from swarmdeck.runtime.mgmt_ops import RuntimeMgmtOps
from swarmdeck.runtime.project_docs import PROJECT_DOCS_OPTION
from swarmdeck.runtime.prompts import system_prompt
from swarmdeck.runtime.services import services
from swarmdeck.runtime.tree import may_spawn, shares_own_prompt
from swarmdeck.tools.base import READ_ONLY_MODES, Tool, ToolContext
from swarmdeck.tools.builtins.control import SPAWN_AGENT
from swarmdeck.tools.tool_index import (
    EAGER,
    LOAD_TOOLS,
    Offer,
    core_tools,
    for_shape,
    split_offer,
)
from swarmdeck.tools.toolsets import SessionScope
from swarmdeck.workspace.gitdirs import git_dirs_outside

# Estimates are a token per four characters; a vendor's tokenizer may count fewer, so a
# prefix is filled a tenth past the minimum.
FILL_MARGIN = 1.1


def session_skills(record: SessionRecord, loaded: list[str]) -> list[str]:
    """The skills in force for a turn: the agent's preloaded ones, then those loaded."""
    preloaded = list(record.options.get("skills") or [])
    return preloaded + [s for s in loaded if s not in preloaded]


def offered_tools(
    record: SessionRecord, skills: list[str] | None = None, extra: list[Tool] | None = None
) -> list[Tool]:
    """The tools this session's model may call: its mode's, narrowed by its tool_names,
    those of its toolsets (`extra`: its MCP servers'), and those its skills bring (still
    only the mode's). Which of them its prompt carries whole is tool_offer's to say."""
    svc = services()
    tools = svc.tools.for_mode(record.mode, record.tool_names)
    load_tools = svc.tools.get(LOAD_TOOLS)
    if load_tools is not None and all(t.name != LOAD_TOOLS for t in tools):
        tools.append(load_tools)  # a narrowed list still loads what it may use
    if extra:
        taken = {t.name for t in tools}
        tools += [t for t in extra if t.name not in taken]
    names = {t.name for t in tools}
    for name in skill_tool_names(record, skills or []):
        tool = svc.tools.get(name)
        if tool is not None and name not in names and record.mode in tool.modes:
            tools.append(tool)
            names.add(name)
    return tools


def skill_tool_names(record: SessionRecord, skills: list[str]) -> list[str]:
    """The tools these skills bring (their tools.json, aliases resolved), in order."""
    if not skills:
        return []
    plugin_set = services().session_plugins(record)
    found = [plugin_set.skills.get(name) for name in skills]
    return [n for skill in found if skill is not None for n in resolve_tools(skill.tools)]


def tool_offer(
    record: SessionRecord, tools: list[Tool], loaded: list[str], family: Family | None = None
) -> Offer:
    """Which of the session's tools its prompt carries whole (the core set, eager ones,
    those it loaded), and which only its index names: tools load on demand unless the
    session, or the settings, say `eager`. A family's sessions share its core set."""
    svc = services()
    config, _ = svc.provider_for(record.model)
    shape = edit_shape(config.kind, config.edit_tools)
    tools = for_shape(tools, shape)
    loading = record.options.get("tool_loading") or svc.settings.tool_loading
    if loading == EAGER:
        return Offer([t for t in tools if t.name != LOAD_TOOLS], [])
    # Where the vendor has a tool search of its own (Anthropic's), it finds the tools.
    search = config.vendor_tool_search
    load_tools = svc.tools.get(LOAD_TOOLS)
    if family is not None:
        core = core_tools(family.mode, family.core, shape)
    else:
        core = core_tools(record.mode, _own_core(record), shape)
        if not _hands_prompt_down(record, tools):
            return split_offer(tools, core, loaded, load_tools, search)
    fill = _Fill(_prefix_text(record, family), tools, load_tools, search, config.kind)
    return split_offer(tools, fill.grown(core, config.cache_min_tokens), loaded, load_tools, search)


def _prefix_text(record: SessionRecord, family: Family | None) -> Callable[[str], str]:
    """The system prompt of a shared prefix, for an index of the tools it leaves out: the
    family's, or the session's own that its sub-agents share (runtime/tree.py): a parent
    is filled as they are, so its own turns write the prefix their first requests read."""
    if family is not None:
        return lambda index: system_prompt("", family.system, None, index)
    project = record.options.get(PROJECT_DOCS_OPTION) or ""
    skills = visible_skills(record)
    return lambda index: system_prompt(record.workdir, None, skills, index, project)


def _hands_prompt_down(record: SessionRecord, tools: list[Tool]) -> bool:
    """Whether this session's sub-agents would share its own prompt, byte for byte: it can
    start them (the tool and the limits), the settings share prefixes, and its prompt and
    tools are its mode's."""
    return (
        services().settings.shared_prefix
        and shares_own_prompt(record)
        and any(t.name == SPAWN_AGENT for t in tools)
        and may_spawn(record)
    )


@dataclass(frozen=True)
class _Fill:
    """A shared prefix's core set grown to the length the provider's cache keeps: `text`
    makes the system prompt for an index of the tools left out."""

    text: Callable[[str], str]
    tools: list[Tool]
    load_tools: Tool | None
    search: str | None
    kind: str

    def grown(self, core: frozenset[str], min_tokens: int) -> frozenset[str]:
        """The core set, grown (in the order of the tools) until the prefix reaches the
        shortest one the provider's cache keeps: below that, every sibling pays full price
        for the whole prefix, while a schema past it costs a cached read. Only the
        family's own text and tools count, never what a session loaded, so the prefix
        stays byte for byte the same for all of them."""
        if min_tokens <= 0:
            return core
        need = min_tokens * FILL_MARGIN
        grown = set(core)
        offer = self._offer(grown)
        for tool in list(offer.indexed):
            if self._tokens(offer) >= need:
                break
            grown.add(tool.name)
            offer = self._offer(grown)
        return frozenset(grown)

    def _offer(self, core: set[str]) -> Offer:
        return split_offer(self.tools, frozenset(core), [], self.load_tools, self.search)

    def _tokens(self, offer: Offer) -> int:
        """The estimated tokens of the prefix: its system prompt and tools, as the
        provider's kind shows them (a tool left to the vendor's tool search weighs what it
        shows of it). The text editor goes out as Anthropic's own tool type, not as its
        schema (models/edit_shapes.py): what it weighs is the vendor's to add."""
        specs = [s for s in offer.specs() if s.name != TEXT_EDITOR]
        return estimate_tokens(self.text(offer.index()) + tools_text(specs, self.kind))


def _own_core(record: SessionRecord) -> Sequence[str] | None:
    """The core set a session chose (its agent's, the settings' for its mode), or None."""
    chosen = record.options.get("core_tools")
    if chosen is None:
        chosen = services().settings.core_tools.get(record.mode)
    if chosen is None and record.tool_names is not None:
        # A session given its own short list (an agent's `tools:`, a dispatch mode's, the
        # SDK's tool_names) is shown all of it; what its toolsets add is still indexed.
        chosen = record.tool_names
    return chosen


def family_tools(family: Family, extra: list[Tool]) -> list[Tool]:
    """The tools a family's sessions are all shown, in the family's order, then those their
    toolsets (MCP servers of the same project) add."""
    svc = services()
    tools = [t for name in family.tool_names if (t := svc.tools.get(name)) is not None]
    taken = {t.name for t in tools}
    return [*tools, *(t for t in extra if t.name not in taken)]


def visible_skills(record: SessionRecord) -> list[SkillDef]:
    """The skills this session's index lists (none when it cannot load them)."""
    return skills_shown(record, services().session_plugins)


def tool_context(record: SessionRecord, call_key: str = "", origin: str = "") -> ToolContext:
    """The context a tool of this session runs with."""
    svc = services()
    config, _ = svc.provider_for(record.model)
    workdir = Path(record.workdir)
    extras: dict[str, Any] = {}
    if svc.engine_ops is not None:
        extras["mgmt_ops"] = RuntimeMgmtOps(svc.engine_ops)
    return ToolContext(
        session_id=record.id,
        workdir=workdir,
        mode=record.mode,
        run_dir=Path(record.run_dir),
        services={
            "network": config.network,
            # --no-sandbox: the user accepts shell tools without a sandbox (tools/shell.py).
            "no_sandbox": bool(record.options.get("no_sandbox")),
            "hidden_paths": [svc.settings.credentials_dir],
            "extra_writable": [] if record.mode in READ_ONLY_MODES else git_dirs_outside(workdir),
            "catalog": svc.catalog,
            "settings": svc.settings,
            "plugins": svc.session_plugins(record),
            "skills": {s.name: s for s in visible_skills(record)},
            "tool_names": svc.tools.names(),
            "available_models": svc.available_models,
            **extras,
        },
        call_key=call_key,
        origin=origin,
    )


async def toolset_tools(session_id: str, turn: int) -> list[Tool]:
    """The tools the session's toolsets (its MCP servers) offer now; what it should be told
    about them (a server that did not start) joins its transcript, once."""
    svc = services()
    if not svc.toolsets:
        return []
    record = svc.session_identity(session_id)
    scope = session_scope(record)
    tools: list[Tool] = []
    for toolset in svc.toolsets:
        found = await toolset.tools_for(scope)
        tools += found.tools
        for key, text in found.notices:
            payload = {"what": "toolset", "reason": text, "wait_s": 0, "text": text}
            await catalog_write(_append_notice, session_id, key, payload)
    return tools


def _append_notice(session_id: str, key: str, payload: dict[str, Any], wait: bool = True) -> None:
    services().catalog.append_event(session_id, key, "notice", payload, wait=wait)


def session_scope(record: SessionRecord) -> SessionScope:
    """What a toolset may know of the session."""
    plugins = tuple(services().session_plugins(record).plugins)
    return SessionScope(record.id, record.mode, Path(record.workdir), record.options, plugins)
