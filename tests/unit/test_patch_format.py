"""The Codex patch format: a patch made by difflib from any two texts applies to give the
second; add, delete and move parse; a hunk that does not match is named."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from swarmdeck.tools.builtins.patch_format import (
    PatchError,
    apply_hunks,
    parse_patch,
    patch_from_texts,
)

# Few distinct lines, so texts repeat lines and hunks must be placed by their context.
LINE = st.sampled_from(["a", "b", "c", "", "  a", "def f():", "    return 1", "x y", "é ü"])
TEXT = st.lists(LINE, max_size=30).map(lambda lines: "".join(f"{line}\n" for line in lines))


def _applied(old: str, patch: str) -> str:
    (op,) = parse_patch(patch)
    assert op.kind == "update"
    lines = apply_hunks(old.splitlines(), op.hunks, op.path)
    return "".join(f"{line}\n" for line in lines)


@settings(max_examples=300, deadline=None)
@given(TEXT, TEXT)
def test_a_difflib_patch_applies_to_give_the_second_text(old: str, new: str) -> None:
    if old == new:
        return
    assert _applied(old, patch_from_texts("f.py", old, new)) == new


@settings(max_examples=100, deadline=None)
@given(TEXT, TEXT, st.integers(min_value=0, max_value=3))
def test_any_context_size_applies(old: str, new: str, context: int) -> None:
    if old == new or not old:
        return
    assert _applied(old, patch_from_texts("f.py", old, new, context)) == new


@given(st.lists(LINE, min_size=1, max_size=10), st.text(alphabet="abc/_.", min_size=1))
def test_add_delete_and_move_parse(lines: list[str], name: str) -> None:
    name = name.strip() or "n"
    patch = "\n".join(
        [
            "*** Begin Patch",
            f"*** Add File: new/{name}",
            *(f"+{line}" for line in lines),
            f"*** Delete File: old/{name}",
            f"*** Update File: src/{name}",
            f"*** Move to: dst/{name}",
            "@@ def f():",
            "-    return 1",
            "+    return 2",
            "*** End Patch",
        ]
    )
    add, delete, update = parse_patch(patch)
    assert (add.kind, add.path, add.contents) == (
        "add",
        f"new/{name}",
        "".join(f"{x}\n" for x in lines),
    )
    assert (delete.kind, delete.path) == ("delete", f"old/{name}")
    assert (update.kind, update.path, update.move_to) == ("update", f"src/{name}", f"dst/{name}")
    (hunk,) = update.hunks
    assert (hunk.anchor, hunk.old, hunk.new) == ("def f():", ["    return 1"], ["    return 2"])


def test_anchor_picks_the_second_of_two_identical_blocks() -> None:
    text = ["def f():", "    return 1", "def g():", "    return 1"]
    (op,) = parse_patch(
        "*** Begin Patch\n*** Update File: m.py\n@@ def g():\n-    return 1\n+    return 2\n"
        "*** End Patch"
    )
    assert apply_hunks(text, op.hunks, op.path) == [
        "def f():",
        "    return 1",
        "def g():",
        "    return 2",
    ]


def test_a_hunk_that_does_not_match_is_named_with_the_nearest_lines() -> None:
    (op,) = parse_patch(
        "*** Begin Patch\n*** Update File: m.py\n@@\n x = 1\n-y = 2\n+y = 3\n@@\n-zz = 9\n+zz = 8\n"
        "*** End Patch"
    )
    with pytest.raises(PatchError) as err:
        apply_hunks(["x = 1", "y = 2", "zz = 7"], op.hunks, op.path)
    message = err.value.message
    assert message.startswith("hunk 2 of m.py did not apply")
    assert "nearest (line 3" in message and "zz = 7" in message


@pytest.mark.parametrize(
    ("patch", "error"),
    [
        ("*** Update File: a\n", "first line"),
        ("*** Begin Patch\n*** Add File: a\n+x\n", "last line"),
        ("*** Begin Patch\n*** Frobnicate: a\n*** End Patch", "line 2: '*** Frobnicate: a'"),
        ("*** Begin Patch\n*** Update File: a\n*** End Patch", "has no hunks"),
        ("*** Begin Patch\n*** End Patch", "no file operations"),
    ],
)
def test_malformed_patches_say_what_is_wrong(patch: str, error: str) -> None:
    with pytest.raises(PatchError, match=error.replace("*", r"\*")):
        parse_patch(patch)
