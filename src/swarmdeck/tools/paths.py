"""Path confinement: every path a tool touches resolves inside the workdir and is no credential."""

from __future__ import annotations

import os
import re
from pathlib import Path

from swarmdeck.config import home_dir
from swarmdeck.errors import PermissionDeniedError, ToolError

# File names that hold credentials wherever they are.
CREDENTIAL_NAMES = frozenset(
    {".env", "auth.json", ".netrc", "_netrc", ".git-credentials", ".pgpass", ".pypirc"}
)
# Committed templates of .env files hold placeholders, not secrets, and a model reading a
# project needs them; every other `.env.*` (.env.local, .env.production) is refused.
ENV_TEMPLATES = frozenset({".env.example", ".env.sample", ".env.template", ".env.dist"})
# Directories whose whole content is credentials.
CREDENTIAL_DIRS = frozenset({".ssh", ".gnupg", ".aws"})
# Another process's environment (the worker's holds whatever its user exported).
_PROC_ENVIRON = re.compile(r"^/proc/(?:[^/]+/)*environ$")


def credentials_dir() -> Path:
    """The swarmdeck credentials dir of this process (follows SWARMDECK_HOME)."""
    return home_dir() / "credentials"


def _is_within(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def credential_reason(
    path: Path, creds_dir: Path | None = None, *, root: Path | None = None
) -> str | None:
    """Why `path` is a credential path ("credential file: .env"), or None if it is not.

    With `root`, only the part of `path` below it is searched for credential directories,
    so a workdir that happens to live under, say, a `.aws` folder is still usable.
    """
    name = path.name
    if name in CREDENTIAL_NAMES or (name.startswith(".env.") and name not in ENV_TEMPLATES):
        return f"credential file: {name}"
    if _PROC_ENVIRON.match(os.path.normpath(str(path))):
        return "process environment"
    parts = path.relative_to(root).parts if root and _is_within(path, root) else path.parts
    for part in parts:
        if part in CREDENTIAL_DIRS:
            return f"credential directory: {part}"
    creds = Path(os.path.realpath(creds_dir or credentials_dir()))
    # Check both spellings: `path` may be the resolved one or the name the caller used.
    if _is_within(path, creds) or _is_within(Path(os.path.realpath(path)), creds):
        return f"swarmdeck credentials directory: {creds}"
    if path.parent.name == "credentials" and name.endswith(".key"):
        return f"swarmdeck key file (another home's): {name}"
    return None


def home_reason(path: Path, root: Path) -> str | None:
    """Why `path` is refused as part of swarmdeck's home, or None.

    A workdir inside the home (a worktree under <home>/worktrees) is the tool's own; a
    workdir that is the home or holds it does not open the home's settings, providers,
    store and logs to the tools.
    """
    home = Path(os.path.realpath(home_dir()))
    real_root = Path(os.path.realpath(root))
    if real_root != home and home in real_root.parents:
        return None
    for spelling in (path, Path(os.path.realpath(path))):
        if _is_within(spelling, home):
            return f"swarmdeck's home: {home}"
    return None


def _resolve(candidate: Path, raw: str) -> Path:
    """Follow every symlink; strict where the file exists, the nearest real parent otherwise."""
    try:
        return candidate.resolve(strict=True)
    except FileNotFoundError:
        # realpath follows dangling links too, so a link to a file-to-be outside is caught.
        return Path(os.path.realpath(candidate))
    except RuntimeError as exc:  # symlink loop (Python 3.11 raises RuntimeError)
        raise PermissionDeniedError(f"symlink loop: {raw}") from exc
    except OSError as exc:
        raise ToolError(f"cannot resolve {raw}: {exc.strerror}") from exc


def confine(workdir: Path, raw: str, *, for_write: bool, creds_dir: Path | None = None) -> Path:
    """Resolve `raw` inside `workdir`, or raise PermissionDeniedError saying why not."""
    if not raw or not raw.strip():
        raise ToolError("path is empty")
    if "\0" in raw:
        raise ToolError("path contains a NUL byte")
    root = Path(workdir).resolve(strict=True)
    candidate = Path(raw) if os.path.isabs(raw) else root / raw
    lexical = Path(os.path.normpath(candidate))
    resolved = _resolve(candidate, raw)
    if not _is_within(resolved, root):
        via = " through a symlink" if _is_within(lexical, root) else ""
        raise PermissionDeniedError(f"path escapes the workdir{via}: {raw}")
    for checked in (lexical, resolved):
        reason = credential_reason(checked, creds_dir, root=root) or home_reason(checked, root)
        if reason:
            raise PermissionDeniedError(reason)
    if for_write and ".git" in resolved.relative_to(root).parts:
        # Hooks and config under .git run later on the host, outside any sandbox.
        raise PermissionDeniedError(f"writing inside .git is not allowed: {raw}")
    return resolved
