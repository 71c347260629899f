"""`@tool`: turn a typed Python function into a swarmdeck tool."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from typing import Any

from pydantic import create_model

from swarmdeck.tools.base import ALL_MODES, Effect, Tool, ToolContext


def tool(
    effect: Effect | str,
    *,
    name: str | None = None,
    description: str | None = None,
    modes: frozenset[str] | set[str] = ALL_MODES,
) -> Callable[[Callable[..., Any]], Tool]:
    """Declare a tool: its parameters' type hints become the schema the model sees.

    A parameter named `ctx` receives the ToolContext. Sync functions run in a thread.
    """

    def wrap(fn: Callable[..., Any]) -> Tool:
        sig = inspect.signature(fn)
        hints = inspect.get_annotations(fn, eval_str=True)
        fields: dict[str, Any] = {}
        for pname, param in sig.parameters.items():
            if pname == "ctx":
                continue
            default = ... if param.default is inspect.Parameter.empty else param.default
            fields[pname] = (hints.get(pname, Any), default)
        args_model = create_model(f"{fn.__name__}_args", **fields)
        wants_ctx = "ctx" in sig.parameters

        async def body(ctx: ToolContext, args: Any) -> str:
            kwargs = args.model_dump()
            if wants_ctx:
                kwargs["ctx"] = ctx
            if inspect.iscoroutinefunction(fn):
                out = await fn(**kwargs)
            else:
                out = await asyncio.to_thread(fn, **kwargs)
            return out if isinstance(out, str) else repr(out)

        return Tool(
            name=name or fn.__name__,
            description=description or (inspect.getdoc(fn) or fn.__name__).splitlines()[0],
            args_model=args_model,
            effect=Effect(effect),
            body=body,
            modes=frozenset(modes),
            # A tool its user wrote for their sessions is shown whole from the first turn.
            eager=True,
        )

    return wrap
