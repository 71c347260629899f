"""The edit tools through the tool protocol: edit_file, apply_patch, glob and the text editor,
their failures as the model sees them, confinement as write_file's, and the edit journal
(a rerun never applies an edit twice) on a real SQLite catalog."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from swarmdeck.catalog.catalog import Catalog
from swarmdeck.tools.base import ToolContext, ToolOutcome
from swarmdeck.tools.builtins.edit import EDIT_FILE
from swarmdeck.tools.builtins.edit_journal import EDIT_KIND
from swarmdeck.tools.builtins.glob import GLOB
from swarmdeck.tools.builtins.patch import APPLY_PATCH_TOOL
from swarmdeck.tools.builtins.text_editor import TEXT_EDITOR_TOOL


@pytest.fixture
def wd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SWARMDECK_HOME", str(tmp_path / "home"))
    work = tmp_path / "work"
    (work / "src").mkdir(parents=True)
    (work / "src" / "app.py").write_text(
        "def main():\n    return 42\n\n\ndef other():\n    return 42\n"
    )
    (tmp_path / "outside.txt").write_text("outside\n")
    return work


def _ctx(
    wd: Path, mode: str = "code", catalog: Catalog | None = None, key: str = ""
) -> ToolContext:
    services = {"catalog": catalog} if catalog is not None else {}
    return ToolContext("s1", wd, mode, wd.parent, services=services, call_key=key)


async def _call(tool, ctx: ToolContext, **args) -> ToolOutcome:
    return await tool.call(ctx, json.dumps(args))


async def test_edit_file_replaces_once_and_answers_with_a_diff(wd: Path) -> None:
    out = await _call(
        EDIT_FILE,
        _ctx(wd),
        path="src/app.py",
        old_string="def main():\n    return 42",
        new_string="def main():\n    return 43",
    )
    assert not out.is_error, out.content
    assert out.content.startswith("edited src/app.py (1 replacement)")
    assert "-    return 42\n+    return 43" in out.content
    assert (wd / "src/app.py").read_text().count("return 43") == 1


async def test_edit_file_failures_say_why(wd: Path, tmp_path: Path) -> None:
    ctx = _ctx(wd)
    two = await _call(
        EDIT_FILE, ctx, path="src/app.py", old_string="return 42", new_string="return 0"
    )
    assert two.is_error and "appears 2 times (lines 2, 6)" in two.content
    missing = await _call(
        EDIT_FILE, ctx, path="src/app.py", old_string="def mian():", new_string="x"
    )
    assert (
        missing.is_error
        and "not in the file" in missing.content
        and "nearest (line 1" in missing.content
    )
    spaces = await _call(
        EDIT_FILE, ctx, path="src/app.py", old_string="def  main():", new_string="x"
    )
    assert "line 1 differs only in whitespace" in spaces.content
    every = await _call(
        EDIT_FILE,
        ctx,
        path="src/app.py",
        old_string="return 42",
        new_string="return 0",
        replace_all=True,
    )
    assert "(2 replacements)" in every.content
    outside = await _call(
        EDIT_FILE, ctx, path="../outside.txt", old_string="outside", new_string="in"
    )
    assert outside.permission_denied and "escapes the workdir" in outside.content
    (wd / "link.txt").symlink_to(tmp_path / "outside.txt")
    linked = await _call(EDIT_FILE, ctx, path="link.txt", old_string="outside", new_string="in")
    assert linked.permission_denied and "through a symlink" in linked.content
    os.link(tmp_path / "outside.txt", wd / "hard.txt")
    hard = await _call(EDIT_FILE, ctx, path="hard.txt", old_string="outside", new_string="in")
    assert hard.permission_denied and "hard links" in hard.content
    assert (tmp_path / "outside.txt").read_text() == "outside\n"
    read_only = await _call(
        EDIT_FILE, _ctx(wd, "explore"), path="src/app.py", old_string="a", new_string="b"
    )
    assert read_only.permission_denied


async def test_edit_file_keeps_crlf_bom_and_latin1(wd: Path) -> None:
    (wd / "win.txt").write_bytes(b"\xef\xbb\xbfone\r\ntwo\r\n")
    (wd / "old.txt").write_bytes("caf\xe9\nbar\n".encode("latin-1"))
    ctx = _ctx(wd)
    assert not (
        await _call(EDIT_FILE, ctx, path="win.txt", old_string="one\ntwo", new_string="one\n2")
    ).is_error
    assert (wd / "win.txt").read_bytes() == b"\xef\xbb\xbfone\r\n2\r\n"
    assert not (
        await _call(EDIT_FILE, ctx, path="old.txt", old_string="bar", new_string="baz")
    ).is_error
    assert (wd / "old.txt").read_bytes() == "caf\xe9\nbaz\n".encode("latin-1")


PATCH = """*** Begin Patch
*** Add File: docs/new.md
+# New
*** Update File: src/app.py
@@ def other():
-    return 42
+    return 7
*** Update File: src/mod.py
*** Move to: src/renamed.py
@@
-x = 1
+x = 2
*** Delete File: gone.txt
*** End Patch
"""


async def test_apply_patch_adds_updates_moves_and_deletes(wd: Path) -> None:
    (wd / "src/mod.py").write_text("x = 1\n")
    (wd / "gone.txt").write_text("bye\n")
    out = await _call(APPLY_PATCH_TOOL, _ctx(wd), input=PATCH)
    assert not out.is_error, out.content
    assert "A docs/new.md" in out.content and "M src/mod.py -> src/renamed.py" in out.content
    assert (wd / "docs/new.md").read_text() == "# New\n"
    assert (wd / "src/app.py").read_text().endswith("def other():\n    return 7\n")
    assert (wd / "src/app.py").read_text().startswith("def main():\n    return 42\n")
    assert (wd / "src/renamed.py").read_text() == "x = 2\n"
    assert not (wd / "src/mod.py").exists() and not (wd / "gone.txt").exists()


async def test_apply_patch_is_all_or_nothing(wd: Path) -> None:
    (wd / "src/mod.py").write_text("x = 9\n")
    (wd / "gone.txt").write_text("bye\n")
    before = (wd / "src/app.py").read_text()
    out = await _call(APPLY_PATCH_TOOL, _ctx(wd), input=PATCH)
    assert out.is_error and "hunk 1 of src/mod.py did not apply" in out.content
    assert "nearest (line 1, " in out.content and "x = 9" in out.content
    assert (wd / "src/app.py").read_text() == before
    assert not (wd / "docs").exists() and (wd / "gone.txt").exists()
    outside = await _call(
        APPLY_PATCH_TOOL,
        _ctx(wd),
        input="*** Begin Patch\n*** Add File: ../evil.txt\n+x\n*** End Patch",
    )
    assert outside.permission_denied and not (wd.parent / "evil.txt").exists()


async def test_glob_newest_first_without_ignored_files(wd: Path) -> None:
    (wd / ".gitignore").write_text("build/\n*.log\n")
    (wd / "build").mkdir()
    (wd / "build" / "out.py").write_text("")
    (wd / "debug.log").write_text("")
    (wd / "src" / "new.py").write_text("")
    old = time.time() - 100
    os.utime(wd / "src/app.py", (old, old))
    for label in ("walk", "git"):
        if label == "git":
            subprocess.run(["git", "init", "-q", str(wd)], check=True)
        out = await _call(GLOB, _ctx(wd, "explore"), pattern="*.py")
        assert out.content.splitlines() == ["src/new.py", "src/app.py"], label
        sub = await _call(GLOB, _ctx(wd, "explore"), pattern="**/*.log", path=".")
        assert sub.content == "(no files match)", label
    for n in range(205):
        (wd / f"f{n}.txt").write_text("")
    capped = await _call(GLOB, _ctx(wd), pattern="*.txt")
    assert capped.content.splitlines()[-1] == "(5 more files not shown; narrow the pattern)"


async def test_text_editor_commands_and_read_only_view(wd: Path) -> None:
    ctx = _ctx(wd)
    view = await _call(TEXT_EDITOR_TOOL, ctx, command="view", path="src/app.py", view_range=[2, 2])
    assert view.content.startswith("     2\t    return 42\n(more lines follow")
    assert "app.py" in (await _call(TEXT_EDITOR_TOOL, ctx, command="view", path="src")).content
    created = await _call(TEXT_EDITOR_TOOL, ctx, command="create", path="n.txt", file_text="a\nc\n")
    assert not created.is_error
    await _call(TEXT_EDITOR_TOOL, ctx, command="insert", path="n.txt", insert_line=1, new_str="b")
    await _call(
        TEXT_EDITOR_TOOL, ctx, command="str_replace", path="n.txt", old_str="c", new_str="d"
    )
    assert (wd / "n.txt").read_text() == "a\nb\nd\n"
    explore = _ctx(wd, "explore")
    assert not (await _call(TEXT_EDITOR_TOOL, explore, command="view", path="n.txt")).is_error
    denied = await _call(
        TEXT_EDITOR_TOOL, explore, command="str_replace", path="n.txt", old_str="a", new_str="z"
    )
    assert denied.permission_denied and (wd / "n.txt").read_text() == "a\nb\nd\n"


@pytest.fixture
def catalog(tmp_path: Path) -> Catalog:
    catalog = Catalog.open(f"sqlite:///{tmp_path / 'store.sqlite'}")
    catalog.create_session(
        session_id="s1",
        model="fake",
        mode="code",
        workdir=str(tmp_path),
        run_dir=str(tmp_path),
        task="t",
    )
    return catalog


async def test_a_rerun_never_applies_an_edit_twice(wd: Path, catalog: Catalog) -> None:
    (wd / "f.txt").write_text("a\n")
    ctx = _ctx(wd, catalog=catalog, key="3:call_1")
    first = await _call(EDIT_FILE, ctx, path="f.txt", old_string="a", new_string="ab")
    (entry,) = catalog.events("s1", kinds=[EDIT_KIND])
    assert entry.key == "edit:3:call_1" and list(entry.payload["files"]) == ["f.txt"]
    # The rerun after a crash that came after the write: the file is at the after-hash.
    again = await _call(EDIT_FILE, ctx, path="f.txt", old_string="a", new_string="ab")
    assert again.content == first.content and (wd / "f.txt").read_text() == "ab\n"
    # Journaled but never written: the file is at the before-hash, so it is done now.
    (wd / "f.txt").write_text("a\n")
    assert (
        await _call(EDIT_FILE, ctx, path="f.txt", old_string="a", new_string="ab")
    ).content == first.content
    assert (wd / "f.txt").read_text() == "ab\n"
    # Neither hash: the file moved on since; the model is told it was interrupted.
    (wd / "f.txt").write_text("a\nzz\n")
    cut = await _call(EDIT_FILE, ctx, path="f.txt", old_string="a", new_string="ab")
    assert cut.is_error and cut.content.startswith("interrupted:") and "f.txt" in cut.content
    assert (wd / "f.txt").read_text() == "a\nzz\n"
    assert len(catalog.events("s1", kinds=[EDIT_KIND])) == 1


async def test_a_patch_cut_off_between_its_files_is_not_applied_again(
    wd: Path, catalog: Catalog
) -> None:
    (wd / "a.txt").write_text("a\n")
    (wd / "b.txt").write_text("b\n")
    patch = (
        "*** Begin Patch\n*** Update File: a.txt\n@@\n-a\n+aa\n*** Update File: b.txt\n@@\n-b\n+bb\n"
        "*** End Patch"
    )
    ctx = _ctx(wd, catalog=catalog, key="4:call_2")
    assert not (await _call(APPLY_PATCH_TOOL, ctx, input=patch)).is_error
    (wd / "b.txt").write_text("b\n")  # as if the crash came between the two writes
    cut = await _call(APPLY_PATCH_TOOL, ctx, input=patch)
    assert cut.is_error and "a.txt: written, b.txt: not written" in cut.content
    assert (wd / "a.txt").read_text() == "aa\n" and (wd / "b.txt").read_text() == "b\n"
