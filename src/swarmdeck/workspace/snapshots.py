"""Capture a directory into a content-addressed store and restore it elsewhere, with git's
own object model: a snapshot is a commit, what it adds travels as one pack.

Everything happens in private git dirs under `root` (swarmdeck's home), never in the
user's `.git`: one object database every workspace of this host shares (`objects.git`),
and per workspace a git dir of its own (`ws/<id>`) holding its index (git's stat cache:
a second capture rehashes only what changed), its excludes and its last snapshot. The
workdir's `.gitignore` files are honoured as `git add -A` does; its `.git/info/exclude`
is copied into the private one.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from swarmdeck.errors import UsageError
from swarmdeck.filemodes import private_dir
from swarmdeck.workspace.packstore import PackStore, packs_needed
from swarmdeck.workspace.safegit import fixed_options
from swarmdeck.workspace.worktrees import GitError

GIT_TIMEOUT_S = 300
WORKSPACE_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
# Stored bytes are the file's bytes: no end-of-line conversion, no filter, no encoding, in
# whatever .gitattributes the workdir holds ($GIT_DIR/info/attributes overrides them all).
ATTRIBUTES = "* -text -eol -filter -ident -working-tree-encoding\n"
CONFIG = (
    ("core.bare", "false"),
    ("core.filemode", "true"),
    ("core.symlinks", "true"),
    ("core.autocrlf", "false"),
    ("gc.auto", "0"),  # objects another workspace's pack assumes must stay
    ("checkout.workers", "0"),  # a restore writes files on every core
    # A step's snapshot rescans only the directories that changed, in a smaller index.
    ("core.untrackedCache", "true"),
    ("index.version", "4"),
    # A step rewrites only the entries it changed, not all 10,000 (sharedindex.* beside).
    ("core.splitIndex", "true"),
    ("user.name", "swarmdeck"),
    ("user.email", "swarmdeck@localhost"),
)
# How many of this host's recently stored commits a new pack may leave out (when the store
# confirms it has them): enough for a second dispatch on the same repo to send its diff.
RECENT_BASES = 16
IDENTITY = {
    "GIT_AUTHOR_NAME": "swarmdeck",
    "GIT_AUTHOR_EMAIL": "swarmdeck@localhost",
    "GIT_COMMITTER_NAME": "swarmdeck",
    "GIT_COMMITTER_EMAIL": "swarmdeck@localhost",
}


@dataclass(frozen=True)
class Snapshot:
    """One capture: its commit and tree, and what it sent to the store."""

    commit: str
    tree: str
    changed: bool  # False: the files were as the last snapshot had them; nothing sent
    pack_id: str | None = None
    pack_bytes: int = 0


def check_workspace_id(workspace_id: str) -> str:
    """A workspace id becomes a directory name: refuse anything else."""
    if not WORKSPACE_ID_RE.match(workspace_id or ""):
        raise UsageError(
            f"invalid workspace id {workspace_id!r}",
            "use letters, digits, '.', '_' or '-' (at most 64)",
        )
    return workspace_id


class WorkspaceCache:
    """This host's private git dirs for workspaces, under `root`."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.shared = self.root / "objects.git"
        self.objects = self.shared / "objects"
        self._stored_log = self.root / "stored"

    # -- git ----------------------------------------------------------------------------

    def _env(self, git_dir: Path, work_tree: Path | None, index: Path | None) -> dict[str, str]:
        env = clean_env(GIT_DIR=str(git_dir), GIT_OBJECT_DIRECTORY=str(self.objects))
        if work_tree is not None:
            env["GIT_WORK_TREE"] = str(work_tree)
        if index is not None:
            env["GIT_INDEX_FILE"] = str(index)
        return env

    def _git(
        self,
        git_dir: Path,
        *args: str,
        work_tree: Path | None = None,
        index: Path | None = None,
        stdin: bytes | None = None,
    ) -> bytes:
        """Run git on a private git dir; its stdout, or GitError with git's own words."""
        cwd = work_tree if work_tree is not None else git_dir
        env = self._env(git_dir, work_tree, index)
        return run_git([*fixed_options(), *args], cwd, env, stdin or b"")

    def _init(self, git_dir: Path) -> None:
        """Create a private git dir (once), with our config and attributes."""
        if (git_dir / "HEAD").is_file():
            return
        private_dir(self.root)
        private_dir(git_dir.parent)
        tmp = Path(tempfile.mkdtemp(prefix=".init-", dir=git_dir.parent))
        subprocess.run(
            ["git", "init", "-q", "--bare", str(tmp)],
            check=True,
            capture_output=True,
            env={k: v for k, v in os.environ.items() if not k.startswith("GIT_")},
        )
        for key, value in CONFIG:
            subprocess.run(["git", "config", "--file", str(tmp / "config"), key, value], check=True)
        (tmp / "info").mkdir(exist_ok=True)
        (tmp / "info" / "attributes").write_text(ATTRIBUTES)
        try:
            tmp.rename(git_dir)  # whole or not at all; another process may have won
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)

    def _ws_dir(self, workspace_id: str) -> Path:
        self._init(self.shared)
        git_dir = self.root / "ws" / check_workspace_id(workspace_id)
        self._init(git_dir)
        return git_dir

    def shared_git(self, *args: str, stdin: bytes | None = None) -> bytes:
        """Run git on this host's object database (no work tree): a diff, a pack."""
        self._init(self.shared)
        return self._git(self.shared, *args, stdin=stdin)

    def has_commit(self, commit: str) -> bool:
        """Whether this host's cache holds the commit (and so, whole, what it reaches)."""
        self._init(self.shared)
        try:
            self._git(self.shared, "cat-file", "-e", f"{commit}^{{commit}}")
        except GitError:
            return False
        return True

    # -- capture --------------------------------------------------------------------------

    def capture(
        self,
        workspace_id: str,
        workdir: Path,
        store: PackStore,
        never: Sequence[Path] = (),
    ) -> Snapshot:
        """Snapshot `workdir` (tracked and untracked files, .gitignore honoured, never the
        paths in `never`) and send the store what it lacks."""
        workdir = Path(workdir).resolve()
        if not workdir.is_dir():
            raise UsageError(f"workdir does not exist: {workdir}", "pass an existing directory")
        git_dir = self._ws_dir(workspace_id)
        self._write_excludes(git_dir, workdir, never)
        index = git_dir / "index"
        # A first capture writes every file: into one pack as it goes (bulk check-in: any
        # file above core.bigFileThreshold), not 10,000 loose objects.
        bulk = [] if self._seed_index(index, workdir) else ["-c", "core.bigFileThreshold=1"]
        self._git(git_dir, *bulk, "add", "-A", "--", ".", work_tree=workdir, index=index)
        tree = self._git(git_dir, "write-tree", index=index).decode().strip()
        self._remember_path(workdir, workspace_id)
        parent, parent_tree = _read_last(git_dir)
        if parent is not None and parent_tree == tree:
            return Snapshot(parent, tree, changed=False)
        args = ["commit-tree", tree, "-m", f"swarmdeck workspace {workspace_id}"]
        if parent is not None:
            args += ["-p", parent]
        commit = self._git(git_dir, *args).decode().strip()
        pack_id, size = self._upload(store, commit, parent)
        _write_last(git_dir, commit, tree)
        return Snapshot(commit, tree, changed=True, pack_id=pack_id, pack_bytes=size)

    def record(
        self,
        workspace_id: str,
        step_key: str,
        workdir: Path,
        store: PackStore,
        never: Sequence[Path] = (),
    ) -> str:
        """Capture `workdir` and key the snapshot to a journaled step; the commit the store
        holds for that step (the first one, when the step ran before)."""
        snap = self.capture(workspace_id, workdir, store, never)
        return store.put_ref(workspace_id, step_key, snap.commit)

    def _upload(self, store: PackStore, commit: str, parent: str | None) -> tuple[str, int]:
        """Pack the objects of `commit` the store lacks and store them under their hash."""
        # The parent alone is enough for a step (git's walk stops at the edge); a new
        # workspace looks for a base among what this host stored lately.
        bases = sorted(store.known_commits([parent])) if parent else []
        if not bases:
            bases = sorted(store.known_commits(self._recent_stored()))
        # A base's tree too: git leaves out what an unrelated history (another workspace
        # of the same repo) holds only when its trees are named, not just its commits.
        revs = "".join([f"{commit}\n", *(f"^{b}\n^{b}^{{tree}}\n" for b in bases)]).encode()
        data = self._git(self.shared, "pack-objects", "--revs", "--stdout", "-q", stdin=revs)
        pack_id = hashlib.sha256(data).hexdigest()
        store.put_pack(pack_id, data, commit, bases)
        self._remember_stored(commit)
        return pack_id, len(data)

    def _seed_index(self, index: Path, workdir: Path) -> bool:
        """Whether the workspace has an index; if not, start it from the index of the last
        workspace captured from the same directory here (a second dispatch on a repo then
        hashes only what changed since, not every file)."""
        if index.is_file():
            return True
        try:
            other = (self.root / "paths" / _path_key(workdir)).read_text().strip()
            source = self.root / "ws" / check_workspace_id(other)
            # A split index names its shared part, which must come along.
            for shared in source.glob("sharedindex.*"):
                shutil.copyfile(shared, index.parent / shared.name)
            shutil.copyfile(source / "index", index)
        except (OSError, UsageError):
            return False
        return True

    def _remember_path(self, workdir: Path, workspace_id: str) -> None:
        marker = self.root / "paths" / _path_key(workdir)
        try:
            if marker.read_text().strip() == workspace_id:
                return
        except FileNotFoundError:
            marker.parent.mkdir(mode=0o700, exist_ok=True)
        tmp = marker.with_suffix(f".{os.getpid()}")
        tmp.write_text(workspace_id + "\n")
        tmp.replace(marker)

    def _write_excludes(self, git_dir: Path, workdir: Path, never: Sequence[Path]) -> None:
        """The private info/exclude: the workdir's own, plus the paths never captured."""
        lines = ["/.git", ".git"]
        own = workdir / ".git" / "info" / "exclude"
        if own.is_file():
            lines.append(own.read_text(encoding="utf-8", errors="replace"))
        for path in never:
            resolved = Path(path).resolve()
            if resolved.is_relative_to(workdir) and resolved != workdir:
                lines.append("/" + _escape_pattern(resolved.relative_to(workdir).as_posix()))
        text = "\n".join(lines) + "\n"
        target = git_dir / "info" / "exclude"
        if not target.is_file() or target.read_text() != text:
            target.write_text(text)

    def _recent_stored(self) -> list[str]:
        try:
            lines = self._stored_log.read_text().split()
        except FileNotFoundError:
            return []
        return list(reversed(lines[-RECENT_BASES:]))

    def _remember_stored(self, commit: str) -> None:
        lines = [*self._recent_stored()[::-1], commit]
        tmp = self._stored_log.with_suffix(f".{os.getpid()}")
        tmp.write_text("\n".join(lines[-RECENT_BASES:]) + "\n")
        tmp.replace(self._stored_log)

    # -- restore --------------------------------------------------------------------------

    def fetch(self, commit: str, store: PackStore) -> int:
        """Bring into this host's cache the packs `commit` needs and it lacks; how many."""
        self._init(self.shared)
        needed = packs_needed(store, commit, self.has_commit)
        for pack_id in needed:
            data = store.pack_data(pack_id)
            if data is None:
                raise GitError(f"the store lost the workspace pack {pack_id[:12]}")
            if hashlib.sha256(data).hexdigest() != pack_id:
                raise GitError(f"the workspace pack {pack_id[:12]} is corrupt in the store")
            self._git(self.shared, "index-pack", "--stdin", stdin=data)
        return len(needed)

    def materialise(
        self,
        workspace_id: str,
        commit: str,
        workdir: Path,
        store: PackStore,
        *,
        clean: bool = False,
    ) -> None:
        """Make `workdir` hold the files of `commit`, with git's checkout and the
        workspace's own index: files the commit lacks but the last snapshot had go, files
        it never knew stay (with `clean`, nothing else stays: the directory is written
        anew). The workspace's next capture starts from `commit`."""
        self.fetch(commit, store)
        git_dir = self._ws_dir(workspace_id)
        index = git_dir / "index"
        if clean:
            # What a half-finished step left (its new files too) must not survive.
            shutil.rmtree(workdir, ignore_errors=True)
            index.unlink(missing_ok=True)
        Path(workdir).mkdir(parents=True, exist_ok=True)
        self._git(git_dir, "read-tree", "-u", "--reset", commit, work_tree=workdir, index=index)
        tree = self._git(git_dir, "rev-parse", f"{commit}^{{tree}}").decode().strip()
        _write_last(git_dir, commit, tree)

    def export(self, commit: str, dest: Path, store: PackStore) -> None:
        """Write the files of `commit` to `dest` (missing or empty): all or nothing, as
        the checkout goes to a new directory beside it that is renamed at the end."""
        dest = Path(dest).absolute()
        if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
            raise UsageError(f"{dest} is not empty", "pass a new or empty directory")
        self.fetch(commit, store)
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
        index = Path(tempfile.mkstemp(prefix="export-index.", dir=self.root)[1])
        try:
            index.unlink()  # git wants to create it
            self._git(self.shared, "read-tree", "-u", "--reset", commit, work_tree=tmp, index=index)
            tmp.chmod(0o755)  # mkdtemp made it 0700; a checkout is an ordinary directory
            if dest.exists():
                dest.rmdir()
            tmp.rename(dest)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        finally:
            index.unlink(missing_ok=True)


