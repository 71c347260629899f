"""What of the host a tool process may see: system dirs, the interpreter, trusted programs.

One list serves the bubblewrap binds, the Landlock rules and the program check, so what a
sandbox shows and what the policy trusts never drift apart.
"""

from __future__ import annotations

import functools
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

from swarmdeck.config import home_dir

# System directories every program needs (merged-/usr systems make most of them symlinks).
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# Directories whose programs come from the system's packages, not from a project.
SYSTEM_PROGRAM_DIRS = (
    "/usr/local/sbin",
    "/usr/local/bin",
    "/usr/sbin",
    "/usr/bin",
    "/sbin",
    "/bin",
)
# Entries of /etc that hold host secrets (password hashes, host keys, VPN and Wi-Fi
# credentials, sudo rules): never shown to a tool, even read-only. /etc/ssl is shown
# without its private/ folder.
ETC_SECRETS = frozenset(
    {"shadow", "shadow-", "gshadow", "gshadow-", "ssh", "sudoers", "sudoers.d", "security",
     "wireguard", "NetworkManager", "krb5.keytab", "ipsec.secrets", "ipsec.d", "openvpn",
     "ppp", "docker", "containerd", "libvirt", ".pwd.lock"}
)  # fmt: skip
ETC_SSL_SECRETS = frozenset({"private"})


def _real(path: str | Path) -> Path:
    return Path(os.path.realpath(path))


def interpreter_bin_dirs() -> list[Path]:
    """The bin dirs of the interpreter running swarmdeck (test runners live there)."""
    dirs = [Path(sys.executable).parent]
    for prefix in (sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix):
        dirs.append(Path(prefix) / "bin")
    return _unique(dirs)


def _unique(paths: list[Path]) -> list[Path]:
    return list(dict.fromkeys(paths))


@functools.cache
def trusted_program_dirs() -> frozenset[Path]:
    """Real paths of the directories whose programs a read-only mode may run."""
    return frozenset(_real(d) for d in (*SYSTEM_PROGRAM_DIRS, *interpreter_bin_dirs()))


def tool_path() -> str:
    """The PATH a tool runs with: the interpreter's bin dir first, then the system's."""
    dirs = [str(d) for d in interpreter_bin_dirs() if d.is_dir()]
    return os.pathsep.join(_unique_str([*dirs, *SYSTEM_PROGRAM_DIRS]))


def _unique_str(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))


def interpreter_dirs() -> list[Path]:
    """The interpreter's install dirs (a venv, its base) and the dirs its site-packages'
    .pth files add (an editable checkout), outermost only, real paths: a tool running
    Python needs them read-only. Not sys.path as a whole: a script's own dir (the user's
    home, /tmp) would bring everything beside it."""
    candidates = [sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix]
    candidates += _pth_dirs()
    return list(_outermost(tuple(p for p in candidates if os.path.isdir(p))))


@functools.lru_cache(maxsize=8)
def _outermost(candidates: tuple[str, ...]) -> tuple[Path, ...]:
    """The real paths of `candidates` outside the system dirs, outermost only (cached: the
    .pth files that name them are read at every call)."""
    dirs = {_real(p) for p in candidates}
    system = [_real(d) for d in SYSTEM_DIRS]
    dirs = {d for d in dirs if not any(d.is_relative_to(s) for s in system) and d != Path("/")}
    return tuple(sorted(d for d in dirs if not any(d != o and d.is_relative_to(o) for o in dirs)))


def _pth_dirs() -> list[str]:
    """Absolute dirs named by the .pth files of the interpreter's site-packages."""
    found: list[str] = []
    for site_dir in {p for p in sys.path if p.endswith("site-packages") and os.path.isdir(p)}:
        for name in os.listdir(site_dir):
            if not name.endswith(".pth"):
                continue
            try:
                lines = (Path(site_dir) / name).read_text(encoding="utf-8").splitlines()
            except (OSError, UnicodeDecodeError):
                continue
            found += [
                ln.strip() for ln in lines if ln.startswith("/") and os.path.isdir(ln.strip())
            ]
    return found


def system_dirs() -> list[Path]:
    """The system dirs that exist here, as (possibly symlinked) paths."""
    return [Path(d) for d in SYSTEM_DIRS if os.path.lexists(d)]


