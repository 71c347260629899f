"""`load_tools`: the model loads tools of its index by name, or finds them by words. The
call's stored result is the record: a tool loaded stays loaded after a crash, and its schema
is offered from the session's next turn on (see runtime/journal.py)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from swarmdeck.errors import ToolError
from swarmdeck.tools.base import ALL_MODES, Effect, Tool, ToolContext
from swarmdeck.tools.tool_index import LOAD_TOOLS, index_phrase, search_index


class LoadToolsArgs(BaseModel):
    """Load tools of your index, or search it."""

    names: list[str] = Field(default_factory=list, description="tools to load")
    search: str | None = Field(None, description="words to find tools by")


async def _load(ctx: ToolContext, args: LoadToolsArgs) -> str:
    index = {t.name: t for t in ctx.services.get("tool_index") or []}
    if args.names:
        unknown = [n for n in args.names if n not in index]
        if unknown:
            raise ToolError(
                f"not in your index: {', '.join(unknown)} (search it: load_tools(search=...))"
            )
        return f"loaded: {', '.join(args.names)}. Call them from your next turn on."
    if args.search:
        found = search_index(index.values(), args.search)
        if not found:
            return f"no tool of your index matches {args.search!r}"
        lines = "\n".join(f"- {t.name}: {index_phrase(t)}" for t in found)
        return f"{lines}\nload_tools(names=[...]) loads them."
    raise ToolError("pass names=[...] to load, or search='words' to find tools")


LOAD_TOOLS_TOOL = Tool(
    LOAD_TOOLS,
    "Load tools of your index (yours from your next turn), or search it by words.",
    LoadToolsArgs,
    Effect.READ,
    _load,
    modes=ALL_MODES,
)
