"""submit_result: how a worker hands back its structured result (validated by the runtime)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from swarmdeck.tools.base import Effect, Tool, ToolContext


class SubmitResultArgs(BaseModel):
    """The result object; its schema depends on the session's mode."""

    result: dict[str, Any] = Field(description="The result object, in the schema your task names.")


async def _never_called(_ctx: ToolContext, _args: Any) -> str:
    # The session workflow validates and stores results itself (a control tool).
    raise AssertionError("submit_result is carried out by the session workflow")


SUBMIT_RESULT_TOOL = Tool(
    name="submit_result",
    description=(
        "Submit your final structured result. It is validated against the schema of your "
        "task; if it is rejected you are told exactly why and may submit again."
    ),
    args_model=SubmitResultArgs,
    effect=Effect.IDEMPOTENT,
    body=_never_called,
    control=True,
)
