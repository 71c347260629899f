"""Path confinement: traversal, absolute paths, symlinks, credential files."""

from __future__ import annotations

from pathlib import Path

import pytest

from swarmdeck.errors import PermissionDeniedError, ToolError
from swarmdeck.tools.paths import confine


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SWARMDECK_HOME", str(tmp_path / "sd-home"))
    wd = tmp_path / "work"
    (wd / "src").mkdir(parents=True)
    (wd / "src" / "a.py").write_text("print(1)\n")
    (tmp_path / "outside.txt").write_text("secret stuff\n")
    return wd


def test_relative_and_absolute_inside(workdir: Path) -> None:
    assert confine(workdir, "src/a.py", for_write=False) == workdir / "src" / "a.py"
    assert confine(workdir, str(workdir / "src" / "a.py"), for_write=False) == (
        workdir / "src" / "a.py"
    )
    assert confine(workdir, ".", for_write=False) == workdir
    assert confine(workdir, "src/../src/a.py", for_write=False) == workdir / "src" / "a.py"


def test_new_file_resolves_through_its_parent(workdir: Path) -> None:
    assert confine(workdir, "src/new/b.py", for_write=True) == workdir / "src" / "new" / "b.py"


@pytest.mark.parametrize("raw", ["../outside.txt", "src/../../outside.txt", "../../etc/passwd"])
def test_dotdot_traversal_is_refused(workdir: Path, raw: str) -> None:
    for for_write in (False, True):
        with pytest.raises(PermissionDeniedError, match=r"path escapes the workdir: "):
            confine(workdir, raw, for_write=for_write)


def test_absolute_path_elsewhere_is_refused(workdir: Path) -> None:
    with pytest.raises(PermissionDeniedError, match="path escapes the workdir: /etc/passwd"):
        confine(workdir, "/etc/passwd", for_write=False)


def test_symlink_pointing_out_is_refused(workdir: Path) -> None:
    (workdir / "link.txt").symlink_to(workdir.parent / "outside.txt")
    (workdir / "linkdir").symlink_to(workdir.parent)
    (workdir / "dangling").symlink_to(workdir.parent / "not-yet.txt")
    for raw in ("link.txt", "linkdir/outside.txt", "linkdir/new.txt", "dangling"):
        for for_write in (False, True):
            with pytest.raises(PermissionDeniedError, match="through a symlink"):
                confine(workdir, raw, for_write=for_write)


def test_symlink_inside_is_followed(workdir: Path) -> None:
    (workdir / "alias.py").symlink_to(workdir / "src" / "a.py")
    assert confine(workdir, "alias.py", for_write=False) == workdir / "src" / "a.py"


def test_symlink_loop_is_refused(workdir: Path) -> None:
    (workdir / "loop1").symlink_to(workdir / "loop2")
    (workdir / "loop2").symlink_to(workdir / "loop1")
    with pytest.raises(PermissionDeniedError):
        confine(workdir, "loop1", for_write=False)


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (".env", "credential file: .env"),
        ("src/.env.local", "credential file: .env.local"),
        ("auth.json", "credential file: auth.json"),
        (".netrc", "credential file: .netrc"),
        (".git-credentials", "credential file: .git-credentials"),
        (".ssh/id_rsa", "credential directory: .ssh"),
    ],
)
def test_credential_files_are_refused(workdir: Path, raw: str, reason: str) -> None:
    with pytest.raises(PermissionDeniedError) as err:
        confine(workdir, raw, for_write=False)
    assert err.value.message == reason


def test_env_templates_are_readable(workdir: Path) -> None:
    assert confine(workdir, ".env.example", for_write=False).name == ".env.example"


def test_swarmdeck_credentials_dir_is_refused_even_inside_the_workdir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wd = tmp_path / "work"
    monkeypatch.setenv("SWARMDECK_HOME", str(wd / ".swarmdeck"))
    (wd / ".swarmdeck" / "credentials").mkdir(parents=True)
    (wd / ".swarmdeck" / "credentials" / "openai.key").write_text("k")
    with pytest.raises(PermissionDeniedError, match="swarmdeck credentials directory"):
        confine(wd, ".swarmdeck/credentials/openai.key", for_write=False)
    with pytest.raises(PermissionDeniedError, match="swarmdeck credentials directory"):
        confine(wd, ".swarmdeck/credentials", for_write=False)


def test_writing_into_dot_git_is_refused(workdir: Path) -> None:
    (workdir / ".git" / "hooks").mkdir(parents=True)
    with pytest.raises(PermissionDeniedError, match=r"inside \.git"):
        confine(workdir, ".git/hooks/post-commit", for_write=True)
    assert confine(workdir, ".git/hooks", for_write=False) == workdir / ".git" / "hooks"


@pytest.mark.parametrize("raw", ["", "   ", "a\0b"])
def test_malformed_paths(workdir: Path, raw: str) -> None:
    with pytest.raises(ToolError):
        confine(workdir, raw, for_write=False)
