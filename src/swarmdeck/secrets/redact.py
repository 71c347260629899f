"""The one redaction filter every persisted or transmitted text passes through."""

from __future__ import annotations

import base64
import re
import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from swarmdeck.secrets.dumps import REDACTED, mask_dumps

if TYPE_CHECKING:
    from swarmdeck.secrets.store import CredentialStore

# Shorter "secrets" would redact trivia ("test", "admin") all over transcripts.
MIN_SECRET_LEN = 8
CONFIGURED_KEY = "configured key"

# Each credential shape: name -> (what users are told, guard, start, label, value).
# Every match begins with its literal `start`, so redact() jumps between starts with a cheap
# search and tries the full pattern only there (several times faster than running the whole
# alternation at every position). `guard` is a lookbehind that keeps "task-..." from reading
# as "sk-...". `start + label` is kept verbatim ("Bearer ", "api_key = ") so the reader sees
# what was there; only `value` becomes [REDACTED].
_SHAPES: dict[str, tuple[str, str, str, str, str]] = {
    "pem": (
        "private key",
        "",
        "-----BEGIN",
        "",
        r"[A-Z ]*PRIVATE KEY-----[\s\S]*?(?:-----END[A-Z ]*PRIVATE KEY-----|\Z)",
    ),
    # Anthropic before OpenAI: "sk-ant-..." also fits the OpenAI shape.
    "anthropic": ("Anthropic key", r"(?<![\w-])", "sk-ant-", "", r"[\w-]{20,}"),
    "openai": ("OpenAI key", r"(?<![\w-])", "sk-", "", r"(?:proj-)?[\w-]{20,}"),
    "aws": ("AWS access key id", r"(?<![A-Z0-9])", "AKIA", "", r"[0-9A-Z]{16}(?![A-Z0-9])"),
    "github": ("GitHub token", r"(?<!\w)", r"gh[pousr]_|github_pat_", "", r"\w{20,}"),
    "slack": ("Slack token", r"(?<![A-Za-z0-9])", r"xox[abpr]-", "", r"[A-Za-z0-9-]{10,}"),
    "google": ("Google API key", r"(?<![\w-])", "AIza", "", r"[\w-]{35}"),
    # Labelled values (`Bearer x`, `OPENAI_API_KEY=x`, `"password": "x"`) must hold a digit,
    # so prose ("the bearer of this letter", "password: make it strong") and code
    # (`api_key=os.environ["X"]`, `password=self.password`) survive; exact keys are caught above.
    "bearer": (
        "bearer token",
        r"(?<!\w)",
        r"[Bb](?:earer|EARER)",
        r"\s+",
        r"(?=[\w.~+/=-]*\d)[\w.~+/=-]{12,}",
    ),
    "api_key": (
        "API key assignment",
        "",
        r"[Aa][Pp][Ii][_-]?[Kk][Ee][Yy]",
        r"[\"']?\s*[:=]\s*[\"']?",
        r"(?=[^\s\"',;&]*\d)[\w.~+/=-]{8,}(?=$|[\s\"',;&])",
    ),
    "password": (
        "password",
        "",
        r"[Pp][Aa][Ss][Ss][Ww]",
        r"(?i:(?:or)?d)[\"']?\s*[:=]\s*[\"']?",
        r"(?=[^\s\"',;&]*\d)[^\s\"',;&]{4,}",
    ),
    # scheme://user:secret@host, as in database and proxy URLs.
    "url_password": ("URL credentials", "", "://", r"[^/\s:@]{1,256}:", r"[^/\s@]{3,256}(?=@)"),
}


def _shape_regex(name: str, guard: str, start: str, label: str, value: str) -> str:
    """One named alternative; start and label go in a `<name>_keep` group when labelled."""
    head = f"{guard}(?:{start})"
    body = f"(?P<{name}_keep>{head}{label}){value}" if label else f"{head}{value}"
    return f"(?P<{name}>{body})"


# ASCII: `\w` must not stretch a key over accented letters or other scripts.
_START = re.compile("|".join(spec[2] for spec in _SHAPES.values()), re.ASCII)
_PATTERN = re.compile(
    "|".join(_shape_regex(name, *spec[1:]) for name, spec in _SHAPES.items()), re.ASCII
)


def _replace(match: re.Match[str]) -> str:
    """Replace a shape with [REDACTED], keeping its label group if it has one."""
    keep = match.groupdict().get(f"{match.lastgroup}_keep")
    return f"{keep}{REDACTED}" if keep else REDACTED


def _find_shape(text: str, pos: int = 0) -> re.Match[str] | None:
    """The first credential shape at or after `pos`, trying the full pattern only at starts."""
    while (hit := _START.search(text, pos)) is not None:
        match = _PATTERN.match(text, hit.start())
        if match is not None:
            return match
        pos = hit.start() + 1
    return None


