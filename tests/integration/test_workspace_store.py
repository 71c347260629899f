"""A workspace kept in the store: captured with git plumbing on one host, restored on
another that shares only the store (two caches, as two hosts have), on SQLite and
PostgreSQL."""

from __future__ import annotations

import os
import struct
import subprocess
from pathlib import Path

import pytest

from swarmdeck.catalog.catalog import Catalog
from swarmdeck.errors import NotFoundError, UsageError
from swarmdeck.workspace.snapshots import WorkspaceCache

pytestmark = pytest.mark.usefixtures("store")


def _catalog() -> Catalog:
    from swarmdeck.config import load_settings

    return Catalog.open(load_settings().store_url)


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout


def _repo(root: Path) -> Path:
    """A git repository with a commit, an untracked file, an ignored one, an executable,
    a symlink and a binary file."""
    root.mkdir()
    _git(root, "init", "-q")
    (root / "src").mkdir()
    (root / "src" / "app.py").write_text("print('hi')\n")
    (root / ".gitignore").write_text("*.log\nbuild/\n")
    (root / "run.sh").write_text("#!/bin/sh\necho run\n")
    (root / "run.sh").chmod(0o755)
    os.symlink("src/app.py", root / "link")
    (root / "blob.bin").write_bytes(bytes(range(256)) * 64)
    _git(root, "add", "-A")
    _git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "first")
    (root / "notes.txt").write_text("untracked but not ignored\n")
    (root / "debug.log").write_text("ignored\n")
    (root / "build").mkdir()
    (root / "build" / "out.o").write_bytes(b"\0\1")
    return root


def _files(root: Path) -> dict[str, tuple[str, int, bytes]]:
    """Every entry under root but .git: (kind, mode bits, content or link target)."""
    found: dict[str, tuple[str, int, bytes]] = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if rel == ".git" or rel.startswith(".git/"):
            continue
        if path.is_symlink():
            found[rel] = ("link", 0, os.readlink(path).encode())
        elif path.is_file():
            found[rel] = ("file", path.stat().st_mode & 0o111, path.read_bytes())
    return found


def _objects_in(pack: bytes) -> int:
    """The object count a pack's header declares."""
    assert pack[:4] == b"PACK"
    return struct.unpack(">I", pack[8:12])[0]


def test_capture_then_restore_on_another_host_gives_the_same_files(tmp_path: Path) -> None:
    catalog = _catalog()
    repo = _repo(tmp_path / "repo")
    snap = WorkspaceCache(tmp_path / "host-a").capture("ws1", repo, catalog)
    out = tmp_path / "restored"
    WorkspaceCache(tmp_path / "host-b").export(snap.commit, out, catalog)
    expected = {k: v for k, v in _files(repo).items() if not k.endswith((".log", ".o"))}
    assert _files(out) == expected
    assert "notes.txt" in expected and "debug.log" not in _files(out)
    assert _files(out)["run.sh"][1] == 0o111 and _files(out)["link"][0] == "link"
    assert not (out / ".git").exists() and not (out / "build").exists()


def test_the_users_repository_is_left_alone(tmp_path: Path) -> None:
    catalog = _catalog()
    repo = _repo(tmp_path / "repo")
    before = (_git(repo, "status", "--porcelain"), _git(repo, "count-objects"))
    index_mtime = (repo / ".git" / "index").stat().st_mtime_ns
    (repo / "src" / "app.py").write_text("changed\n")
    WorkspaceCache(tmp_path / "host-a").capture("ws1", repo, catalog)
    assert _git(repo, "count-objects") == before[1]
    assert (repo / ".git" / "index").stat().st_mtime_ns == index_mtime
    assert " M src/app.py" in _git(repo, "status", "--porcelain")


def test_a_second_capture_sends_only_what_changed(tmp_path: Path) -> None:
    catalog = _catalog()
    repo = _repo(tmp_path / "repo")
    for i in range(50):
        (repo / "src" / f"mod{i}.py").write_text(f"value = {os.urandom(1000).hex()!r}\n")
    cache = WorkspaceCache(tmp_path / "host-a")
    first = cache.capture("ws1", repo, catalog)
    (repo / "src" / "mod7.py").write_text("value = 'changed'\n")
    second = cache.capture("ws1", repo, catalog)
    assert second.changed and second.pack_id
    pack = catalog.pack_data(second.pack_id)
    assert pack is not None
    # The commit, the root tree, src/ and the changed blob: nothing else travels.
    assert _objects_in(pack) == 4
    assert second.pack_bytes < first.pack_bytes / 5
    again = cache.capture("ws1", repo, catalog)
    assert not again.changed and again.commit == second.commit


