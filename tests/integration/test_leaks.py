"""A stored key never reaches a tool, the transcript, the engine's tables, logs or output."""

from __future__ import annotations

import base64
import json
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from swarmdeck.secrets.store import CredentialStore
from swarmdeck.testing.script import FakeRequest, Fault, Reply, ReplyToolCall
from swarmdeck.tools import sandbox
from swarmdeck.tools.builtins.files import GREP, LIST_DIR, READ_FILE
from swarmdeck.tools.builtins.shell import SHELL_TOOL
from swarmdeck.tools.sandbox import SANDBOX_ENV, SandboxInfo, detect_sandbox
from swarmdeck.workspace.rundir import RunDir
from tests.conftest import cli_env, run_cli, write_provider
from tests.integration.sandboxes import call, tool_ctx


def _files_containing(root: Path, needle: bytes) -> list[Path]:
    hits = []
    for path in root.rglob("*"):
        if path.is_file() and needle in path.read_bytes():
            hits.append(path)
    return hits


def test_key_never_leaks(sd_home: Path, workdir: Path, fake_llm) -> None:
    key = "sk-leak" + secrets.token_hex(20)
    (workdir / ".env").write_text(f"OPENAI_API_KEY={key}\n")
    seen_auth: list[str] = []

    def model(req: FakeRequest) -> Reply:
        # A model that somehow learned the key echoes it in text and in tool arguments.
        steps = [
            Reply(tool_calls=(ReplyToolCall("shell", {"argv": ["env"]}),)),
            Reply(
                text=f"the key is {key}",
                tool_calls=(
                    ReplyToolCall("read_file", {"path": ".env"}),
                    ReplyToolCall(
                        "shell", {"argv": ["cat", str(sd_home / "credentials" / "fake.key")]}
                    ),
                    ReplyToolCall("write_file", {"path": "notes.txt", "content": f"key={key}"}),
                ),
            ),
            Reply(fault=Fault(status=500, times=1), text=f"retried; key {key}"),
            Reply(text=f"final answer mentions {key}"),
        ]
        return steps[min(req.turn, len(steps) - 1)]

    fake_llm.set_script(model)
    write_provider(sd_home, "fake", fake_llm.openai_base_url, needs_key=True)
    stored = subprocess.run(
        [sys.executable, "-m", "swarmdeck", "key", "set", "fake", "--stdin"],
        input=key + "\n",
        env=cli_env(sd_home),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert stored.returncode == 0 and key not in stored.stdout + stored.stderr
    res = run_cli(
        sd_home,
        "run",
        "inspect the environment",
        "-m",
        "fake",
        "-C",
        str(workdir),
        # The short form only reads unless told (issue 10); this model also writes a file.
        "--mode",
        "code",
        OPENAI_API_KEY=key,
    )
    assert res.code == 0, res.stderr
    seen_auth = [r.headers.get("authorization", "") for r in fake_llm.requests]
    assert seen_auth and all(
        h == f"Bearer {key}" for h in seen_auth
    )  # the key did reach the provider
    assert len(fake_llm.requests) == 4  # turns 0-2, and turn 2 once more after its 500

    show = run_cli(
        sd_home,
        "sessions",
        "show",
        "--json",
        __import__("json").loads(run_cli(sd_home, "sessions", "ls", "--json").stdout)[0]["id"],
    )
    for text in (res.stdout, res.stderr, show.stdout, show.stderr):
        assert key not in text
    assert "[REDACTED]" in show.stdout
    leaked = [p for p in _files_containing(sd_home, key.encode()) if p.name != "fake.key"]
    assert leaked == [], f"key found in {leaked}"
    # The tool never saw it: env printed nothing of it and the credential file was hidden.
    assert key not in (workdir / "notes.txt").read_text()


# --- issue 30: the home stays out of every tool process, the sandbox on, off or opted out ---

KEY = "sk-enc30-" + "Hq4v" * 8
# How the key may come back: as it is, reversed, and base64 of either (what the model of
# issue 30 asked for: `open(key, 'rb').read()[::-1]`, base64-encoded).
ENCODINGS = [
    KEY,
    KEY[::-1],
    base64.b64encode(KEY.encode()).decode()[:32],
    base64.b64encode(KEY[::-1].encode()).decode()[:32],
    KEY.encode().hex()[:40],
]
SETTINGS = ["bwrap", "landlock", "off", "opted-out", "opted-out-bwrap", "opted-out-landlock"]


def _no_probe(kind: str) -> SandboxInfo:
    return SandboxInfo("none", f"{kind} made unavailable by the test")


@pytest.fixture(params=SETTINGS)
def setting(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The sandbox on (bwrap, landlock), off (fails closed), or opted out of; an opted-out
    run's home is hidden by the best of Landlock and bubblewrap, or by the one named."""
    name: str = request.param
    kind = {"bwrap": "bwrap", "landlock": "landlock"}.get(name, "off")
    monkeypatch.setenv(SANDBOX_ENV, kind)
    if name in ("bwrap", "landlock") and detect_sandbox().kind != name:
        pytest.skip(f"{name} does not work here")
    if name == "opted-out-bwrap":
        monkeypatch.setattr(sandbox, "_probe_landlock", lambda: _no_probe("Landlock"))
    if name == "opted-out-landlock":
        monkeypatch.setattr(sandbox, "_probe_bwrap", lambda: _no_probe("bwrap"))
    # getattr: the test also runs against the code before home_shield (to see it fail).
    shield = getattr(sandbox, "home_shield", lambda: "none before issue 30")
    if name.startswith("opted-out") and shield() is None:
        pytest.skip("nothing here can hide the home (tested by the refusal below)")
    return name


@pytest.fixture
def home_and_work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """A swarmdeck home holding a key and settings, beside a workdir on the same disk."""
    home = tmp_path / "sd-home"
    monkeypatch.setenv("SWARMDECK_HOME", str(home))
    CredentialStore(home / "credentials").set("openai", KEY)
    (home / "settings.yaml").write_text(f"# {KEY}\n")
    work = tmp_path / "work"
    work.mkdir()
    run = RunDir.create(home / "runs", "run-1").path
    return {"home": home, "work": work, "run": run, "key": home / "credentials" / "openai.key"}


def _encoded_read(path: object) -> list[str]:
    """The read of issue 30: the file reversed and base64-encoded by python."""
    script = f"import base64; print(base64.b64encode(open({str(path)!r}, 'rb').read()[::-1]))"
    return ["python3", "-c", script]


def _attacks(key: Path, home: Path) -> list[list[str]]:
    """Every way a command tried to bring the key (or the home) into the workdir or out."""
    return [
        _encoded_read(key),
        _encoded_read(home / "settings.yaml"),
        ["sh", "-c", f"cat {key}; echo done"],
        ["sh", "-c", f"base64 {key} | rev"],
        ["sh", "-c", f"cp {key} copied.key; cp {home}/settings.yaml copied.yaml"],
        ["sh", "-c", f"ln -s {key} link.key; ln -s {home} home-link"],
        ["sh", "-c", f"ln {key} hard.key"],
        _encoded_read("copied.key"),
        _encoded_read("link.key"),
        _encoded_read("home-link/credentials/openai.key"),
        _encoded_read("hard.key"),
    ]


async def test_no_encoding_of_the_key_reaches_the_model(
    setting: str, home_and_work: dict[str, Path]
) -> None:
    """Issue 30 item 1: `sandbox: off` lifted the workdir's confinement and opened the home
    with it; a reversed, base64-encoded read of the key went to the model."""
    box = home_and_work
    services = {"no_sandbox": True} if setting.startswith("opted-out-") else {}
    if setting == "opted-out":  # as the user of issue 30 did
        (box["home"] / "settings.yaml").write_text(f"sandbox: off\n# {KEY}\n")
    ctx = tool_ctx(box["work"], box["run"], "code", **services)
    outputs = [
        (await call(SHELL_TOOL, ctx, argv=argv)).content
        for argv in _attacks(box["key"], box["home"])
    ]
    for name in ("copied.key", "link.key", "hard.key", "home-link/credentials/openai.key"):
        outputs.append((await call(READ_FILE, ctx, path=name)).content)
    outputs.append((await call(GREP, ctx, pattern="sk-enc30", path=".")).content)
    for text in outputs:
        assert not [e for e in ENCODINGS if e in text], text
    for path in box["work"].rglob("*"):
        if path.is_file() and not path.is_symlink():
            assert KEY.encode() not in path.read_bytes(), path
    if setting == "off":
        assert all("needs a sandbox" in text for text in outputs[:3]), outputs[:3]
    else:  # the commands ran; the home was not there to read
        assert outputs[2].startswith("exit_code: ") and "done" in outputs[2], outputs[2]
        assert (box["work"] / "copied.key").exists() is False


async def test_an_opted_out_shell_refuses_where_nothing_can_hide_the_home(
    home_and_work: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fail closed: without bubblewrap and Landlock an opted-out run's shell refuses, and
    says how to fix it."""
    monkeypatch.setattr(sandbox, "_probe_landlock", lambda: _no_probe("Landlock"))
    monkeypatch.setattr(sandbox, "_probe_bwrap", lambda: _no_probe("bwrap"))
    box = home_and_work
    ctx = tool_ctx(box["work"], box["run"], "code", no_sandbox=True)
    out = await call(SHELL_TOOL, ctx, argv=_encoded_read(box["key"]))
    assert out.permission_denied, out.content
    assert "swarmdeck's home" in out.content and "apt install bubblewrap" in out.content
    assert not [e for e in ENCODINGS if e in out.content]


@pytest.mark.parametrize("where", ["is", "holds"])
async def test_file_tools_do_not_open_a_home_the_workdir_is_or_holds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """read_file, list_dir and grep in a workdir that is the home, or holds it (`-C ~` with
    the default ~/.swarmdeck): the home's files stay closed, links to them too."""
    work = tmp_path / "project"
    home = work if where == "is" else work / ".swarmdeck"
    monkeypatch.setenv("SWARMDECK_HOME", str(home))
    CredentialStore(home / "credentials").set("openai", KEY)
    (home / "settings.yaml").write_text(f"# {KEY}\n")
    (work / "readme.txt").write_text("a project file\n")
    shown = "settings.yaml" if where == "is" else ".swarmdeck/settings.yaml"
    (work / "alias.yaml").symlink_to(home / "settings.yaml")
    ctx = tool_ctx(work, tmp_path / "run", "code")
    for path in (shown, "alias.yaml"):
        out = await call(READ_FILE, ctx, path=path)
        assert out.permission_denied and "swarmdeck's home" in out.content, out.content
    grep = await call(GREP, ctx, pattern="sk-enc30|project", path=".")
    assert KEY not in grep.content
    if where == "holds":
        assert "readme.txt" in grep.content
        listing = await call(LIST_DIR, ctx, path=".swarmdeck")
        assert listing.permission_denied, listing.content


@pytest.mark.parametrize("mode", ["explore", "code"])
async def test_a_link_in_the_workdir_does_not_open_the_home(
    setting: str, home_and_work: dict[str, Path], mode: str
) -> None:
    """Links into the home made before the run (by an earlier run, or its user): a read-only
    mode under Landlock granted what a top-level link pointed to, beside a .env."""
    box = home_and_work
    if setting == "off" or (setting.startswith("opted-out") and mode == "explore"):
        pytest.skip("no shell here (a read-only mode without a sandbox has none)")
    # A .env of the project's: Landlock then grants the workdir entry by entry.
    (box["work"] / ".env").write_text("PROJECT_SETTING=1\n")
    (box["work"] / "link.key").symlink_to(box["key"])
    (box["work"] / "creds").symlink_to(box["key"].parent)
    (box["work"] / "home").symlink_to(box["home"])
    services = {"no_sandbox": True} if setting.startswith("opted-out") else {}
    ctx = tool_ctx(box["work"], box["run"], mode, **services)
    # A read-only mode runs no python: grep follows the links (-R) and names what it read.
    found = await call(SHELL_TOOL, ctx, argv=["grep", "-R", "-l", "Hq4v", "."])
    assert found.content.startswith("exit_code: ") and "openai.key" not in found.content
    assert "exit_code: 0" not in found.content, found.content
    if mode == "explore":
        return
    for name in ("link.key", "creds/openai.key", "home/credentials/openai.key"):
        out = await call(SHELL_TOOL, ctx, argv=_encoded_read(name))
        assert "exit_code: 0" not in out.content and not [e for e in ENCODINGS if e in out.content]


def test_sandbox_off_sends_no_encoding_of_the_key_to_the_model(
    sd_home: Path, workdir: Path, fake_llm
) -> None:
    """Issue 30 item 1 end to end, as it was found: `sandbox: off` in settings.yaml, a
    code-mode run whose model asks for the key file reversed and base64-encoded, then with
    `sh -c cat`. Nothing of it reaches the model's next request, the transcript or the home."""
    key_file = sd_home / "credentials" / "fake.key"
    asks = [_encoded_read(key_file), ["sh", "-c", f"cat {key_file}; echo done"]]

    def model(req: FakeRequest) -> Reply:
        if req.turn < len(asks):
            return Reply(tool_calls=(ReplyToolCall("shell", {"argv": asks[req.turn]}),))
        return Reply(text="done")

    fake_llm.set_script(model)
    write_provider(sd_home, "fake", fake_llm.openai_base_url, needs_key=True)
    (sd_home / "settings.yaml").write_text("sandbox: off\n")
    stored = run_cli(sd_home, "key", "set", "fake", "--stdin", stdin_text=KEY + "\n")
    assert stored.code == 0, stored.stderr
    res = run_cli(
        sd_home, "run", "read the key", "-m", "fake", "-C", str(workdir), "--mode", "code"
    )
    assert res.code == 0, res.stderr
    sent = [json.dumps(r.body) for r in fake_llm.requests]
    assert len(sent) == len(asks) + 1 and "exit_code" in sent[-1]
    for text in [*sent, res.stdout, res.stderr]:
        assert not [e for e in ENCODINGS if e in text], text
    leaked = [p for p in _files_containing(sd_home, KEY[::-1].encode()) if p.name != "fake.key"]
    assert leaked == []