def etc_secrets() -> list[Path]:
    """The secret entries of /etc that exist here."""
    return _etc_cached("secrets", _find_etc_secrets)


def _find_etc_secrets() -> list[Path]:
    found = [Path("/etc") / name for name in sorted(ETC_SECRETS)]
    found += [Path("/etc/ssl") / name for name in sorted(ETC_SSL_SECRETS)]
    return [p for p in found if os.path.lexists(p)]


def etc_entries() -> list[Path]:
    """The entries of /etc a tool may read: all but the secrets (Landlock only allows)."""
    return _etc_cached("entries", _list_etc)


_EtcMark = tuple[tuple[int, int, int] | None, ...]
_ETC_SEEN: dict[str, tuple[_EtcMark, list[Path]]] = {}
_STILL_NS = 2_000_000_000


def _etc_cached(what: str, find: Callable[[], list[Path]]) -> list[Path]:
    """`find()`, found again only when /etc or /etc/ssl changed (an entry added, removed or
    renamed changes its directory's mtime): both run at every tool command."""
    marks = []
    for folder in ("/etc", "/etc/ssl"):
        try:
            found = os.stat(folder)
        except OSError:
            marks.append(None)
            continue
        marks.append((found.st_dev, found.st_ino, found.st_mtime_ns))
    seen = _ETC_SEEN.get(what)
    if seen is not None and seen[0] == tuple(marks):
        return list(seen[1])
    listed_at = time.time_ns()
    found_now = find()
    # An mtime is coarse (a clock tick): a change within the tick of this listing would
    # leave it unchanged, so a listing is kept only once its dirs were still for a while.
    if all(m is None or m[2] < listed_at - _STILL_NS for m in marks):
        _ETC_SEEN[what] = (tuple(marks), found_now)
    return found_now


def _list_etc() -> list[Path]:
    entries: list[Path] = []
    with os.scandir("/etc") as it:
        for entry in it:
            if entry.name in ETC_SECRETS:
                continue
            if entry.name == "ssl" and entry.is_dir(follow_symlinks=False):
                entries += [
                    Path(e.path) for e in os.scandir(entry.path) if e.name not in ETC_SSL_SECRETS
                ]
                continue
            entries.append(Path(entry.path))
    return sorted(entries)


# The user's own credentials, hidden from tools wherever a bound directory contains them.
USER_SECRETS = (
    ".ssh", ".gnupg", ".aws", ".azure", ".kube", ".docker", ".netrc", ".git-credentials",
    ".pgpass", ".pypirc", ".npmrc", ".config/gcloud", ".config/gh", ".codex", ".claude",
    ".claude.json",
)  # fmt: skip
# A swarmdeck home is recognised by its credentials dir or its store, at most this deep
# below a directory a tool sees (an exhaustive walk of a big tree would cost seconds).
HOME_SEARCH_DEPTH = 2


def default_hidden_paths() -> list[Path]:
    """Paths no tool may see even inside a directory it is shown: the swarmdeck home and
    the user's credentials."""
    user_home = Path.home()
    # The default home too when SWARMDECK_HOME names another: it may hold real keys.
    homes = dict.fromkeys([home_dir(), user_home / ".swarmdeck"])
    return [*homes, *(user_home / name for name in USER_SECRETS)]


def swarmdeck_homes_within(root: Path, depth: int = HOME_SEARCH_DEPTH) -> list[Path]:
    """Swarmdeck homes (any, not only this process's) at most `depth` levels below `root`."""
    found: list[Path] = []
    frontier = [root]
    for _ in range(depth):
        below: list[Path] = []
        for folder in frontier:
            try:
                entries = [e for e in os.scandir(folder) if e.is_dir(follow_symlinks=False)]
            except OSError:
                continue
            for entry in entries:
                path = Path(entry.path)
                if is_swarmdeck_home(path):
                    found.append(path)
                else:
                    below.append(path)
        frontier = below
    return found


def is_swarmdeck_home(path: Path) -> bool:
    """True for a directory that holds a swarmdeck credential store or SQLite store."""
    creds = path / "credentials"
    if (path / "swarmdeck.sqlite").is_file():
        return True
    try:
        return creds.is_dir() and any(n.endswith(".key") for n in os.listdir(creds))
    except OSError:
        return True  # unreadable credentials: hide it all the same
