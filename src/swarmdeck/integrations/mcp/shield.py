"""A stdio MCP server runs with swarmdeck's own homes out of its reach.

A server is code the user chose, but the model drives it: a filesystem server reads what it
is asked to, a fetch server posts what it is given. swarmdeck's home holds the credential
store and every session's store, so a server runs in the opted-out layout of the tools
(tools/jail/opted_out.py): the whole machine and the network, less the homes.

- bubblewrap first: an empty tmpfs over each home, in a pid namespace of its own (without
  one, /proc/PID/root of the worker would walk around the cover);
- else Landlock: every path but the homes (a grant covers what exists, so a server cannot
  create a new entry beside a home, such as a first ~/.cache: install bubblewrap);
- else a server starts only when the user opted out of the sandbox, as the shell does.
"""

from __future__ import annotations

from pathlib import Path

from swarmdeck.config import home_dir, sandbox_opted_out
from swarmdeck.tools.jail.command import launcher_argv, launcher_options
from swarmdeck.tools.jail.opted_out import open_bwrap_args, open_landlock_rules
from swarmdeck.tools.sandbox import detect_sandbox, no_shield_reason
from swarmdeck.tools.visible import swarmdeck_homes_within


class NoShield(Exception):
    """No layout here keeps the homes from a server (the message says how to fix it)."""


def shielded_argv(command: str, args: list[str], cwd: Path | None) -> list[str]:
    """The command line that starts a stdio server with the homes hidden from it."""
    where = (cwd or Path.cwd()).resolve()
    homes = [home_dir(), Path.home() / ".swarmdeck", *swarmdeck_homes_within(where)]
    hidden = list(dict.fromkeys(h.resolve() for h in homes))
    kind = detect_sandbox().kind
    if kind == "bwrap":
        prefix = open_bwrap_args(
            workdir=where, run_dir=where, env={}, network=True, hidden_paths=hidden
        )
        # Its environment is the one its start is given (its keys among them), never
        # rebuilt from argv, where a key would show.
        prefix.remove("--clearenv")
        return [*prefix, "--", command, *args]
    if kind == "landlock":
        rules = open_landlock_rules(workdir=where, run_dir=where, hidden_paths=hidden)
        return launcher_argv([command, *args], launcher_options(network=True, landlock_rules=rules))
    if sandbox_opted_out():
        return [command, *args]
    raise NoShield(
        f"an MCP server would see swarmdeck's home ({no_shield_reason()}); install "
        "bubblewrap, or accept it with `sandbox: off` in $SWARMDECK_HOME/settings.yaml"
    )
