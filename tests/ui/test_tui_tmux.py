"""End to end in a real terminal: `swarmdeck tui` in tmux (send-keys, capture-pane) while a
real `swarmdeck worker` runs scripted sessions: a session that asks shows as needing you,
the answer typed in the TUI reaches it, and its end shows; a message sent from the TUI
wakes an idle session."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from swarmdeck.runtime.host import Host, SessionRequest
from tests.conftest import cli_env, write_provider
from tests.integration.test_fleet_support import Fleet
from tests.integration.test_sessions_support import (
    Agent,
    Scripted,
    call,
    calls,
    open_catalog,
    status_is,
    text,
    tool_results,
    user_texts,
    wait_for,
)

WIDTH, HEIGHT = 150, 42

pytestmark = [
    pytest.mark.fleet,
    pytest.mark.skipif(
        shutil.which("tmux") is None,
        reason="needs tmux (scripts/test-deps installs it where it can)",
    ),
]


class Terminal:
    """A tmux session of a given size running one command, on a tmux server of its own.

    The server is private (its own socket, no config file) and is started with an explicit
    environment: under pytest, the capture plugin imports readline, and GNU readline puts
    COLUMNS=80 LINES=24 into the process's C environment (not into os.environ). A tmux
    server started with that inherited environment hands it to every pane, and textual
    prefers COLUMNS/LINES to the tty's size, so the TUI drew itself 80x24 in a 150x42
    window. The server, shared by every user of the default socket, would keep it too.
    """

    def __init__(self, socket: Path, name: str, command: str, env: dict[str, str]) -> None:
        self.socket = socket
        self.name = name
        # An explicit env (os.environ's copy never saw readline's COLUMNS); `env -u` also
        # drops whatever a caller's environment holds, so the tty's size is the only one.
        self.env = {k: v for k, v in env.items() if k not in ("COLUMNS", "LINES")}
        self.env["TERM"] = "xterm-256color"
        self.tmux(
            "new-session", "-d", "-s", name, "-x", str(WIDTH), "-y", str(HEIGHT),
            f"env -u COLUMNS -u LINES {command}",
        )  # fmt: skip

    def tmux(self, *args: str) -> str:
        """Run a tmux command on this terminal's server; returns what it printed."""
        return subprocess.run(
            ["tmux", "-S", str(self.socket), "-f", "/dev/null", *args],
            env=self.env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout

    def keys(self, *keys: str) -> None:
        """Type keys (tmux key names, or literal text with `-l`)."""
        self.tmux("send-keys", "-t", self.name, *keys)

    def type(self, text: str) -> None:
        """Type literal text."""
        self.tmux("send-keys", "-t", self.name, "-l", text)

    def screen(self) -> str:
        """What the terminal shows now."""
        return self.tmux("capture-pane", "-p", "-t", self.name)

    def wait_for(self, *words: str, timeout: float = 60) -> str:
        """Wait until the screen shows every word; returns the screen."""
        deadline = time.monotonic() + timeout
        while True:
            shown = self.screen()
            if all(w in shown for w in words):
                return shown
            if time.monotonic() > deadline:
                raise AssertionError(f"the terminal never showed {words}:\n{shown}")
            time.sleep(0.2)

    def close(self) -> None:
        """End the tmux server (and the TUI in it)."""
        subprocess.run(
            ["tmux", "-S", str(self.socket), "kill-server"], env=self.env, capture_output=True
        )


@pytest.fixture
def terminal_env(sd_home: Path) -> Iterator[dict[str, str]]:
    """The environment the TUI runs with: this test's home and store."""
    yield cli_env(sd_home, TZ="UTC")


@pytest.fixture
def tmux_socket() -> Iterator[Path]:
    """A socket for a tmux server of this test's own (short: a socket path has a limit)."""
    folder = Path(tempfile.mkdtemp(prefix="sd-tmux-"))
    try:
        yield folder / "s"
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_answer_and_send_from_the_tui_reach_a_real_worker(
    sd_home: Path,
    workdir: Path,
    fake_llm,
    terminal_env: dict[str, str],
    tmux_socket: Path,
) -> None:
    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    fake_llm.set_script(
        Scripted(
            {
                "release": Agent(
                    [
                        calls(call("ask_user", question="Which branch should I release from?")),
                        lambda req: text("releasing from " + tool_results(req)[-1].split(": ")[-1]),
                    ]
                ),
                "chat": Agent([text("ready"), lambda req: text("echo: " + user_texts(req)[-1])]),
            }
        )
    )
    fleet = Fleet(sd_home)
    term = None
    try:
        # The TUI starts first and follows everything that happens from then on: the
        # worker coming up, the sessions it runs, the question.
        command = f"{shlex.quote(sys.executable)} -m swarmdeck tui"
        term = Terminal(tmux_socket, "tui", command, terminal_env)
        fleet.start("tui-host")
        host = Host()
        asker = host.create_session(
            SessionRequest("prepare the release", "fake", workdir, title="release"), fleet=True
        ).id
        chat = host.create_session(
            SessionRequest(
                "chat with me", "fake", workdir, title="chat", options={"one_shot": False}
            ),
            fleet=True,
        ).id
        catalog = open_catalog()
        assert term.tmux("display", "-p", "-t", "tui", "#{pane_width}x#{pane_height}") == (
            f"{WIDTH}x{HEIGHT}\n"
        )
        term.wait_for("need you", "release", "chat", "workers 1/1 alive")
        wait_for(status_is(catalog, chat, "idle"), timeout=60, what="the chat to rest")
        # The needs-me view shows the one session that asks; its question is in view.
        term.keys("n")
        shown = term.wait_for("filter: needs me", "Which branch should I release from?")
        assert "chat" not in shown.split("│")[0]
        term.keys("a")
        term.wait_for("your answer to")
        term.type("main")
        term.keys("Enter")
        wait_for(status_is(catalog, asker, "completed"), timeout=60, what="the answer to land")
        term.keys("n")  # every session again
        term.wait_for("✓ completed", timeout=30)
        term.type("/")
        wait_for(lambda: "s send" not in term.screen(), timeout=10, what="the search line")
        term.type("release")
        term.keys("Enter")
        term.wait_for("releasing from main", "s send", timeout=30)  # back on the tree
        # Send the idle chat a message from the TUI: the worker wakes it.
        term.type("/")
        # Focused on the search line, the footer keeps only the keys that still apply.
        wait_for(lambda: "s send" not in term.screen(), timeout=10, what="the search line")
        term.keys("C-u")  # the search line's text, gone
        term.wait_for("filter: all")
        term.type("chat")
        term.keys("Enter")
        term.wait_for("chat with me")
        term.keys("s")
        term.wait_for("message to")
        term.type("hello there")
        term.keys("Enter")
        term.wait_for("echo: hello there", timeout=60)
        assert catalog.get_session(chat).status == "idle"
    finally:
        if term is not None:
            term.close()
        fleet.close()
