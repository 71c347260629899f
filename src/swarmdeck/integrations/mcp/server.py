"""swarmdeck as an MCP server for planners (`swarmdeck mcp serve`, stdio): dispatch, fanout,
swarm, session_wait and the session tools, over an operations object the command line hands in
(the dispatch layer's PlannerApi). Results are the contract's JSON objects; a refusal is a
tool error whose text is the contract's `swarmdeck.error` line."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from swarmdeck.errors import SwarmdeckError
from swarmdeck.integrations.mcp.sdk import require_sdk

SERVER_NAME = "swarmdeck"
INSTRUCTIONS = (
    "Hand bounded tasks to isolated LLM workers and get structured verdicts back. "
    "`dispatch` (or `fanout` for several) returns each job's `started` object at once; "
    "`session_wait` returns its verdict when it ends (call it again while it answers "
    "`pending`). Read `result` first, then the flags (timed_out, parse_state). "
    "`swarm` splits one task among a team's members (or runs your `plan`) and merges their "
    "results: it returns a `swarmdeck.swarm_started` object at once, and `session_wait` on "
    "its session_id returns the `swarmdeck.swarm` object (result, members) when it ends. "
    "`list_models` names the models a job may use."
)
Mode = Literal["code", "explore", "test", "review", "resume"]
# Tool parameters (module level: the SDK reads the annotations in the module's namespace).
Sid = Annotated[str, Field(description="A session id (a unique prefix is enough).")]
MsgId = Annotated[
    str | None, Field(description="An id for the message: a retry with it is delivered once.")
]


class JobArgs(BaseModel):
    """One job: a task for a worker in one mode, on one provider."""

    model_config = ConfigDict(extra="forbid")

    provider: str = Field(description="Provider key or provider:model (see list_models).")
    mode: Mode = Field(description="code writes in the workdir; explore/test/review only read.")
    task: str = Field(description="The task, filled from `swarmdeck template MODE`.")
    workdir: str | None = Field(None, description="The project directory (not for resume).")
    name: str | None = Field(None, description="A label for the job, echoed as `job`.")
    worktree: bool = Field(False, description="code: work in a fresh git worktree of HEAD.")
    timeout: float | None = Field(None, ge=0, description="Wall-clock limit, seconds.")
    idle_timeout: float | None = Field(None, ge=0, description="Limit without progress, s.")
    max_turns: int | None = Field(None, ge=1, description="Model turns allowed.")
    max_tokens: int | None = Field(None, ge=1, description="Token budget.")
    max_cost: float | None = Field(None, gt=0, description="Cost budget in USD.")
    session: str | None = Field(None, description="resume: the session to continue.")


class PlanMember(BaseModel):
    """One member of a swarm's plan."""

    model_config = ConfigDict(extra="forbid")

    role: str = Field(description="The member's role (a team's role, or any name).")
    task: str = Field(description="The member's own task.")
    mode: Mode | None = Field(None, description="Its mode (a team's role may give it).")
    model: str | None = Field(None, description="provider:model (default: the routing's).")
    agent: str | None = Field(None, description="An agent definition to run it as.")
    depends_on: list[str] | None = Field(None, description="Roles whose results it needs.")


class PlannerOps(Protocol):
    """The operations the server's tools call (dispatch/planner_api.PlannerApi)."""

    async def dispatch(self, job: dict[str, Any]) -> dict[str, Any]: ...
    async def fanout(self, jobs: list[dict[str, Any]]) -> list[dict[str, Any]]: ...
    async def swarm(self, args: dict[str, Any]) -> dict[str, Any]: ...
    async def session_wait(self, session_id: str, timeout_s: float) -> dict[str, Any]: ...
    async def sessions_list(self, status: str | None, limit: int) -> dict[str, Any]: ...
    async def session_show(self, session_id: str, events: int) -> dict[str, Any]: ...
    async def session_send(
        self, session_id: str, text: str, msg_id: str | None
    ) -> dict[str, Any]: ...
    async def session_answer(
        self, session_id: str, text: str, msg_id: str | None
    ) -> dict[str, Any]: ...
    async def session_cancel(self, session_id: str) -> dict[str, Any]: ...
    async def artifact_get(self, link: str) -> dict[str, Any]: ...
    async def list_models(self) -> dict[str, Any]: ...
    def error_line(self, message: str, hint: str) -> str:
        """The contract's `swarmdeck.error` line for a refusal."""
        ...


def invalid_fields(exc: ValidationError) -> str:
    """Each field that failed, dotted, with pydantic's one-line reason (never the value
    sent: it is the caller's data)."""
    return "; ".join(
        ".".join(str(part) for part in err["loc"]) + f": {err['msg']}" for err in exc.errors()
    )


# Awaits a planner call (shaping its answer); a SwarmdeckError becomes a refusal.
Guarded = Callable[..., Awaitable[Any]]


def build_server(ops: PlannerOps) -> Any:
    """The MCP server with the planner's tools."""
    server, refusal = _planner_server(ops)

    async def guarded(call: Any, shape: Any = None) -> Any:
        """Await a planner call; a SwarmdeckError becomes the contract's refusal."""
        try:
            found = await call
            return shape(found) if shape is not None else found
        except SwarmdeckError as exc:
            return refusal(exc.message, exc.hint)

    _add_work_tools(server, ops, guarded)
    _add_session_tools(server, ops, guarded)
    return server


