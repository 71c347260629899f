"""git options that make git run no program a repository's own config names.

A repository swarmdeck works on may be hostile: its `.git/config` (and the attributes that
pick a filter for a path) are then the attacker's, and git runs what they name on its own,
in commands that look harmless: a file system monitor and clean filters in `status` and
`diff`, smudge filters and the post-checkout hook in `worktree add`, git in every submodule
(with that one's config) in `status`, gpg in `log --format=%G?`. Every git command
swarmdeck runs, and every one a read-only mode lets a model run, starts with these options.
The user's own config (system, global, `-c` in the environment) is trusted: an LFS filter
set up there keeps working, unless the repository redefines it.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Sequence
from pathlib import Path

from swarmdeck.errors import PermissionDeniedError

# Set whatever the config says: no monitor, no hooks (worktree add runs post-checkout), no
# git run in submodules (it would read their config), no signature checks through a
# program the repository picked (the defaults are programs the user installed).
_FIXED = (
    "core.fsmonitor=false",
    "core.hooksPath=/dev/null",
    "submodule.recurse=false",
    "diff.ignoreSubmodules=dirty",
    "status.submoduleSummary=false",
    "log.showSignature=false",
    "gpg.program=gpg",
    "gpg.openpgp.program=gpg",
    "gpg.x509.program=gpgsm",
    "gpg.ssh.program=ssh-keygen",
)
# Config keys name drivers; git prints the section and the key lowercased.
_FILTER_KEY = re.compile(r"^filter\.(.+)\.[a-z]+$")
# Scopes the user wrote; `local` and `worktree` (and files they include) are the repository's.
_USER_SCOPES = frozenset({"system", "global", "command"})
CONFIG_TIMEOUT_S = 60


def repo_filters(cwd: Path, git_options: Sequence[str] = ()) -> list[str]:
    """Names of the filter drivers the repository's own config defines (or redefines)."""
    try:
        proc = subprocess.run(
            ["git", *git_options, "config", "-z", "--show-scope", "--get-regexp", r"^filter\."],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=CONFIG_TIMEOUT_S,
            env={**os.environ, "LC_ALL": "C"},
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired):
        return []  # the command itself will fail the same way and say so
    names: set[str] = set()
    fields = proc.stdout.split("\0")
    # -z --show-scope prints `scope NUL key LF value NUL` per entry.
    for scope, entry in zip(fields[0::2], fields[1::2], strict=False):
        match = _FILTER_KEY.match(entry.split("\n", 1)[0])
        if match and scope not in _USER_SCOPES:
            names.add(match.group(1))
    return sorted(names)


def fixed_options() -> list[str]:
    """The `-c` options for a git run on a repository swarmdeck made itself (its config
    names no filter): only the settings that switch programs off."""
    return [arg for pair in _FIXED for arg in ("-c", pair)]


def no_program_options(cwd: Path, git_options: Sequence[str] = ()) -> list[str]:
    """The `-c` options that go before the subcommand of a git run in `cwd` (with the
    run's own global options, such as `-C dir`, which pick the repository)."""
    pairs = list(_FIXED)
    for name in repo_filters(cwd, git_options):
        if "=" in name:
            # `-c` splits at the first `=`, so this driver cannot be switched off.
            raise PermissionDeniedError(
                f"refusing to run git in {cwd}: its config defines a filter named {name!r}",
                "rename that filter in the repository's .git/config",
            )
        # Empty commands run nothing; not required, so git carries on without them.
        pairs += [f"filter.{name}.{key}=" for key in ("clean", "smudge", "process")]
        pairs.append(f"filter.{name}.required=false")
    return [arg for pair in pairs for arg in ("-c", pair)]
