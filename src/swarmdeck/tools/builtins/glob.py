"""glob: files of the workdir by name pattern, newest first, leaving out what .gitignore
ignores (git's own list where the directory is in a git work tree, else a walk that reads
the .gitignore files)."""

from __future__ import annotations

import asyncio
import os
import re
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, Field

from swarmdeck.errors import PermissionDeniedError, ToolError
from swarmdeck.secrets.redact import default_redactor
from swarmdeck.tools.base import Effect, Tool, ToolContext
from swarmdeck.tools.builtins.files import SKIP_DIRS, _display, _root
from swarmdeck.tools.paths import confine, credential_reason
from swarmdeck.workspace.safegit import no_program_options

MAX_GLOB_FILES = 200
# Bounds the time one glob can take on a huge tree.
MAX_SCANNED = 100_000
GIT_TIMEOUT_S = 30


class GlobArgs(BaseModel):
    """Arguments of glob."""

    pattern: str = Field(description="e.g. **/*.py or src/**/test_*.py; no '/': any depth")
    path: str = Field(".", description="directory to search, relative to the workdir")


def glob_regex(pattern: str) -> re.Pattern[str]:
    """A glob with `**` (any directories), `*`, `?` and `[...]`, matched against a whole
    relative path."""
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "[" and (close := pattern.find("]", i + 2)) > 0:
            body = pattern[i + 1 : close].replace("\\", "\\\\")
            out.append(f"[{'^' + body[1:] if body.startswith('!') else body}]")
            i = close + 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out) + r"\Z", re.DOTALL)


@dataclass(frozen=True)
class _Rule:
    """One .gitignore line, relative to the directory of its file."""

    base: str
    regex: re.Pattern[str]
    negate: bool
    dir_only: bool

    @classmethod
    def parse(cls, base: str, line: str) -> _Rule | None:
        line = line.rstrip("\n").rstrip()
        if not line or line.startswith("#"):
            return None
        negate = line.startswith("!")
        line = line[1:] if negate else line.removeprefix("\\")
        dir_only = line.endswith("/")
        line = line.rstrip("/")
        if "/" not in line:
            line = "**/" + line
        return cls(base, glob_regex(line.lstrip("/")), negate, dir_only)

    def ignored(self, rel: str, is_dir: bool) -> bool | None:
        """True/False when this rule decides `rel` (relative to the root), None otherwise."""
        if self.dir_only and not is_dir:
            return None
        if self.base:
            if not rel.startswith(self.base + "/"):
                return None
            rel = rel[len(self.base) + 1 :]
        return (not self.negate) if self.regex.match(rel) else None


def _rules(folder: Path, base: str) -> list[_Rule]:
    try:
        text = (folder / ".gitignore").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    return [r for line in text.splitlines() if (r := _Rule.parse(base, line)) is not None]


def _ignored(rules: list[_Rule], rel: str, is_dir: bool) -> bool:
    verdict = False
    for rule in rules:
        decided = rule.ignored(rel, is_dir)
        if decided is not None:
            verdict = decided
    return verdict


def _outer_rules(start: Path, root: Path) -> list[_Rule]:
    """The rules of the .gitignore files from the root down to `start`'s parent."""
    rel = _display(start, root)
    if rel == ".":
        return []
    parts = Path(rel).parts
    outer = _rules(root, "")
    for k in range(1, len(parts)):
        base = "/".join(parts[:k])
        outer += _rules(root / base, base)
    return outer


def _walk(start: Path, root: Path) -> list[str]:
    """Files under `start` (relative to `root`) that the .gitignore files do not ignore."""
    found: list[str] = []
    rules: dict[str, list[_Rule]] = {}
    inherited = _outer_rules(start, root)
    for dirpath, dirnames, filenames in os.walk(start, followlinks=False):
        rel_dir = _display(Path(dirpath), root)
        base = "" if rel_dir == "." else rel_dir
        parent = rules.get(str(Path(base).parent) if "/" in base else "", inherited)
        parent = parent if base and rel_dir != _display(start, root) else inherited
        here = rules[base] = [*parent, *_rules(Path(dirpath), base)]
        prefix = f"{base}/" if base else ""
        dirnames[:] = sorted(
            d for d in dirnames if d not in SKIP_DIRS and not _ignored(here, prefix + d, True)
        )
        found += [prefix + f for f in sorted(filenames) if not _ignored(here, prefix + f, False)]
        if len(found) > MAX_SCANNED:
            break
    return found


def _git_files(start: Path, root: Path) -> list[str] | None:
    """Files under `start` (relative to `root`) by git: tracked and untracked, not ignored;
    None when `start` is not in a git work tree."""
    argv = ["git", *no_program_options(start), "-C", str(start)]
    try:
        inside = subprocess.run(
            [*argv, "rev-parse", "--is-inside-work-tree"],
            capture_output=True, text=True, timeout=GIT_TIMEOUT_S, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        if inside.stdout.strip() != "true":
            return None
        listed = subprocess.run(
            [*argv, "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", "."],
            capture_output=True, timeout=GIT_TIMEOUT_S, stdin=subprocess.DEVNULL, check=True,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError, PermissionDeniedError):
        return None
    prefix = _display(start, root)
    names = listed.stdout.decode("utf-8", "replace").split("\0")
    return sorted({n if prefix == "." else f"{prefix}/{n}" for n in names if n})


def _newest_first(
    root: Path, names: list[str], regex: re.Pattern[str], base: str
) -> list[tuple[float, str]]:
    """(mtime, name) of the regular files whose path below `base` matches, newest first."""
    hits: list[tuple[float, str]] = []
    for name in names:
        below = name[len(base) + 1 :] if base else name
        if not regex.match(below) or any(p in SKIP_DIRS for p in Path(name).parts):
            continue
        path = root / name
        try:
            st = path.lstat()
        except OSError:
            continue  # deleted but still in git's index
        if stat.S_ISREG(st.st_mode) and not credential_reason(path, root=root):
            hits.append((st.st_mtime, name))
    hits.sort(key=lambda hit: (-hit[0], hit[1]))
    return hits


def find(start: Path, root: Path, pattern: str) -> str:
    """The files matching `pattern` under `start`, newest first, capped."""
    names = _git_files(start, root)
    if names is None:
        names = _walk(start, root)
    base = _display(start, root)
    pattern = pattern.lstrip("/")
    regex = glob_regex(pattern if "/" in pattern else "**/" + pattern)
    hits = _newest_first(root, names, regex, "" if base == "." else base)
    shown = [name for _, name in hits[:MAX_GLOB_FILES]]
    if len(hits) > MAX_GLOB_FILES:
        shown.append(f"({len(hits) - MAX_GLOB_FILES} more files not shown; narrow the pattern)")
    return "\n".join(shown) if shown else "(no files match)"


async def _glob(ctx: ToolContext, args: GlobArgs) -> str:
    if not args.pattern.strip():
        raise ToolError("pattern is empty")
    start = confine(ctx.workdir, args.path, for_write=False)
    if not start.is_dir():
        raise ToolError(f"{args.path} is not a directory")
    text = await asyncio.to_thread(find, start, _root(ctx), args.pattern)
    return default_redactor().redact(text)


GLOB = Tool(
    name="glob",
    description=(
        "Find files by name pattern (e.g. **/*.py, src/**/test_*.py) under a path; newest "
        "first; .gitignore'd files left out."
    ),
    args_model=GlobArgs,
    effect=Effect.READ,
    body=_glob,
)
