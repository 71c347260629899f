"""Tools on demand: a session's prompt carries the schemas of a small core set, and of the
rest only a line each (name and a phrase), until the model loads them with `load_tools`.

A schema is paid for at every turn, so fifty tools cost thousands of tokens before the task
says a word. The core set is what nearly every task uses; the index says what else exists.
Loaded schemas follow the core ones in the order they were loaded and are never taken
back: the tools block only grows at its end, so a prompt cache keeps serving its prefix.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from swarmdeck.models.edit_shapes import APPLY_PATCH, EDIT_FILE, TEXT_EDITOR, EditShape
from swarmdeck.models.types import ToolSpec
from swarmdeck.tools.base import READ_ONLY_MODES, Tool

LOAD_TOOLS = "load_tools"
EAGER = "eager"  # settings.yaml tools.loading: every schema every turn

# The core of every mode: read and find, run a command, hand the result back. Writing modes
# add writing a file and the one edit tool in the shape the provider's models are trained on
# (EDIT stands for it, see models/edit_shapes); a person's question in agent mode.
EDIT = "<edit>"
_READ_CORE = ("read_file", "grep", "shell", "submit_result")
_WRITE_CORE = ("read_file", "shell", "write_file", EDIT)
DEFAULT_CORE = {
    **{mode: _READ_CORE for mode in READ_ONLY_MODES},
    # A dispatched task ends with its result; a plain agent's answer is its last text.
    "code": (*_WRITE_CORE, "grep", "submit_result"),
    "resume": (*_WRITE_CORE, "grep", "submit_result"),
    "agent": _WRITE_CORE,
}
EDIT_TOOL_OF_SHAPE = {
    "plain": EDIT_FILE,
    "openai_apply_patch": APPLY_PATCH,
    "anthropic_text_editor": TEXT_EDITOR,
}
PHRASE_WORDS = 6
LOAD_HEAD = "Tools to load_tools(names=[...]) first:"
SEARCH_HEAD = "Tools to find with your tool search first (by name or words):"
GROUP_NAMES = 3
# The tool search variant that OpenAI's Responses API hosts (models/registry.py).
HOSTED_SEARCH = "hosted"
# Words a phrase cut short must not end on.
_DANGLING = {
    "a", "an", "the", "of", "in", "on", "to", "for", "and", "or", "with", "by", "your", "its",
    "one", "until", "every", "some", "it",
}  # fmt: skip


@dataclass(frozen=True)
class Offer:
    """What one turn shows the model: the tools whose schemas it carries, in a cache-stable
    order, and the index of the others; `search` names the vendor's tool search variant
    when the vendor finds and loads those (models/tool_search.py), instead of load_tools."""

    shown: list[Tool]
    indexed: list[Tool]
    search: str | None = None

    def specs(self) -> list[ToolSpec]:
        """The schemas the request sends: those shown, then, for the vendor's tool search,
        the indexed ones marked deferred (not in the prompt until it finds them)."""
        specs = [t.spec() for t in self.shown]
        if self.search is not None:
            specs += [
                replace(t.spec(), deferred=True, group=t.group)
                for t in self.indexed
                if t not in self.shown
            ]
        return specs

    def index(self) -> str:
        """The index as the system prompt carries it. OpenAI's hosted search shows the
        model each MCP server's namespace itself, so the index need not name the groups."""
        groups = self.search != HOSTED_SEARCH
        return index_text(self.indexed, searched=self.search is not None, groups=groups)


def core_tools(mode: str, chosen: Sequence[str] | None, shape: EditShape) -> frozenset[str]:
    """The core set of a session: its agent's or its config's choice, else its mode's, with
    the edit tool of the provider's shape."""
    names = chosen if chosen is not None else DEFAULT_CORE.get(mode, _READ_CORE)
    return frozenset(EDIT_TOOL_OF_SHAPE[shape] if n == EDIT else n for n in names)


def for_shape(tools: list[Tool], shape: EditShape) -> list[Tool]:
    """The tools a provider of this edit shape is sent: the text editor only to Anthropic's
    shape, which has no edit_file beside it (the adapters drop them; the index must too)."""
    dropped = EDIT_FILE if shape == "anthropic_text_editor" else TEXT_EDITOR
    return [t for t in tools if t.name != dropped]


def split_offer(
    tools: list[Tool],
    core: frozenset[str],
    loaded: Iterable[str],
    load_tools: Tool | None,
    search: str | None = None,
) -> Offer:
    """Split the tools a session may use into those shown whole (core and eager ones, then
    `load_tools`, then those loaded, in the order they were) and those the index names. The
    index does not depend on what was loaded: it sits in the system prompt, which must stay
    byte for byte the same for a cache to keep serving it. With the vendor's tool `search`
    there is no load_tools: what a search found lives in the history, where the vendor
    expands it (what is loaded then is a skill's tools, shown whole as on every scheme)."""
    by_name = {t.name: t for t in tools}
    shown = [t for t in tools if (t.name in core or t.eager) and t.name != LOAD_TOOLS]
    indexed = [t for t in tools if t not in shown and t.name != LOAD_TOOLS]
    if indexed and load_tools is not None and search is None:
        shown.append(load_tools)
    taken = {t.name for t in shown}
    for name in loaded:
        tool = by_name.get(name)
        if tool is not None and name not in taken:
            shown.append(tool)
            taken.add(name)
    return Offer(shown, indexed, search)


def index_phrase(tool: Tool) -> str:
    """What a tool does, in a few words: the first clause of its description."""
    first = re.split(r"(?<=[.;:])\s|\s\(", " ".join(tool.description.split()), maxsplit=1)[0]
    words = first.rstrip(".;:,").split()[:PHRASE_WORDS]
    while len(words) > 1 and words[-1].lower() in _DANGLING:
        words.pop()
    return " ".join(words).rstrip(",")


def index_text(indexed: list[Tool], searched: bool = False, groups: bool = True) -> str:
    """The index as the system prompt carries it: a line a tool, and (with `groups`) a line
    a group (an MCP server: its first tools' names; load_tools(search=GROUP) lists them
    all); `searched` when the vendor's tool search finds them rather than load_tools."""
    lines = [f"- {t.name}: {index_phrase(t)}" for t in indexed if t.group is None]
    named: dict[str, list[str]] = {}
    for t in indexed:
        if t.group is not None and groups:
            named.setdefault(t.group, []).append(t.name)
    for group, names in named.items():
        more = ", …" if len(names) > GROUP_NAMES else ""
        shown = ", ".join(names[:GROUP_NAMES])
        lines.append(f"- {group} (MCP, {len(names)} tools: search {group!r}): {shown}{more}")
    if not lines:
        return ""
    head = SEARCH_HEAD if searched else LOAD_HEAD
    return head + "\n" + "\n".join(lines)


def search_index(indexed: Iterable[Tool], words: str, most: int = 16) -> list[Tool]:
    """The indexed tools that best match `words` (by name, group and description), best
    first; a group's name finds all its tools."""
    wanted = {w for w in re.findall(r"[a-z0-9]+", words.lower()) if len(w) > 1}
    scored = []
    for n, tool in enumerate(indexed):
        text = f"{tool.name.replace('_', ' ')} {tool.group or ''} {tool.description}".lower()
        have = set(re.findall(r"[a-z0-9]+", text))
        score = len(wanted & have) + sum(1 for w in wanted if w in tool.name)
        if score:
            scored.append((-score, n, tool))
    return [tool for _, _, tool in sorted(scored)[:most]]
