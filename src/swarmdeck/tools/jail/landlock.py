"""Landlock, the kernel's unprivileged file and network sandbox, through ctypes.

Standard library only: the launcher imports this file with `python -I -S`, outside the
swarmdeck package. The constants are those of <linux/landlock.h>.
"""

from __future__ import annotations

import ctypes
import os

# Syscall numbers are the same on every architecture (added after the tables were unified).
SYS_CREATE_RULESET = 444
SYS_ADD_RULE = 445
SYS_RESTRICT_SELF = 446
CREATE_RULESET_VERSION = 1 << 0
RULE_PATH_BENEATH = 1
PR_SET_NO_NEW_PRIVS = 38

# The file system rights, bit by bit in the order of <linux/landlock.h>: REFER (ABI 2) is
# linking or renaming across directories, TRUNCATE came with ABI 3, IOCTL_DEV with ABI 5.
(EXECUTE, WRITE_FILE, READ_FILE, READ_DIR, REMOVE_DIR, REMOVE_FILE, MAKE_CHAR, MAKE_DIR,
 MAKE_REG, MAKE_SOCK, MAKE_FIFO, MAKE_BLOCK, MAKE_SYM, REFER, TRUNCATE, IOCTL_DEV) = (
    1 << bit for bit in range(16)
)  # fmt: skip
NET_BIND_TCP = 1 << 0  # ABI 4
NET_CONNECT_TCP = 1 << 1
SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0  # ABI 6
SCOPE_SIGNAL = 1 << 1

# The file system rights each ABI knows; a ruleset handles all of them, so whatever is not
# granted below is denied.
_FS_BY_ABI = {
    1: (1 << 13) - 1,
    2: (1 << 14) - 1,
    3: (1 << 15) - 1,
    5: (1 << 16) - 1,
}
READ = EXECUTE | READ_FILE | READ_DIR
# Rights that make sense on a file (a rule on a file with directory rights is refused).
FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV
# The least ABI that confines what a read-only mode promises: files (1), links across
# directories (2), truncation (3) and TCP (4).
MIN_ABI = 4


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _fail(what: str) -> OSError:
    err = ctypes.get_errno()
    return OSError(err, f"landlock {what}: {os.strerror(err)}")


def abi_version() -> int:
    """The Landlock ABI of the running kernel; 0 when it is absent or disabled."""
    version = _libc.syscall(SYS_CREATE_RULESET, None, ctypes.c_size_t(0), CREATE_RULESET_VERSION)
    return max(int(version), 0)


def fs_rights(abi: int) -> int:
    """Every file system right the ABI can handle."""
    return _FS_BY_ABI[max(k for k in _FS_BY_ABI if k <= abi)]


def restrict_self(
    *,
    read: list[str],
    write: list[str],
    listable: list[str],
    devices: list[str],
    network: bool,
) -> int:
    """Confine this process and its future children; returns the ABI used.

    `read` paths may be read and run, `write` paths also changed (beneath them), `listable`
    dirs listed (not their files read), `devices` opened for reading and writing. TCP bind
    and connect are denied unless `network`; from ABI 6 signals and abstract unix sockets
    cannot reach outside the sandbox.
    """
    fd = build_ruleset(read=read, write=write, listable=listable, devices=devices, network=network)
    try:
        enforce(fd)
    finally:
        os.close(fd)
    return abi_version()


def build_ruleset(
    *,
    read: list[str],
    write: list[str],
    listable: list[str],
    devices: list[str],
    network: bool,
) -> int:
    """The ruleset of restrict_self, built but not enforced: its descriptor (close-on-exec),
    which any number of processes forked later may enforce on themselves."""
    abi = abi_version()
    if abi < MIN_ABI:
        raise OSError(0, f"landlock ABI {abi} is below {MIN_ABI}")
    handled = fs_rights(abi)
    attr = _RulesetAttr(handled, 0 if network else NET_BIND_TCP | NET_CONNECT_TCP, 0)
    if abi >= 6:
        attr.scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL
    size = ctypes.sizeof(_RulesetAttr) if abi >= 6 else 16
    fd = _libc.syscall(SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), 0)
    if fd < 0:
        raise _fail("create_ruleset")
    try:
        grants = ((read, READ), (write, handled), (listable, READ_DIR), (devices, FILE_RIGHTS))
        for paths, rights in grants:
            for path in paths:
                _allow(fd, path, rights & handled)
    except OSError:
        os.close(fd)
        raise
    return int(fd)


def enforce(ruleset_fd: int) -> None:
    """Confine this process and its future children by a built ruleset."""
    if _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise _fail("no_new_privs")
    if _libc.syscall(SYS_RESTRICT_SELF, ruleset_fd, 0) != 0:
        raise _fail("restrict_self")


def _allow(ruleset_fd: int, path: str, rights: int) -> None:
    """Grant `rights` beneath `path`; a missing path is skipped."""
    try:
        target = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except FileNotFoundError:
        return
    try:
        if not os.path.isdir(path):
            rights &= FILE_RIGHTS
        rule = _PathBeneathAttr(rights, target)
        if _libc.syscall(SYS_ADD_RULE, ruleset_fd, RULE_PATH_BENEATH, ctypes.byref(rule), 0):
            raise _fail(f"add_rule {path}")
    finally:
        os.close(target)
