"""The portal's ASGI app (Starlette): pages, the live transcript stream, artifact downloads
and the actions, every route behind a sign-in."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from urllib.parse import quote

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from swarmdeck.errors import NotFoundError, SwarmdeckError
from swarmdeck.portal.access import COOKIE, LOGIN_TTL_S, AccessError, Login
from swarmdeck.portal.pages import (
    artifact_download,
    fleet_page,
    session_action,
    session_page,
    sessions_page,
)
from swarmdeck.portal.state import PortalState
from swarmdeck.portal.stream import TranscriptStream

STATIC = Path(__file__).parent / "static"
Handler = Callable[[Request, PortalState, Login], Awaitable[Response]]


def _error(state: PortalState, status: int, message: str, login: Login | None) -> Response:
    html = state.renderer.page("error.html", status=status, message=message, login=login)
    return HTMLResponse(html, status_code=status)


def _next_path(raw: str | None) -> str:
    # Only a path of this site: `//host` or a scheme would send the browser elsewhere.
    return raw if raw and raw.startswith("/") and not raw.startswith("//") else "/"


def guarded(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
    """A route that needs a sign-in: pages send a stranger to the sign-in form; streams,
    downloads and actions answer 401 or 403, and stored-data errors become pages."""

    async def route(request: Request) -> Response:
        state: PortalState = request.app.state.portal
        try:
            login = state.access.who(request)
        except AccessError as exc:
            if request.method == "GET" and "text/html" in request.headers.get("accept", ""):
                target = quote(request.url.path)
                return RedirectResponse(f"/login?next={target}", status_code=303)
            return _error(state, exc.status, exc.message, None)
        try:
            return await handler(request, state, login)
        except AccessError as exc:
            return _error(state, exc.status, exc.message, login)
        except NotFoundError as exc:
            return _error(state, 404, exc.one_line(), login)
        except SwarmdeckError as exc:
            return _error(state, 400, exc.one_line(), login)

    return route


async def login(request: Request) -> Response:
    """The sign-in form, or a sign-in with `?token=` (the URL the portal printed)."""
    state: PortalState = request.app.state.portal
    form = await request.form() if request.method == "POST" else {}
    token = str(form.get("token") or request.query_params.get("token") or "")
    target = _next_path(str(form.get("next") or request.query_params.get("next") or "/"))
    if not token:
        return HTMLResponse(state.renderer.page("login.html", next=target, message=None))
    try:
        cookie, _login = state.access.sign_in(token)
    except AccessError as exc:
        page = state.renderer.page("login.html", next=target, message=exc.message)
        return HTMLResponse(page, status_code=exc.status)
    response = RedirectResponse(target, status_code=303)
    response.set_cookie(
        COOKIE,
        cookie,
        max_age=int(LOGIN_TTL_S),
        httponly=True,
        samesite="strict",
        secure=state.secure,
    )
    return response


async def logout(request: Request) -> Response:
    """Forget this browser's sign-in."""
    request.app.state.portal.access.sign_out(request)
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(COOKIE)
    return response


async def stream(request: Request, state: PortalState, login: Login) -> Response:
    """A session's live transcript (server-sent events)."""
    sid = await run_in_threadpool(state.catalog.resolve_session_id, request.path_params["sid"])
    raw = request.headers.get("last-event-id") or request.query_params.get("after") or "0"
    after = int(raw) if raw.isdigit() else 0
    events = TranscriptStream(state, sid, after, login).events()
    headers = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
    return StreamingResponse(events, media_type="text/event-stream", headers=headers)


def create_app(state: PortalState) -> Starlette:
    """The portal over this state."""

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        state.feed.start()
        try:
            yield
        finally:
            await state.feed.stop()

    routes = [
        Route("/login", login, methods=["GET", "POST"]),
        Route("/logout", logout, methods=["POST"]),
        Route("/", guarded(fleet_page)),
        Route("/sessions", guarded(sessions_page)),
        Route("/s/{sid}", guarded(session_page)),
        Route("/s/{sid}/stream", guarded(stream)),
        Route("/s/{sid}/artifacts/{name:path}", guarded(artifact_download)),
        Route("/s/{sid}/{action}", guarded(session_action), methods=["POST"]),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.portal = state
    return app