def _planner_server(ops: PlannerOps) -> tuple[Any, Callable[[str, str], Any]]:
    """The bare server, refusing bad arguments in the contract's words, and its refusal."""
    sdk = require_sdk()
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp_types import CallToolResult, TextContent

    def refusal(message: str, hint: str) -> Any:
        """The contract's error object, as the whole of a tool error (no SDK prefix)."""
        line = ops.error_line(message, hint)
        return CallToolResult(
            content=[TextContent(type="text", text=line)],
            structured_content=json.loads(line),
            is_error=True,
        )

    class PlannerServer(MCPServer):
        """Arguments that fail a tool's schema are refused in the contract's words too."""

        async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None):
            try:
                return await super().call_tool(name, arguments, context)
            except ToolError as exc:
                if not isinstance(exc.__cause__, ValidationError):
                    raise
                return refusal(
                    f"invalid arguments for {name}: {invalid_fields(exc.__cause__)}",
                    f"send the arguments {name}'s input schema describes (tools/list)",
                )

    server = PlannerServer(
        SERVER_NAME, instructions=INSTRUCTIONS, version=sdk.version, log_level="WARNING"
    )
    return server, refusal


def _add_work_tools(server: Any, ops: PlannerOps, guarded: Guarded) -> None:
    """The tools that start work: dispatch, fanout, swarm, and session_wait for their end."""

    @server.tool()
    async def dispatch(job: JobArgs) -> dict[str, Any]:
        """Start one bounded task on a worker; returns its `started` object at once (its
        session_id is what session_wait takes)."""
        return await guarded(ops.dispatch(job.model_dump(exclude_none=True)))

    @server.tool()
    async def fanout(
        jobs: Annotated[list[JobArgs], Field(description="The jobs, started together.")],
    ) -> dict[str, Any]:
        """Start several jobs at once (two code jobs on one workdir each need a worktree);
        returns their `started` objects in job order."""
        jobs_args = [j.model_dump(exclude_none=True) for j in jobs]
        return await guarded(ops.fanout(jobs_args), lambda found: {"started": found})

    @server.tool()
    async def swarm(
        task: Annotated[str, Field(description="What the swarm should do.")],
        workdir: Annotated[str | None, Field(description="The project it works in.")] = None,
        team: Annotated[str | None, Field(description="A team's name (or its file).")] = None,
        plan: Annotated[
            list[PlanMember] | None,
            Field(description="The members to run; skips the coordinator's decomposition."),
        ] = None,
        max_members: Annotated[int | None, Field(ge=1, description="At most this many.")] = None,
        model: Annotated[str | None, Field(description="The coordinator's provider:model.")] = None,
        timeout: Annotated[float | None, Field(ge=1, description="The limit, seconds.")] = None,
    ) -> dict[str, Any]:
        """Split a task among role-based members run in parallel and merge their results;
        returns a `swarmdeck.swarm_started` object at once (session_wait takes its
        session_id and returns the `swarmdeck.swarm` object)."""
        members = [m.model_dump(exclude_none=True) for m in plan] if plan is not None else None
        args = {
            "task": task, "workdir": workdir, "team": team, "plan": members,
            "max_members": max_members, "model": model, "timeout": timeout,
        }  # fmt: skip
        return await guarded(ops.swarm({k: v for k, v in args.items() if v is not None}))

    @server.tool()
    async def session_wait(
        session_id: Sid,
        timeout: Annotated[float, Field(ge=0, le=600, description="Seconds to wait.")] = 60,
    ) -> dict[str, Any]:
        """Wait for a session to end: its verdict (a dispatched task), the swarm's object (a
        swarm), its record (another session), or a `pending` object when it still runs after `timeout` seconds."""
        return await guarded(ops.session_wait(session_id, timeout))


def _add_session_tools(server: Any, ops: PlannerOps, guarded: Guarded) -> None:
    """The tools that read and steer sessions, their artifacts and the models."""
    from mcp_types import ToolAnnotations

    reads = ToolAnnotations(read_only_hint=True, open_world_hint=False)

    @server.tool(annotations=reads)
    async def sessions_list(
        status: Annotated[str | None, Field(description="Only sessions of this status.")] = None,
        limit: Annotated[int, Field(ge=1, le=500)] = 20,
    ) -> dict[str, Any]:
        """The newest sessions: id, status, mode, model, title, when."""
        return await guarded(ops.sessions_list(status, limit))

    @server.tool(annotations=reads)
    async def session_show(
        session_id: Sid,
        events: Annotated[int, Field(ge=0, le=1000, description="Last transcript entries.")] = 50,
    ) -> dict[str, Any]:
        """A session's record, usage, result and the end of its transcript."""
        return await guarded(ops.session_show(session_id, events))

    @server.tool()
    async def session_send(session_id: Sid, text: str, msg_id: MsgId = None) -> dict[str, Any]:
        """Send a message to a session (kept until a worker runs it)."""
        return await guarded(ops.session_send(session_id, text, msg_id))

    @server.tool()
    async def session_answer(session_id: Sid, text: str, msg_id: MsgId = None) -> dict[str, Any]:
        """Answer the question a session asked (status input_required)."""
        return await guarded(ops.session_answer(session_id, text, msg_id))

    @server.tool()
    async def session_cancel(session_id: Sid) -> dict[str, Any]:
        """Cancel a session and all its sub-agents."""
        return await guarded(ops.session_cancel(session_id))

    @server.tool(annotations=reads)
    async def artifact_get(
        link: Annotated[str, Field(description="artifact://SESSION/NAME, as a verdict names it.")],
    ) -> dict[str, Any]:
        """An artifact's content (base64 unless it is UTF-8 text)."""
        return await guarded(ops.artifact_get(link))

    @server.tool(annotations=reads)
    async def list_models() -> dict[str, Any]:
        """The exact provider:model names a job may use now, with context size and prices."""
        return await guarded(ops.list_models())
