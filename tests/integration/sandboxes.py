"""The sandboxes a security test runs under: bubblewrap, Landlock, and none (bwrap made
unavailable with SWARMDECK_SANDBOX). A kind that does not work on this machine skips."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from swarmdeck.tools.base import ToolContext, ToolOutcome
from swarmdeck.tools.sandbox import SANDBOX_ENV, detect_sandbox

KINDS = ["bwrap", "landlock", "none"]
ENV_VALUE = {"bwrap": "bwrap", "landlock": "landlock", "none": "off"}


@pytest.fixture(params=KINDS)
def sandbox_kind(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run the test under each sandbox; the environment variable narrows detection."""
    kind: str = request.param
    monkeypatch.setenv(SANDBOX_ENV, ENV_VALUE[kind])
    info = detect_sandbox()
    # getattr: the same tests also run against code from before `kind` (to see them fail).
    found = getattr(info, "kind", "bwrap" if info.available else "none")
    if found != kind:
        pytest.skip(f"{kind} does not work here: {info.reason}")
    return kind


def tool_ctx(workdir: Path, run_dir: Path, mode: str, **services: Any) -> ToolContext:
    """A tool context as the runtime builds one."""
    return ToolContext(
        session_id="s1", workdir=workdir, mode=mode, run_dir=run_dir, services=dict(services)
    )


async def call(tool: Any, ctx: ToolContext, **args: Any) -> ToolOutcome:
    """Call a tool the way a session does, with JSON arguments."""
    return await tool.call(ctx, json.dumps(args))


@pytest.fixture
def listener() -> Iterator[int]:
    """A listening loopback socket; connect() succeeds on its backlog without accept()."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(8)
        yield srv.getsockname()[1]
