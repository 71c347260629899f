"""The project's instructions a session is shown (runtime/project_docs.py): the AGENTS.md
files from the repository's root down to the workdir, never a file planted to point out of
the repository or into swarmdeck's home, never a key, never more than the cap."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from swarmdeck.runtime.project_docs import MAX_BYTES, project_docs, repository_root
from swarmdeck.secrets.redact import Redactor

KEY = "sk-live-0123456789abcdef0123"


def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "pkg" / "sub").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    return root


def test_the_files_from_the_root_down_to_the_workdir_in_that_order(tmp_path: Path) -> None:
    root = repo(tmp_path)
    (tmp_path / "AGENTS.md").write_text("ABOVE THE REPOSITORY")
    (root / "AGENTS.md").write_text("ROOT RULES")
    (root / "pkg" / "CLAUDE.md").write_text("PKG RULES")  # a directory with no AGENTS.md
    (root / "pkg" / "sub" / "AGENTS.md").write_text("SUB RULES")
    (root / "pkg" / "sub" / "CLAUDE.md").write_text("SHADOWED")
    text = project_docs(root / "pkg" / "sub", tmp_path / "home", Redactor())
    assert repository_root(root / "pkg" / "sub") == root
    assert text.index("ROOT RULES") < text.index("PKG RULES") < text.index("SUB RULES")
    assert "From pkg/sub/AGENTS.md:" in text
    assert "ABOVE THE REPOSITORY" not in text and "SHADOWED" not in text


def test_outside_a_repository_only_the_workdir_speaks(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (tmp_path / "AGENTS.md").write_text("A STRANGER'S FILE")
    assert project_docs(work, tmp_path / "home", Redactor()) == ""
    (work / "AGENTS.md").write_text("MINE")
    assert "MINE" in project_docs(work, tmp_path / "home", Redactor())


def test_links_out_of_the_repository_or_into_the_home_are_not_followed(tmp_path: Path) -> None:
    root = repo(tmp_path)
    home = tmp_path / "home"
    (home / "credentials").mkdir(parents=True)
    (home / "credentials" / "glm").write_text(KEY)
    (root / "AGENTS.md").symlink_to(home / "credentials" / "glm")
    (tmp_path / "elsewhere.md").write_text("OUTSIDE")
    (root / "pkg" / "AGENTS.md").symlink_to(tmp_path / "elsewhere.md")
    assert project_docs(root / "pkg", home, Redactor()) == ""
    # A home inside the repository is refused as well, link or not.
    inside = root / ".swarmdeck"
    inside.mkdir()
    (inside / "AGENTS.md").write_text(KEY)
    assert project_docs(inside, inside, Redactor()) == ""


def test_a_key_is_redacted_and_a_long_file_is_cut(tmp_path: Path) -> None:
    root = repo(tmp_path)
    (root / "AGENTS.md").write_text(f"deploy with {KEY}\n" + "x" * (2 * MAX_BYTES))
    text = project_docs(root, tmp_path / "home", Redactor([KEY]))
    assert KEY not in text and "[REDACTED]" in text
    assert len(text.encode()) < MAX_BYTES + 200
    assert text.endswith(" more bytes of project instructions left out]")


def test_a_huge_file_is_read_no_further_than_the_cap_and_counted_whole(tmp_path: Path) -> None:
    root = repo(tmp_path)
    body = "y" * (8 * 1024 * 1024)  # a generated file of 8 MiB
    (root / "AGENTS.md").write_text(body)
    read: list[int] = []
    real_open = Path.open

    def counting_open(path: Path, mode: str = "r", *args, **kwargs):  # type: ignore[no-untyped-def]
        handle = real_open(path, mode, *args, **kwargs)
        if path.name == "AGENTS.md":
            real_read = handle.read
            handle.read = lambda n=-1: read.append(n) or real_read(n)  # type: ignore[method-assign]
        return handle

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Path, "open", counting_open)
        text = project_docs(root, tmp_path / "home", Redactor([KEY]))
    assert read and all(0 < n <= MAX_BYTES + 8192 for n in read)
    whole = len(f"From AGENTS.md:\n\n{body}".encode())
    assert text.endswith(f"[{whole - MAX_BYTES} more bytes of project instructions left out]")


def test_the_setting_takes_true_or_false(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import pytest

    from swarmdeck.config import load_settings
    from swarmdeck.errors import ConfigError

    monkeypatch.setenv("SWARMDECK_HOME", str(tmp_path))
    (tmp_path / "settings.yaml").write_text("project_docs: false\n")
    assert load_settings().project_docs is False
    (tmp_path / "settings.yaml").write_text("project_docs: maybe\n")
    with pytest.raises(ConfigError, match="project_docs is 'maybe'"):
        load_settings()
