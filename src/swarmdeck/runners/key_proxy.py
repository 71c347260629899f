"""A per-run proxy on loopback that puts the provider's key on a runner's model calls.

A runner and its own shell tool share one sandbox, so any key file the runner can read,
its shell could read too. The runner is given a per-run token instead, and a base URL on
this proxy; the proxy checks the token, swaps in the real key and passes the call on,
streaming the answer back as it comes. The token is worth nothing once the run ends, and
the key never enters the sandbox. The proxy also notes when the first request came and
the last answer ended (the dispatch bench reads them from the run's record).
"""

from __future__ import annotations

import hmac
import json
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from aiohttp import ClientSession, ClientTimeout, web

from swarmdeck.runners.base import Wire

# Headers that belong to one hop, or that we set ourselves.
_DROPPED = frozenset(
    {
        "host",
        "authorization",
        "x-api-key",
        "content-length",
        "connection",
        "keep-alive",
        "transfer-encoding",
        "te",
        "upgrade",
        "proxy-authorization",
        "accept-encoding",
    }
)
_HOP = frozenset({"content-length", "transfer-encoding", "connection", "content-encoding"})
CHUNK = 16_384


@dataclass
class ProxyClock:
    """When the run's first model call arrived, and when its last answer ended."""

    first_request: float | None = None
    last_response: float | None = None
    requests: int = 0
    refused: int = 0


@dataclass
class KeyProxy:
    """Serves one run: `base_url` for the runner, `token` in its config file."""

    upstream: str
    wire: Wire
    key: Callable[[], str | None]
    token: str = field(default_factory=lambda: "sdrun-" + secrets.token_urlsafe(24))
    clock: ProxyClock = field(default_factory=ProxyClock)
    # The model turns the run may still take (None: no cap). A runner runs its tools and
    # asks again before its own output shows the launcher the capped turn, so the cap is
    # held here too: the request past it is refused, never passed on and never paid for.
    turns_left: int | None = None
    capped: bool = False
    _runner: web.AppRunner | None = None
    _client: ClientSession | None = None
    _port: int = 0

    @property
    def base_url(self) -> str:
        """The URL the runner calls (the provider's path shape: `/v1` for OpenAI)."""
        root = f"http://127.0.0.1:{self._port}"
        return f"{root}/v1" if self.wire == "openai" else root

    async def start(self) -> None:
        """Listen on a free loopback port."""
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._forward)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        server = site._server
        assert server is not None and server.sockets  # type: ignore[attr-defined]
        self._port = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]
        self._client = ClientSession(timeout=ClientTimeout(total=None, sock_read=600))

    async def close(self) -> None:
        """Stop listening; the token dies with the proxy."""
        if self._client is not None:
            await self._client.close()
        if self._runner is not None:
            await self._runner.cleanup()

    def _allowed(self, request: web.Request) -> bool:
        given = request.headers.get("x-api-key") or ""
        auth = request.headers.get("authorization") or ""
        if auth.lower().startswith("bearer "):
            given = auth[7:].strip()
        return hmac.compare_digest(given.encode(), self.token.encode())

    def _upstream_url(self, request: web.Request) -> str:
        path = request.match_info["tail"]
        base = self.upstream.rstrip("/")
        if self.wire == "openai" and path.startswith("v1/") and base.endswith("/v1"):
            path = path[3:]  # the upstream base already names /v1
        query = f"?{request.query_string}" if request.query_string else ""
        return f"{base}/{path}{query}"

    def _headers(self, request: web.Request) -> dict[str, str]:
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _DROPPED}
        key = self.key() or ""
        if self.wire == "anthropic":
            headers["x-api-key"] = key
        else:
            headers["Authorization"] = f"Bearer {key}"
        return headers

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        if not self._allowed(request):
            self.clock.refused += 1
            return web.json_response({"error": {"message": "unknown run token"}}, status=401)
        self.clock.requests += 1
        if self.clock.first_request is None:
            self.clock.first_request = time.time()
        assert self._client is not None
        body = await request.read()
        turn = self.turns_left is not None and _asks_for_a_turn(body)
        if turn and self.turns_left is not None and self.turns_left <= 0:
            self.capped = True
            message = "swarmdeck: the session's max_turns is reached; the run stops here"
            error = {"type": "invalid_request_error", "message": message}
            return web.json_response({"type": "error", "error": error}, status=400)
        async with self._client.request(
            request.method, self._upstream_url(request), headers=self._headers(request), data=body
        ) as upstream:
            if turn and upstream.status == 200 and self.turns_left is not None:
                self.turns_left -= 1
            reply = web.StreamResponse(status=upstream.status, reason=upstream.reason)
            for name, value in upstream.headers.items():
                if name.lower() not in _HOP:
                    reply.headers[name] = value
            await reply.prepare(request)
            async for chunk in upstream.content.iter_chunked(CHUNK):
                await reply.write(chunk)
            await reply.write_eof()
        self.clock.last_response = time.time()
        return reply


def _asks_for_a_turn(body: bytes) -> bool:
    """A request for a turn of the agent's loop: one offering tools, on every wire (a
    runner's side requests, such as a title for its session, offer none)."""
    try:
        data = json.loads(body)
    except ValueError:
        return False
    return isinstance(data, dict) and bool(data.get("tools"))
