"""submit_result: how a worker hands back its structured result (validated by the runtime)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from swarmdeck.tools.base import control_tool


class SubmitResultArgs(BaseModel):
    """The result object; its schema depends on the session's mode."""

    result: dict[str, Any] = Field(description="The result object, in the schema your task names.")


SUBMIT_RESULT_TOOL = control_tool(
    "submit_result",
    "Submit your final structured result; if your task's schema rejects it, you are told "
    "why and may submit again.",
    SubmitResultArgs,
    carried_out_by="the session workflow",
)
