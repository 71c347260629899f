"""Session ids: short, time-sortable, unguessable."""

from __future__ import annotations

import secrets
import time


def new_session_id() -> str:
    """A short, time-sortable, unguessable id."""
    return f"{int(time.time() * 1000):011x}{secrets.token_hex(3)}"
