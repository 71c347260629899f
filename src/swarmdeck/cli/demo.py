"""`swarmdeck demo`: a whole session against a scripted model, with no key and no network."""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.panel import Panel
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text

from swarmdeck.cli.app import app
from swarmdeck.cli.sessions import render_tree
from swarmdeck.views.figures import TokenFigures

if TYPE_CHECKING:
    from swarmdeck.runtime.host import Host

# The packaged scripted provider (models/providers/demo.yaml): every process that runs a
# demo session serves its script itself, so the waiting session finishes after the demo.
DEMO_MODEL = "demo:scripted"
# The provider the closing hint sends a new user to.
NEXT_PROVIDER = "openai"
# A second session that asks you a question and is left waiting for the answer.
QUESTION_TASK = "Ask which branch the release notes should cover, then draft them."
QUESTION_WAIT_S = 60.0
DEMO_TASK = (
    "Review this small project with the help of sub-agents, write NOTES.md with what a "
    "newcomer should know about calc.py, store a review report, and submit a result."
)

CALC_PY = '''"""A tiny calculator."""


def add(a: float, b: float) -> float:
    return a + b


def mul(a: float, b: float) -> float:
    return a * b


def div(a: float, b: float) -> float:
    return a / b
'''

TEST_CALC_PY = """from calc import add, mul


def test_add():
    assert add(2, 3) == 5


def test_mul():
    assert mul(2, 3) == 6
"""


def make_demo_project() -> Path:
    """A throwaway project for the demo session to work in."""
    root = Path(tempfile.mkdtemp(prefix="swarmdeck-demo-"))
    (root / "calc.py").write_text(CALC_PY)
    (root / "tests").mkdir()
    (root / "tests" / "test_calc.py").write_text(TEST_CALC_PY)
    (root / "README.md").write_text("# calc\n\nA tiny calculator used by the swarmdeck demo.\n")
    return root


@app.command()
def demo() -> None:
    """Run a durable session against a scripted model: no key and no network needed."""
    console = Console()
    project = make_demo_project()
    console.print(
        Panel.fit(
            "The model in this demo is [bold]scripted[/]: a fake LLM server on 127.0.0.1, "
            "started by the process that runs the session, answers from a fixed script "
            "through the real OpenAI SDK. Everything else is real: the durable session on "
            "SQLite, the tools confined to the project directory, and the transcript in the "
            "catalog.",
            title="swarmdeck demo",
            border_style="cyan",
        )
    )
    console.print(f"project: {project}\n")
    # The runtime takes a moment to import: the banner above shows at once.
    from swarmdeck.cli.following import run_and_follow
    from swarmdeck.runtime.host import Host, SessionRequest

    host = Host()
    record = host.create_session(
        SessionRequest(DEMO_TASK, DEMO_MODEL, project, title="swarmdeck demo")
    )

    async def go() -> str:
        try:
            await run_and_follow(host, record.id)
            return await leave_a_question(host, project)
        finally:
            await host.aclose()

    question = asyncio.run(go())
    _summary(console, host, record.id, project)
    console.print(
        f"\nsession [bold]{question}[/] is waiting for [bold magenta]your answer[/]:\n"
        "open [bold]swarmdeck tui[/], press n for what needs you, then a to answer"
    )


async def leave_a_question(host: Host, project: Path) -> str:
    """Start a session that asks the user a question, and leave it waiting for the answer
    (the TUI answers it); returns its id."""
    import time

    from swarmdeck.runtime.host import SessionRequest

    record = host.create_session(
        SessionRequest(QUESTION_TASK, DEMO_MODEL, project, title="a question for you")
    )
    await host.start(record.id)
    deadline = time.monotonic() + QUESTION_WAIT_S
    while host.catalog.get_session(record.id).status != "input_required":
        if time.monotonic() > deadline:
            break
        await asyncio.sleep(0.05)
    return record.id


def _summary(console: Console, host: Host, session_id: str, project: Path) -> None:
    session = host.catalog.get_session(session_id)
    events = host.catalog.events(session_id)
    usage = host.catalog.usage_totals([session_id])
    table = Table(title="what the coordinator did", box=None, header_style="bold")
    table.add_column("step")
    table.add_column("tool call")
    table.add_column("outcome")
    step = 0
    for ev in events:
        if ev.kind != "tool_result":
            continue
        step += 1
        outcome = ev.payload["content"].splitlines()[0][:70] if ev.payload["content"] else ""
        style = "red" if ev.payload.get("is_error") else "green"
        table.add_row(str(step), ev.payload["name"], f"[{style}]{outcome}[/]")
    console.print()
    console.print(table)
    console.print(render_tree(host.catalog, session.id))
    notes = project / "NOTES.md"
    if notes.exists():
        console.print(
            Panel(Syntax(notes.read_text(), "markdown"), title="NOTES.md, written by the agent")
        )
    for art in host.catalog.artifacts_of([session.id]):
        link = f"artifact://{session.id}/{art['name']}"
        console.print(Panel(Text(Path(art["path"]).read_text()), title=f"artifact {link}"))
    if session.result is not None:
        console.print(Panel(json.dumps(session.result, indent=2), title="submitted result"))
    console.print(
        f"session [bold]{session.id}[/] · status [bold green]{session.status}[/] · "
        f"{usage.turns} model turns\n{TokenFigures.of(usage).line()}"
    )
    # A command to copy is never broken across lines: one a line, whole (soft_wrap).
    for line in (
        f"transcript: [bold]swarmdeck sessions show {session.id}[/]",
        f"tree:       [bold]swarmdeck sessions tree {session.id}[/]",
        f"(stored in {host.settings.store_url.removeprefix('sqlite:///')})",
        f"next: point swarmdeck at a real provider — `swarmdeck key set {NEXT_PROVIDER}`, then",
        f'      `swarmdeck run "explain this repo" --model {_real_model(host)} --workdir .`',
    ):
        console.print(line, soft_wrap=True)


def _real_model(host: Host) -> str:
    """The model a first real run would use: OpenAI's default as the provider files say."""
    config = host.services.providers.get(NEXT_PROVIDER)
    return f"{config.key}:{config.model}"
