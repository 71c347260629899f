"""A project's instructions for agents: the AGENTS.md files (CLAUDE.md where a directory has
none) from the repository's root down to the session's workdir, as Codex, OpenCode and
Claude Code read them, so a worker follows the conventions the project wrote for agents.

Read once, when a session is created, on the machine that submits it (a worker elsewhere
may hold no checkout), and kept in the session's options: every turn then sends the same
bytes, and sub-agents and swarm members inherit them into their shared prefix.

A file is read only where it lies: a regular file inside the repository and outside
swarmdeck's home (a symlink planted in a repository must not carry a key file into a
prompt), and what it says passes the redactor as a tool's output does.
"""

from __future__ import annotations

from pathlib import Path

from swarmdeck.secrets.redact import Redactor

PROJECT_DOCS_OPTION = "project_docs"
DOC_NAMES = ("AGENTS.md", "CLAUDE.md")
# Codex's default cap (project_doc_max_bytes): a generated file must not fill the window.
MAX_BYTES = 32 * 1024
# Read of each file: past the cap, with room for a key that straddles it to be recognised
# whole (the redactor's longest pattern is far shorter).
READ_BYTES = MAX_BYTES + 4096
HEADING = "Project instructions"


def repository_root(workdir: Path) -> Path:
    """The nearest directory at or above `workdir` that holds `.git`, else `workdir`."""
    for directory in (workdir, *workdir.parents):
        if (directory / ".git").exists():
            return directory
    return workdir


def project_docs(workdir: Path, home: Path, redactor: Redactor) -> str:
    """The project's instructions for a session in `workdir`, or "" when it has none."""
    workdir = workdir.resolve()
    root = repository_root(workdir)
    # From the root down: the nearer a file is to the workdir, the later it speaks.
    chain = reversed([d for d in (workdir, *workdir.parents) if d.is_relative_to(root)])
    parts, unread = [], 0
    for directory in chain:
        found = _doc_of(directory, root, home.resolve())
        if found is not None:
            name = found.relative_to(root).as_posix()
            # A generated file of megabytes is read no further than the cap needs.
            with found.open("rb") as handle:
                head = handle.read(READ_BYTES)
                unread += max(0, found.stat().st_size - len(head))
            parts.append(f"From {name}:\n\n{head.decode('utf-8', 'replace').strip()}")
    # Redacted before the cut: a key the cut split in two would no longer be recognised.
    text = redactor.redact("\n\n".join(p for p in parts if p))
    if not text:
        return ""
    data = text.encode()
    if len(data) + unread > MAX_BYTES:
        cut = data[:MAX_BYTES].decode("utf-8", "ignore")
        left_out = max(0, len(data) - MAX_BYTES) + unread
        text = f"{cut}\n[{left_out} more bytes of project instructions left out]"
    return f"## {HEADING}\n\n{text}"


def _doc_of(directory: Path, root: Path, home: Path) -> Path | None:
    """The first of DOC_NAMES in `directory` that may be read (see the module's note)."""
    for name in DOC_NAMES:
        path = directory / name
        try:
            resolved = path.resolve(strict=True)
        except (OSError, RuntimeError):
            continue
        if not resolved.is_file() or not resolved.is_relative_to(root):
            continue
        if resolved.is_relative_to(home):
            continue
        return resolved
    return None