def test_a_new_workspace_on_the_same_repo_sends_only_its_commit(tmp_path: Path) -> None:
    catalog = _catalog()
    repo = _repo(tmp_path / "repo")
    cache = WorkspaceCache(tmp_path / "host-a")
    cache.capture("ws1", repo, catalog)
    second = cache.capture("ws2", repo, catalog)  # a second dispatch, nothing changed
    assert second.pack_id
    assert _objects_in(catalog.pack_data(second.pack_id) or b"") == 1
    out = tmp_path / "restored"
    WorkspaceCache(tmp_path / "host-b").export(second.commit, out, catalog)
    assert (out / "blob.bin").read_bytes() == (repo / "blob.bin").read_bytes()


def test_a_later_step_removes_deleted_files_where_it_is_restored(tmp_path: Path) -> None:
    catalog = _catalog()
    repo = _repo(tmp_path / "repo")
    host_a = WorkspaceCache(tmp_path / "host-a")
    first = host_a.record("ws1", "step-1", repo, catalog)
    (repo / "notes.txt").unlink()
    (repo / "src" / "app.py").write_text("print('bye')\n")
    second = host_a.record("ws1", "step-2", repo, catalog)
    assert catalog.latest_ref("ws1") == second
    assert host_a.record("ws1", "step-1", repo, catalog) == first  # a step keeps its ref
    run_dir = tmp_path / "host-b-run"
    host_b = WorkspaceCache(tmp_path / "host-b")
    host_b.materialise("ws1", first, run_dir, catalog)
    assert (run_dir / "notes.txt").is_file()
    (run_dir / "scratch.txt").write_text("made on host b, never captured\n")
    host_b.materialise("ws1", second, run_dir, catalog)
    assert not (run_dir / "notes.txt").exists()
    assert (run_dir / "src" / "app.py").read_text() == "print('bye')\n"
    assert (run_dir / "scratch.txt").is_file()  # a file neither snapshot knew stays


def test_swarmdecks_home_inside_the_workdir_is_never_captured(tmp_path: Path) -> None:
    catalog = _catalog()
    repo = _repo(tmp_path / "repo")
    home = repo / ".sd home[1]"
    (home / "credentials").mkdir(parents=True)
    (home / "credentials" / "openai").write_text("sk-secret\n")
    cache = WorkspaceCache(home / "workspaces")  # the cache lives in the home, too
    snap = cache.capture("ws1", repo, catalog, never=[home])
    out = tmp_path / "restored"
    WorkspaceCache(tmp_path / "host-b").export(snap.commit, out, catalog)
    assert not (out / ".sd home[1]").exists()
    assert all(b"sk-secret" not in data for _, _, data in _files(out).values())
    assert (out / "notes.txt").is_file()


def test_export_refuses_a_non_empty_directory_and_leaves_nothing_on_failure(
    tmp_path: Path,
) -> None:
    catalog = _catalog()
    repo = _repo(tmp_path / "repo")
    snap = WorkspaceCache(tmp_path / "host-a").capture("ws1", repo, catalog)
    host_b = WorkspaceCache(tmp_path / "host-b")
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "keep").write_text("x")
    with pytest.raises(UsageError, match="not empty"):
        host_b.export(snap.commit, busy, catalog)
    with pytest.raises(NotFoundError, match="no snapshot"):
        host_b.export("0" * 40, tmp_path / "never", catalog)
    assert not (tmp_path / "never").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "busy",
        "home",
        "host-a",
        "host-b",
        "repo",
    ]


def test_a_snapshot_of_an_execution_taken_over_meanwhile_lands_nothing(tmp_path: Path) -> None:
    import contextvars

    from swarmdeck.catalog import fence
    from swarmdeck.catalog.fence import Fenced

    catalog = _catalog()
    catalog.create_session(
        session_id="s1", model="m", mode="agent", workdir="/", run_dir="/", task="t"
    )
    first, _ = catalog.open_run("s1", "worker-a")
    second, _ = catalog.claim_run("s1", "worker-b")  # a takeover
    repo = _repo(tmp_path / "repo")
    cache = WorkspaceCache(tmp_path / "host-a")

    def under(epoch: int, key: str) -> str:
        fence.enter("s1", epoch)
        return cache.record("s1", key, repo, catalog)

    with pytest.raises(Fenced):
        contextvars.copy_context().run(under, first.epoch, "tool:1:late")
    assert catalog.refs_of("s1") == []
    landed = contextvars.copy_context().run(under, second, "tool:1:late")
    assert catalog.refs_of("s1") == [("tool:1:late", landed)]