def _redact_shapes(text: str) -> str:
    """`text` with every credential shape replaced."""
    parts: list[str] = []
    last = 0
    while (match := _find_shape(text, last)) is not None:
        parts += (text[last : match.start()], _replace(match))
        last = match.end()
    if not parts:
        return text
    parts.append(text[last:])
    return "".join(parts)


def base64_cores(raw: bytes) -> list[str]:
    """What base64 of a longer text shows of `raw`, at each of the three byte alignments it
    can start at (only the part every alignment fixes is kept), plain and URL-safe."""
    cores = []
    for shift in range(3):
        for encode in (base64.b64encode, base64.urlsafe_b64encode):
            text = encode(b"\0" * shift + raw).decode()
            # The first quartet mixes in the bytes before the secret, the last partial one
            # the bytes after it.
            cores.append(text[4 if shift else 0 : (shift + len(raw)) // 3 * 4])
    return [c for c in dict.fromkeys(cores) if len(c) >= MIN_SECRET_LEN]


def encoded_forms(secret: str) -> list[str]:
    """The secret and the ways a tool could print it on one line: reversed (`rev`), hex
    (`xxd -p`) and base64 (secrets/dumps.py reads the layouts that spread it over lines)."""
    raw = secret.encode()
    forms = [secret, secret[::-1], raw.hex(), raw.hex().upper(), *base64_cores(raw)]
    return [f for f in dict.fromkeys(forms) if len(f) >= MIN_SECRET_LEN]


class Redactor:
    """Replaces configured keys (and their encoded forms) and common credential shapes
    with [REDACTED]."""

    def __init__(self, known_secrets: Iterable[str] = ()) -> None:
        self._lock = threading.Lock()
        # Immutable tuples swapped on add(): redact() reads them without taking the lock.
        self._secrets: tuple[str, ...] = ()
        self._known: tuple[str, ...] = ()
        self._raw: tuple[bytes, ...] = ()
        self._base64: tuple[str, ...] = ()
        for secret in known_secrets:
            self.add(secret)

    def __repr__(self) -> str:
        return f"Redactor({len(self._secrets)} known secrets)"

    def add(self, secret: str) -> None:
        """Redact `secret` from now on (ignored if shorter than 8 characters)."""
        secret = (secret or "").strip()
        if len(secret) < MIN_SECRET_LEN:
            return
        with self._lock:
            if secret in self._secrets:
                return
            self._secrets = (*self._secrets, secret)
            self._raw = (*self._raw, secret.encode())
            self._base64 = (*self._base64, *base64_cores(secret.encode()))
            forms = {*self._known, *encoded_forms(secret)}
            # Longest first, so a secret that contains another is replaced whole.
            self._known = tuple(sorted(forms, key=len, reverse=True))

    def redact(self, text: str) -> str:
        """`text` with every known secret and credential shape replaced by [REDACTED]."""
        if not text:
            return text
        # Dumps first: a plain replacement inside one dump line would cut the run the
        # dump reader needs to see the rest of the key.
        text = mask_dumps(text, self._raw, self._base64)
        for secret in self._known:
            if secret in text:
                text = text.replace(secret, REDACTED)
        return _redact_shapes(text)

    def redact_obj(self, obj: Any) -> Any:
        """A copy of `obj` with every string inside dicts, lists and tuples redacted."""
        if isinstance(obj, str):
            return self.redact(obj)
        if isinstance(obj, dict):
            return {self.redact_obj(k): self.redact_obj(v) for k, v in obj.items()}
        if isinstance(obj, list):
            return [self.redact_obj(v) for v in obj]
        if isinstance(obj, tuple):
            return tuple(self.redact_obj(v) for v in obj)
        return obj

    def contains_secret(self, text: str) -> str | None:
        """The kind of secret found in `text` ("configured key" or a shape name), or None."""
        if not text:
            return None
        if any(secret in text for secret in self._known):
            return CONFIGURED_KEY
        if mask_dumps(text, self._raw, self._base64) != text:
            return CONFIGURED_KEY
        match = _find_shape(text)
        return _SHAPES[match.lastgroup][0] if match and match.lastgroup else None


_default_lock = threading.Lock()
_default: Redactor | None = None


def default_redactor() -> Redactor:
    """The process-wide redactor every sink uses (created empty on first use)."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Redactor()
        return _default


def set_default_redactor(redactor: Redactor) -> None:
    """Make `redactor` the process-wide one."""
    global _default
    with _default_lock:
        _default = redactor


def load_redactor(store: CredentialStore) -> Redactor:
    """A redactor that knows every key in `store` (a key file with loose permissions raises)."""
    redactor = Redactor()
    for provider in store.providers():
        key = store.get(provider)
        if key:
            redactor.add(key)
    return redactor
