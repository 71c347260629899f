"""One MCP server as this process runs it: started on first use, shared by every session of
the process, restarted on the next use after it died.

The SDK's client lives in a task of its own (its transports are anyio task groups, which
must be entered and left in one task); sessions call through it from their own tasks.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import time
from collections.abc import Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from swarmdeck.errors import ToolError
from swarmdeck.integrations.mcp.config import KEY_REF_RE, McpServer
from swarmdeck.integrations.mcp.sdk import require_sdk
from swarmdeck.integrations.mcp.shield import NoShield, shielded_argv

log = logging.getLogger("swarmdeck.mcp")
# A server that failed to start is not tried again for this long (each turn of each session
# would otherwise wait for its start-up timeout again).
RETRY_START_AFTER_S = 30.0
MAX_TOOL_PAGES = 50
# How long a stop waits for the SDK's own shutdown of a server (it escalates to SIGKILL
# within a few seconds).
STOP_WAIT_S = 8.0
# Runners of abandoned starts, kept until their cleanup ends (a task nobody holds may be
# collected before it finishes).
_CLEANING: set[asyncio.Task[None]] = set()

# Reads a stored key by name (None when there is none).
SecretLookup = Callable[[str], str | None]


class McpStartError(Exception):
    """A server could not be started or listed; the message is one line for the user."""


@dataclass(frozen=True)
class ListedTool:
    """A tool as the server lists it."""

    name: str
    description: str
    input_schema: dict[str, Any]


def resolve_refs(values: dict[str, str], lookup: SecretLookup, server: str) -> dict[str, str]:
    """`${key:NAME}` references replaced by the stored keys (in the process that starts
    the server, never written anywhere); a missing key is an error that names it."""

    def one(match: Any) -> str:
        name = match.group(1)
        value = lookup(name)
        if value is None:
            raise McpStartError(
                f"MCP server {server}: no stored key {name!r} for ${{key:{name}}} "
                f"(store it with `swarmdeck key set {name} --mcp`)"
            )
        return value

    return {k: KEY_REF_RE.sub(one, v) for k, v in values.items()}


class ServerConnection:
    """A started (or startable) MCP server."""

    def __init__(
        self,
        server: McpServer,
        lookup: SecretLookup,
        log_dir: Path | None,
        cwd: Path | None = None,
    ) -> None:
        self.server = server
        self.lookup = lookup
        self.log_dir = log_dir
        self.cwd = cwd
        self._lock = asyncio.Lock()
        self._client: Any = None
        self._tools: list[ListedTool] = []
        self._runner: asyncio.Task[None] | None = None
        self._stop: asyncio.Event | None = None
        self._gone: asyncio.Event | None = None
        self._scope: Any = None
        self.failure: str | None = None
        self.failures = 0
        self._failed_at = 0.0
        self.starts = 0

    @property
    def name(self) -> str:
        """The server's name."""
        return self.server.name

    @property
    def alive(self) -> bool:
        """True while the server runs and answers."""
        return self._client is not None and self._gone is not None and not self._gone.is_set()

    async def tools(self) -> list[ListedTool]:
        """The server's tools, starting it first if it is not running (McpStartError when it
        cannot be started within its start-up timeout, or failed to just now)."""
        async with self._lock:
            if self.alive:
                return self._tools
            if (
                self.failure is not None
                and time.monotonic() - self._failed_at < RETRY_START_AFTER_S
            ):
                raise McpStartError(self.failure)
            try:
                await self._start()
            except McpStartError as exc:
                self.failure = str(exc)
                self.failures += 1
                self._failed_at = time.monotonic()
                # Debug only: the caller tells the user (a session's notice, `mcp show`'s
                # error line); a warning here printed the same line a second time.
                log.debug("%s", self.failure)
                raise
            self.failure = None
            return self._tools

    async def _start(self) -> None:
        await self._shutdown()
        timeout = self.server.entry.startup_timeout
        started: asyncio.Future[tuple[Any, list[ListedTool]]] = (
            asyncio.get_running_loop().create_future()
        )
        self._stop, self._gone = asyncio.Event(), asyncio.Event()
        # A fresh context: the runner outlives the session that started it, and must not
        # carry its workflow's (or its span's) context into every later call.
        self._runner = asyncio.get_running_loop().create_task(
            self._serve(started, self._stop, self._gone), context=contextvars.Context()
        )
        self.starts += 1
        try:
            self._client, self._tools = await asyncio.wait_for(asyncio.shield(started), timeout)
        except TimeoutError:
            self._abandon()
            raise McpStartError(
                f"MCP server {self.name} did not start within {timeout:g}s "
                f"(raise `startupTimeout` in {self.server.source} if it is slow); "
                "going on without it"
            ) from None
        except McpStartError:
            self._abandon()
            raise
        except Exception as exc:
            self._abandon()
            raise McpStartError(
                f"MCP server {self.name} failed to start: {_one_line(exc)}; going on without it"
            ) from None

    async def _serve(
        self,
        started: asyncio.Future[tuple[Any, list[ListedTool]]],
        stop: asyncio.Event,
        gone: asyncio.Event,
    ) -> None:
        """Run the client until told to stop or the server goes away."""
        import anyio

        try:
            # Stopped through an anyio scope, never a plain task.cancel(): the SDK's shutdown
            # of a stdio server (close stdin, wait, SIGTERM, SIGKILL) is shielded against
            # the former and cut short by the latter, which can leave the server running.
            with anyio.CancelScope() as scope:
                self._scope = scope
                async with AsyncExitStack() as stack:
                    client = await self._open(stack)
                    tools = await _list_all(client)
                    if not started.done():
                        started.set_result((client, tools))
                    await stop.wait()
            if not started.done():
                started.cancel()
        except BaseException as exc:
            if not started.done():
                if isinstance(exc, asyncio.CancelledError):
                    # Stopped while starting (the process is closing): the start fails
                    # as a start does, not by cancelling the session that waits for it.
                    started.set_exception(
                        McpStartError(f"MCP server {self.name} was stopped while starting")
                    )
                else:
                    started.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
            log.debug("MCP server %s ended: %s", self.name, _one_line(exc))
        finally:
            gone.set()

    async def _open(self, stack: AsyncExitStack) -> Any:
        """Start the transport and the SDK's client on `stack`."""
        sdk = require_sdk()
        entry = self.server.entry
        if entry.transport == "stdio":
            assert entry.command is not None
            try:
                argv = shielded_argv(entry.command, list(entry.args), self.cwd)
            except NoShield as exc:
                raise McpStartError(str(exc)) from None
            params = sdk.StdioServerParameters(
                command=argv[0],
                args=argv[1:],
                # Merged over the SDK's small default set (HOME, PATH, USER...): none of
                # this process's own variables (provider keys) reach the server.
                env=resolve_refs(entry.env, self.lookup, self.name) or None,
                cwd=self.cwd,
            )
            transport = sdk.stdio_client(params, errlog=self._errlog(stack))
        else:
            assert entry.url is not None
            headers = resolve_refs(entry.headers, self.lookup, self.name)
            http = await stack.enter_async_context(sdk.create_mcp_http_client(headers=headers))
            transport = sdk.streamable_http_client(entry.url, http_client=http)
        client = sdk.Client(transport, client_info=sdk.client_info())
        return await stack.enter_async_context(client)

    def _errlog(self, stack: AsyncExitStack) -> TextIO:
        """Where a stdio server's stderr goes: a 0600 log file of the server, not the
        terminal of a planner that reads stdout (or /dev/null without a log dir)."""
        if self.log_dir is None:
            return stack.enter_context(open("/dev/null", "w"))
        self.log_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        path = self.log_dir / f"{self.name}.log"
        fd = _open_private(path)
        return stack.enter_context(open(fd, "a", encoding="utf-8", errors="replace"))

    async def call(self, tool: str, arguments: dict[str, Any], timeout: float) -> Any:
        """Call one of the server's tools; ToolError (shown to the model) when the server is
        down, stops during the call, or does not answer within `timeout`."""
        sdk = require_sdk()
        try:
            await self.tools()
        except McpStartError as exc:
            raise ToolError(str(exc)) from None
        client, gone = self._client, self._gone
        assert gone is not None
        call = asyncio.ensure_future(
            client.call_tool(tool, arguments, read_timeout_seconds=timeout)
        )
        ended = asyncio.ensure_future(gone.wait())
        try:
            done, _ = await asyncio.wait(
                {call, ended}, timeout=timeout + 1.0, return_when=asyncio.FIRST_COMPLETED
            )
        except asyncio.CancelledError:
            call.cancel()
            raise
        finally:
            ended.cancel()
        if call not in done:
            call.cancel()
            with contextlib.suppress(BaseException):
                await call
            if gone.is_set():
                await self._forget(client)
                raise ToolError(self._stopped(tool))
            raise ToolError(f"MCP tool {tool} of {self.name} did not answer within {timeout:g}s")
        try:
            return call.result()
        except sdk.MCPError as exc:
            if exc.code == sdk.CONNECTION_CLOSED:
                await self._forget(client)
                raise ToolError(self._stopped(tool)) from None
            if exc.code == sdk.REQUEST_TIMEOUT:
                raise ToolError(
                    f"MCP tool {tool} of {self.name} did not answer within {timeout:g}s "
                    f"(`callTimeout` in {self.server.source})"
                ) from None
            raise ToolError(f"MCP server {self.name}: {exc.message}") from None
        except (OSError, EOFError) as exc:
            await self._forget(client)
            raise ToolError(f"{self._stopped(tool)} ({_one_line(exc)})") from None

    def _stopped(self, tool: str) -> str:
        return (
            f"the MCP server {self.name} stopped during the call to {tool}; it is started "
            "again on the next call (check what the call did before repeating it)"
        )

    async def _forget(self, client: Any) -> None:
        """The server died under `client`: stop its runner, so the next use starts anew."""
        async with self._lock:
            if self._client is client:
                await self._shutdown()

    async def _shutdown(self) -> None:
        """Stop the runner (the SDK's exit ends a stdio server) and forget the client."""
        runner, stop, scope = self._runner, self._stop, self._scope
        self._client, self._runner, self._scope = None, None, None
        if runner is None:
            return
        if stop is not None:
            stop.set()
        done, _ = await asyncio.wait({runner}, timeout=STOP_WAIT_S)
        if not done:
            if scope is not None:
                scope.cancel()
            await asyncio.wait({runner}, timeout=STOP_WAIT_S)

    def _abandon(self) -> None:
        """Give up a start that failed or hangs: its runner is cancelled and cleans up (the
        SDK gives a stdio server seconds to exit) in the background, while the session goes
        on without the server."""
        runner, scope = self._runner, self._scope
        self._client, self._runner, self._scope = None, None, None
        if runner is not None and not runner.done():
            if scope is not None:
                scope.cancel()
            else:
                runner.cancel()  # not yet inside its scope: nothing was started
            _CLEANING.add(runner)
            runner.add_done_callback(_CLEANING.discard)

    async def close(self) -> None:
        """Stop the server (the process is ending): a start in flight, which holds the lock
        until its start-up timeout, is abandoned at once rather than waited for."""
        if self._lock.locked():
            self._abandon()
        async with self._lock:
            await self._shutdown()


async def finish_cleanups(timeout: float = 10.0) -> None:
    """Wait (bounded) for abandoned starts to finish stopping their servers."""
    if _CLEANING:
        await asyncio.wait(set(_CLEANING), timeout=timeout)


async def _list_all(client: Any) -> list[ListedTool]:
    """Every tool of the server, page by page (bounded: a server that pages forever stops)."""
    tools: list[ListedTool] = []
    cursor: str | None = None
    for _ in range(MAX_TOOL_PAGES):
        page = await client.list_tools(cursor=cursor)
        tools += [ListedTool(t.name, t.description or "", dict(t.input_schema)) for t in page.tools]
        cursor = page.next_cursor
        if not cursor:
            break
    return tools


def server_cwd(server: McpServer, workdir: Path) -> Path | None:
    """Where a stdio server runs: its entry's `cwd` (relative to the session's workdir),
    else the session's workdir itself; None for an HTTP server (no process of ours)."""
    if server.entry.transport != "stdio":
        return None
    if server.entry.cwd is None:
        return workdir
    return workdir / Path(server.entry.cwd).expanduser()


def _open_private(path: Path) -> int:
    import os

    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)


def _one_line(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        return _one_line(exc.exceptions[0])
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:300]
