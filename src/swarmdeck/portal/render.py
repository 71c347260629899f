"""HTML from the portal's templates; every value printed passes the redactor on its way
out, whatever the template, so a key that reached a transcript never reaches a page."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup

from swarmdeck.views.figures import TokenFigures
from swarmdeck.views.transcript import Entry

TEMPLATES = Path(__file__).parent / "templates"


def _when(ts: float | None) -> str:
    return dt.datetime.fromtimestamp(ts).strftime("%H:%M:%S") if ts else ""


def _day(ts: float | None) -> str:
    return dt.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M") if ts else ""


def _num(value: int | float | None) -> str:
    return f"{value:,}" if value is not None else "-"


def _usd(value: float | None) -> str:
    return f"${value:.4f}" if value is not None else "unknown"


def entry_dom_id(entry: Entry) -> str:
    """A stable element id: a call updated by its result replaces its own element."""
    return f"e{entry.event_id}-{entry.call_id or entry.kind}"


def _redacted(redact: Callable[[str], str], value: Any) -> Any:
    # Markup (a fragment rendered already) stays Markup, or it would be escaped twice.
    if isinstance(value, Markup):
        return Markup(redact(str(value)))
    return redact(value) if isinstance(value, str) else value


class Renderer:
    """The templates with the redactor as every printed value's last filter."""

    def __init__(self, redact: Callable[[str], str]) -> None:
        self.env = jinja2.Environment(
            loader=jinja2.FileSystemLoader(TEMPLATES),
            autoescape=True,
            finalize=lambda value: _redacted(redact, value),
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self.env.filters.update(
            when=_when, day=_day, num=_num, usd=_usd, dom_id=entry_dom_id, figures=TokenFigures.of
        )

    def page(self, name: str, **context: Any) -> str:
        """A whole page."""
        return self.env.get_template(name).render(**context)