def clean_env(**extra: str) -> dict[str, str]:
    """The environment of a git swarmdeck runs: no GIT_* of the caller's (a hook's GIT_DIR
    would point git at another repository), C messages, swarmdeck's identity."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(IDENTITY, LC_ALL="C", GIT_TERMINAL_PROMPT="0", **extra)
    return env


def run_git(args: list[str], cwd: Path, env: dict[str, str], stdin: bytes = b"") -> bytes:
    """Run `git ARGS` in `cwd`; its stdout (bytes), or GitError in one line."""
    try:
        proc = subprocess.run(
            ["git", *args], cwd=cwd, env=env, input=stdin, capture_output=True,
            timeout=GIT_TIMEOUT_S,
        )  # fmt: skip
    except FileNotFoundError:
        raise GitError("git is not installed", "install git to keep workspaces") from None
    except subprocess.TimeoutExpired:
        raise GitError(f"git {args[0]} timed out in {cwd}") from None
    if proc.returncode != 0:
        detail = " ".join(proc.stderr.decode(errors="replace").split())[:300]
        command = next((a for a in args if not a.startswith("-") and "=" not in a), "")
        raise GitError(f"git {command} failed in {cwd}: {detail}")
    return proc.stdout


def _read_last(git_dir: Path) -> tuple[str | None, str | None]:
    """The workspace's last snapshot here: (commit, tree), or (None, None)."""
    try:
        commit, tree = (git_dir / "last").read_text().split()
    except (FileNotFoundError, ValueError):
        return None, None
    return commit, tree


def _write_last(git_dir: Path, commit: str, tree: str) -> None:
    tmp = git_dir / f"last.{os.getpid()}"
    tmp.write_text(f"{commit} {tree}\n")
    tmp.replace(git_dir / "last")


def _path_key(workdir: Path) -> str:
    return hashlib.sha256(str(workdir).encode()).hexdigest()[:32]


def _escape_pattern(path: str) -> str:
    """A path as a gitignore pattern that matches only itself."""
    escaped = re.sub(r"([\\*?\[\]!# ])", r"\\\1", path)
    return escaped
