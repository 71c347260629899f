"""Scripted models: a packaged script answered by swarmdeck.testing's fake server on
loopback, started on demand in the process that calls the model, so any process that runs
a scripted session (the demo's, the worker or `sessions resume` that takes it over after
the demo ended) reaches it through the real SDK over real HTTP."""

from __future__ import annotations

import threading
from importlib.resources import files
from pathlib import Path
from typing import TYPE_CHECKING

from swarmdeck.errors import ConfigError

if TYPE_CHECKING:
    from swarmdeck.testing.fake_llm import FakeLLM

_lock = threading.Lock()
# One server per script for the life of the process (its thread is a daemon's).
_servers: dict[str, FakeLLM] = {}


def script_path(name: str) -> Path:
    """The packaged script `name` (swarmdeck/testing/scripts/NAME.yaml)."""
    path = Path(str(files("swarmdeck.testing") / "scripts" / f"{name}.yaml"))
    if not path.is_file():
        raise ConfigError(
            f"no packaged script {name!r} for a scripted provider",
            "reinstall swarmdeck, or fix the provider's `script:` (`swarmdeck provider ls`)",
        )
    return path


def serve_script(name: str) -> str:
    """The OpenAI base URL of this process's server of script `name`, started if needed."""
    with _lock:
        server = _servers.get(name)
        if server is None:
            from swarmdeck.testing.fake_llm import FakeLLM

            server = FakeLLM(script_path(name)).start()
            _servers[name] = server
        return server.openai_base_url
