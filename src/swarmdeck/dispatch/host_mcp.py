"""Register `swarmdeck mcp serve` in a planner host's MCP configuration (`swarmdeck init
claude|codex`), idempotently, and remove it (`swarmdeck uninstall`). Only swarmdeck's own
entry is touched; everything else in the file is kept as it was.

    claude   ~/.claude.json (user scope), or <target>/../.mcp.json (the project's) with --target
    codex    ~/.codex/config.toml, or <target>/config.toml, table [mcp_servers.swarmdeck]
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from swarmdeck.config import HOME_ENV
from swarmdeck.dispatch.host_skills import HOSTS
from swarmdeck.errors import ConfigError, UsageError

SERVER_KEY = "swarmdeck"
TOML_TABLE = f"mcp_servers.{SERVER_KEY}"
TOML_HEADER_RE = re.compile(r"^\s*\[\[?\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")


@dataclass(frozen=True)
class Registration:
    """Where the server was registered, and whether the file changed."""

    path: Path
    changed: bool


def config_path(host: str, target: Path | None) -> Path:
    """The host's MCP configuration file that init writes."""
    if host not in HOSTS:
        raise UsageError(f"unknown host {host!r}", f"use one of: {', '.join(HOSTS)}")
    if host == "claude":
        return target.expanduser().parent / ".mcp.json" if target else Path.home() / ".claude.json"
    return (target.expanduser() if target else Path.home() / ".codex") / "config.toml"


def server_command() -> list[str]:
    """How the host starts the server: this installation's `swarmdeck`, by absolute path."""
    script = Path(sys.executable).parent / "swarmdeck"
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script), "mcp", "serve"]
    return [sys.executable, "-m", "swarmdeck", "mcp", "serve"]


def server_env() -> dict[str, str]:
    """The environment the server needs to find the user's store: the home when it is not
    the default. Never the store URL (it may hold a password) nor any key."""
    home = os.environ.get(HOME_ENV)
    return {HOME_ENV: str(Path(home).expanduser().resolve())} if home else {}


def register(host: str, target: Path | None) -> Registration:
    """Write (or update in place) swarmdeck's entry in the host's MCP configuration."""
    path = config_path(host, target)
    command = server_command()
    if host == "claude":
        doc = _read_json(path)
        servers = doc.setdefault("mcpServers", {})
        if not isinstance(servers, dict):
            raise ConfigError(f"{path}: mcpServers is not an object", "fix the file")
        entry = {"type": "stdio", "command": command[0], "args": command[1:], "env": server_env()}
        if servers.get(SERVER_KEY) == entry:
            return Registration(path, False)
        servers[SERVER_KEY] = entry
        _write(path, json.dumps(doc, indent=2) + "\n")
        return Registration(path, True)
    text = _read_text(path)
    _parse_toml(path, text)
    updated = _without_table(text).rstrip("\n")
    updated = (updated + "\n\n" if updated else "") + _toml_table(command, server_env())
    if updated == text:
        return Registration(path, False)
    parsed = _parse_toml(path, updated)
    assert parsed["mcp_servers"][SERVER_KEY]["command"] == command[0]
    _write(path, updated)
    return Registration(path, True)


def unregister(host: str, target: Path | None) -> Path | None:
    """Remove swarmdeck's entry; the file's path when there was one, else None."""
    path = config_path(host, target)
    if not path.is_file():
        return None
    if host == "claude":
        doc = _read_json(path)
        servers = doc.get("mcpServers")
        if not isinstance(servers, dict) or SERVER_KEY not in servers:
            return None
        del servers[SERVER_KEY]
        if doc == {"mcpServers": {}} and target is not None:
            path.unlink()  # a project file that held only our entry
        else:
            _write(path, json.dumps(doc, indent=2) + "\n")
        return path
    text = _read_text(path)
    if SERVER_KEY not in _parse_toml(path, text).get("mcp_servers", {}):
        return None
    _write(path, _without_table(text).rstrip("\n") + "\n")
    return path


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        doc = json.loads(path.read_text(encoding="utf-8") or "{}")
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path} is not valid JSON ({exc})", "fix or move the file") from None
    if not isinstance(doc, dict):
        raise ConfigError(f"{path} is not a JSON object", "fix or move the file")
    return doc


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8") if path.is_file() else ""
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from None


def _parse_toml(path: Path, text: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path} is not valid TOML ({exc})", "fix or move the file") from None


def _toml_table(command: list[str], env: dict[str, str]) -> str:
    """Our table (JSON strings are valid TOML basic strings)."""
    lines = [
        "# swarmdeck's MCP server: written by `swarmdeck init codex`, removed by `uninstall`",
        f"[{TOML_TABLE}]",
        f"command = {json.dumps(command[0])}",
        f"args = {json.dumps(command[1:])}",
    ]
    if env:
        lines.append(f"[{TOML_TABLE}.env]")
        lines += [f"{k} = {json.dumps(v)}" for k, v in env.items()]
    return "\n".join(lines) + "\n"


def _without_table(text: str) -> str:
    """The TOML text without our tables (and the comment line init writes above them)."""
    out: list[str] = []
    skipping = False
    for line in text.splitlines():
        header = TOML_HEADER_RE.match(line)
        if header:
            name = header.group(1).replace('"', "").replace(" ", "")
            skipping = name == TOML_TABLE or name.startswith(TOML_TABLE + ".")
        if skipping:
            continue
        if line.startswith("# swarmdeck's MCP server: written by"):
            continue
        out.append(line)
    return "\n".join(out) + ("\n" if out else "")


def _write(path: Path, text: str) -> None:
    """Replace the file in one step, keeping its mode (a new one is 0600: it may be read
    by a host that keeps tokens beside it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = path.stat().st_mode & 0o777 if path.exists() else 0o600
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
