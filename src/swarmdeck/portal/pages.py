"""The portal's pages and actions. Each reads through the views the TUI reads (fleet,
tree, detail, transcript), off the event loop, and renders one template."""

from __future__ import annotations

import mimetypes
from pathlib import Path
from urllib.parse import quote

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from swarmdeck.errors import NotFoundError
from swarmdeck.portal.access import Login
from swarmdeck.portal.facts import inspector_html, load_detail, transcript_entries
from swarmdeck.portal.state import PortalState
from swarmdeck.runtime.session_actions import ActionResult
from swarmdeck.views.fleet_status import fleet_summary
from swarmdeck.views.tree import TreeFilter

ACTIONS = ("send", "answer", "cancel", "resume")


async def fleet_page(request: Request, state: PortalState, login: Login) -> Response:
    """Hosts and their workers, the queue, takeovers, today's spend per model."""
    summary = await run_in_threadpool(fleet_summary, state.catalog, state.registry)
    fleet = await run_in_threadpool(state.index.fleet)
    needs_you = sum(1 for r in fleet.rows.values() if r.needs_me)
    html = state.renderer.page(
        "fleet.html", s=summary, login=login, sessions=len(fleet.rows), needs_you=needs_you
    )
    return HTMLResponse(html)


async def sessions_page(request: Request, state: PortalState, login: Login) -> Response:
    """The session tree under a filter (status, text, needs you), a page at a time."""
    q = request.query_params
    filt = TreeFilter(
        status=q.get("status") or None, text=q.get("q", "").strip(), needs_me=q.get("needs") == "1"
    )
    page_no = int(q["page"]) if q.get("page", "").isdigit() else 1
    page = await run_in_threadpool(state.index.tree_page, filt, page_no)
    html = state.renderer.page("sessions.html", p=page, f=filt, login=login, query=q)
    return HTMLResponse(html)


async def session_page(request: Request, state: PortalState, login: Login) -> Response:
    """One session: its inspector, actions, artifacts and live transcript."""
    sid = await run_in_threadpool(state.catalog.resolve_session_id, request.path_params["sid"])
    if sid != request.path_params["sid"]:
        return RedirectResponse(f"/s/{sid}", status_code=303)
    detail = await run_in_threadpool(load_detail, state, sid, True)
    entries, cursor = transcript_entries(detail)
    inspector = inspector_html(state, detail, login)
    html = state.renderer.page(
        "session.html",
        d=detail,
        row=detail.row,
        entries=entries,
        cursor=cursor,
        inspector=inspector,
        said=request.query_params.get("said"),
        failed=request.query_params.get("failed") == "1",
        login=login,
    )
    return HTMLResponse(html)


def _read_artifact(state: PortalState, sid: str, name: str) -> tuple[bytes, str]:
    meta = state.catalog.artifact(sid, name)
    if meta is None:
        raise NotFoundError(f"session {sid} has no artifact named {name!r}")
    data = Path(meta["path"]).read_bytes()
    kind = mimetypes.guess_type(name)[0] or "application/octet-stream"
    if b"\0" not in data:
        try:  # text goes through the redactor like every other byte the portal sends
            data = state.redact(data.decode("utf-8")).encode("utf-8")
            kind = kind if kind.startswith("text/") else "text/plain"
        except UnicodeDecodeError:
            pass
    return data, kind


async def artifact_download(request: Request, state: PortalState, login: Login) -> Response:
    """An artifact's bytes, as a download."""
    sid = await run_in_threadpool(state.catalog.resolve_session_id, request.path_params["sid"])
    name = request.path_params["name"]
    data, kind = await run_in_threadpool(_read_artifact, state, sid, name)
    filename = quote(Path(name).name)
    headers = {"Content-Disposition": f"attachment; filename*=UTF-8''{filename}"}
    return Response(data, media_type=kind, headers=headers)


def _act(state: PortalState, sid: str, action: str, text: str) -> ActionResult:
    actions = state.actions
    if action == "send":
        return actions.send(sid, text)
    if action == "answer":
        return actions.answer(sid, text)
    if action == "cancel":
        return actions.cancel(sid)
    record = state.catalog.get_session(sid)
    return actions.resume(sid, Path(record.run_dir))


async def session_action(request: Request, state: PortalState, login: Login) -> Response:
    """Send, answer, cancel or resume, from a form: operators only, with the CSRF token."""
    action = request.path_params["action"]
    if action not in ACTIONS:
        raise NotFoundError(f"no action {action!r}: the portal knows {', '.join(ACTIONS)}")
    form = await request.form()
    state.access.may_act(login, str(form.get("csrf") or ""))
    sid = await run_in_threadpool(state.catalog.resolve_session_id, request.path_params["sid"])
    result = await run_in_threadpool(_act, state, sid, action, str(form.get("text") or ""))
    said = quote(state.redact(result.message))
    failed = "" if result.ok else "&failed=1"
    return RedirectResponse(f"/s/{sid}?said={said}{failed}", status_code=303)
