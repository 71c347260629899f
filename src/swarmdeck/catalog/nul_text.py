"""A text column that keeps every character a model can send, NUL included, on both stores.

PostgreSQL's `text` cannot hold U+0000 (the write fails with "cannot contain NUL (0x00)
bytes"); SQLite's can. Stripping NULs would lose what the model said, so they are escaped
instead, the same way on both stores, and read back exactly: the escape character is
U+E000 (the first private-use code point, which no text carries by accident), NUL is
stored as U+E000 "0" and U+E000 itself as U+E000 U+E000. Text without either character,
which is all text in practice, is stored as it is.

Only free-text columns need this: JSON columns hold NUL as the escape `\\u0000` already.
The column type is schema.NulSafeText; this module is plain Python, so the fleet path's
bare-driver catalog (direct.py) stores and reads the same text without SQLAlchemy.
"""

from __future__ import annotations

import re

ESCAPE = "\ue000"
_ESCAPED = re.compile(ESCAPE + "(.)", re.DOTALL)


def escape_nul(text: str) -> str:
    """Text as stored: NUL and the escape character escaped."""
    if "\x00" not in text and ESCAPE not in text:
        return text
    return text.replace(ESCAPE, ESCAPE + ESCAPE).replace("\x00", ESCAPE + "0")


def unescape_nul(stored: str) -> str:
    """Stored text as it was written."""
    if ESCAPE not in stored:
        return stored
    return _ESCAPED.sub(lambda m: "\x00" if m.group(1) == "0" else m.group(1), stored)


# The sessions' free-text columns (schema.NulSafeText), for readers without SQLAlchemy.
SESSION_TEXT_COLUMNS = ("title", "task", "system_message", "final_text", "error")
