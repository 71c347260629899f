"""Targeted edits against whole-file writes: what a model must send to change a file.

Ten one-hunk edits of a 2,000-line Python file, and one patch of five files of a small
repository, each done by a scripted code-mode session on the fake LLM server (real OpenAI
SDK, real store): once with write_file (the model sends every changed file whole), once
with the edit tools (edit_file for each hunk, apply_patch for the five files). Prints the
output tokens the model spent (the fake derives them from what it sends, a token per four
characters), the request bytes and the wall time of each, and checks both leave the same
files.

    python bench/edits.py [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from swarmdeck.testing.fake_llm import FakeLLM
from swarmdeck.testing.script import FakeRequest, Reply, ReplyToolCall
from swarmdeck.tools.builtins.patch_format import patch_from_texts

EDITS = 10
REPO_FILES = 5


def big_file(lines: int) -> str:
    """A Python module of `lines` lines: small functions, each line distinct."""
    out = []
    for n in range(lines // 4):
        out += [
            f"def handler_{n}(request):",
            f"    value = request.get('k{n}', {n})",
            f"    return value * {n % 7 + 1}",
            "",
        ]
    return "\n".join(out) + "\n"


def edited(text: str, count: int) -> list[tuple[str, str]]:
    """`count` one-line edits spread over the file, as (old, new) pairs with a line of context."""
    lines = text.splitlines()
    step = len(lines) // count
    pairs = []
    for k in range(count):
        at = (k * step // 4) * 4 + 2  # a `return` line
        old = f"{lines[at - 1]}\n{lines[at]}"
        pairs.append((old, old.replace("return value", "return value + 1")))
    return pairs


def small_repo() -> dict[str, str]:
    """Five modules of about sixty lines each."""
    return {
        f"pkg/mod_{i}.py": big_file(60).replace("handler_", f"m{i}_handler_")
        for i in range(REPO_FILES)
    }


class Script:
    """The model: its tool calls in order, one per turn, then a closing text."""

    def __init__(self, calls: list[ReplyToolCall]) -> None:
        self.calls = calls

    def __call__(self, req: FakeRequest) -> Reply:
        if req.turn < len(self.calls):
            return Reply(tool_calls=(self.calls[req.turn],))
        return Reply(text="done")


@dataclass
class Run:
    """What one session cost."""

    output_tokens: int
    request_bytes: int
    wall_s: float


def write_calls(workdir: Path, pairs: list[tuple[str, str]], path: str) -> list[ReplyToolCall]:
    text = (workdir / path).read_text()
    calls = []
    for old, new in pairs:
        text = text.replace(old, new, 1)
        calls.append(ReplyToolCall("write_file", {"path": path, "content": text}))
    return calls


async def run(fake: FakeLLM, workdir: Path, calls: list[ReplyToolCall]) -> Run:
    """One scripted code-mode session making these calls; its cost."""
    from swarmdeck import AgentSpec, Swarm

    fake.set_script(Script(calls))
    fake.reset_stats()
    started = time.monotonic()
    async with Swarm() as swarm:
        session = await swarm.start(
            "edit", AgentSpec("fake", mode="code", max_turns=len(calls) + 5), workdir=workdir
        )
        result = await session.result(timeout=600)
        if result.status != "completed":
            raise SystemExit(f"the session did not complete: {result.error}")
        errors = [
            e.payload["content"]
            for e in swarm.host.catalog.events(session.id, kinds=["tool_result"])
            if e.payload["is_error"]
        ]
        if errors:
            raise SystemExit(f"a tool call failed: {errors[0]}")
        output = swarm.host.catalog.usage_totals([session.id]).output
    wall = time.monotonic() - started
    sent = sum(len(json.dumps(r.body)) for r in fake.requests if isinstance(r.body, dict))
    return Run(output, sent, wall)


def fresh(root: Path, name: str, files: dict[str, str]) -> Path:
    workdir = root / name
    for path, text in files.items():
        (workdir / path).parent.mkdir(parents=True, exist_ok=True)
        (workdir / path).write_text(text)
    return workdir


def show(label: str, whole: Run, targeted: Run) -> float:
    ratio = whole.output_tokens / max(1, targeted.output_tokens)
    print(f"{label}:")
    for name, r in (("write_file", whole), ("edit tools", targeted)):
        print(
            f"  {name:<11} output tokens {r.output_tokens:>8,}  request bytes {r.request_bytes:>10,}  wall {r.wall_s:5.2f} s"
        )
    print(
        f"  ratio: {ratio:.1f}x fewer output tokens, "
        f"{whole.request_bytes / max(1, targeted.request_bytes):.1f}x fewer request bytes"
    )
    return ratio


async def bench(root: Path, fake: FakeLLM, lines: int) -> float:
    source = big_file(lines)
    pairs = edited(source, EDITS)
    a = fresh(root, "big-write", {"app.py": source})
    b = fresh(root, "big-edit", {"app.py": source})
    whole = await run(fake, a, write_calls(a, pairs, "app.py"))
    edit_calls = [
        ReplyToolCall("edit_file", {"path": "app.py", "old_string": o, "new_string": n})
        for o, n in pairs
    ]
    targeted = await run(fake, b, edit_calls)
    assert (a / "app.py").read_text() == (b / "app.py").read_text() != source
    ratio = show(f"{EDITS} one-hunk edits of a {lines:,}-line file", whole, targeted)

    repo = small_repo()
    changed = {p: t.replace("return value * 3", "return value * 30") for p, t in repo.items()}
    c, d = fresh(root, "repo-write", repo), fresh(root, "repo-patch", repo)
    writes = [ReplyToolCall("write_file", {"path": p, "content": t}) for p, t in changed.items()]
    bodies = [
        patch_from_texts(p, repo[p], t).split("\n", 1)[1].rsplit("*** End Patch", 1)[0]
        for p, t in changed.items()
    ]
    patch = "*** Begin Patch\n" + "".join(bodies) + "*** End Patch\n"
    whole_repo = await run(fake, c, writes)
    patched = await run(fake, d, [ReplyToolCall("apply_patch", {"input": patch})])
    assert all((c / p).read_text() == (d / p).read_text() == t for p, t in changed.items())
    show(f"one {REPO_FILES}-file patch of a small repository", whole_repo, patched)
    return ratio


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="a 400-line file (a test's size)")
    args = parser.parse_args()
    lines = 400 if args.quick else 2000
    with tempfile.TemporaryDirectory(prefix="sd-bench-edits-") as tmp:
        root = Path(tmp)
        os.environ["SWARMDECK_HOME"] = str(root / "home")
        with FakeLLM() as fake:
            providers = root / "home" / "providers"
            providers.mkdir(parents=True)
            doc = {
                "key": "fake",
                "kind": "openai",
                "base_url": fake.openai_base_url,
                "model": "scripted",
                "needs_key": False,
                # Whole-file writes of the big file fill a default window: no compaction here.
                "context_tokens": 4_000_000,
            }
            (providers / "fake.yaml").write_text(yaml.safe_dump(doc))
            ratio = asyncio.run(bench(root, fake, lines))
    print(f"edits: {ratio:.1f}x fewer output tokens than whole-file writes")


if __name__ == "__main__":
    sys.exit(main())
