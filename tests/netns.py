"""Hosts on real Linux namespaces for tests: each its own network, mount, UTS and PID
namespace, joined by veth links to a bridge in a namespace of the lab's own.

A host is a holder process (`unshare` as PID 1 of a new PID namespace, in a named network
namespace) with a private tmpfs on /tmp and on /srv: /srv/sd holds its home and work root,
so no two hosts share a path's content. Commands run inside with `nsenter`. Traffic flows
only between the lab's namespaces (a private /24) and each host's own loopback.

Every name starts with PREFIX and the owning pid, so `reap_leftovers` removes what a run
killed before its teardown left behind. Needs root, `ip`, `unshare` and `nsenter`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

PREFIX = "sdmh"
SUBNET = "10.213.7"
ROOT = "/srv/sd"  # each host's private tmpfs: home, work root, scripts
READY_TIMEOUT_S = 20.0
TOOLS = ("ip", "unshare", "nsenter")


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=30)


def unavailable_reason() -> str | None:
    """Why namespaced hosts cannot be made here, or None when they can."""
    if os.geteuid() != 0:
        return "namespaced hosts need root (ip netns, unshare)"
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing:
        return f"namespaced hosts need {', '.join(missing)} (iproute2, util-linux)"
    probe = f"{PREFIX}{os.getpid()}-probe"
    made = _ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"ip netns add failed: {made.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    return None


def process_alive(pid: int) -> bool:
    """Whether a process runs (a zombie, killed and not yet reaped by its parent, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] not in "ZX"


def _kill_netns(name: str) -> None:
    """SIGKILL every process in a network namespace, then delete it."""
    pids = _ip("netns", "pids", name, check=False).stdout.split()
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid), signal.SIGKILL)
    deadline = time.monotonic() + 10
    while any(process_alive(int(p)) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.02)
    _ip("netns", "del", name, check=False)


def reap_leftovers() -> list[str]:
    """Remove the namespaces of lab runs whose owner died; returns their names."""
    reaped = []
    for line in _ip("netns", "list", check=False).stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        if not name.startswith(PREFIX):
            continue
        owner = name[len(PREFIX) :].split("-", 1)[0]
        if owner.isdigit() and not process_alive(int(owner)):
            _kill_netns(name)
            reaped.append(name)
    return reaped


@dataclass
class NsHost:
    """One namespaced host: its name, address and holder process."""

    name: str
    netns: str
    address: str
    holder: subprocess.Popen[bytes]
    init_pid: int
    base_env: dict[str, str]

    def argv(self, argv: list[str], cwd: str = ROOT) -> list[str]:
        """`argv` as run inside this host (its namespaces, from `cwd`)."""
        return [
            "nsenter", "-t", str(self.init_pid), "--mount", "--uts", "--pid", "--net",
            "--", "env", f"--chdir={cwd}", *argv,
        ]  # fmt: skip

    def env(self, **extra: str) -> dict[str, str]:
        """The environment of a process on this host."""
        return {**self.base_env, **extra}

    def run(
        self, argv: list[str], *, input: str | None = None, timeout: float = 60, **env: str
    ) -> subprocess.CompletedProcess[str]:
        """Run a command inside and wait; raises with its output when it fails."""
        proc = subprocess.run(
            self.argv(argv), input=input, capture_output=True, text=True,
            env=self.env(**env), timeout=timeout, check=False,
        )  # fmt: skip
        if proc.returncode != 0:
            raise RuntimeError(f"{self.name}: {argv[:3]} failed ({proc.returncode}):\n"
                               f"{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")  # fmt: skip
        return proc

    def popen(self, argv: list[str], log: Path, **env: str) -> subprocess.Popen[bytes]:
        """Start a command inside, in a process group of its own, its output to `log`."""
        with log.open("ab") as out:
            return subprocess.Popen(
                self.argv(argv), env=self.env(**env), stdin=subprocess.DEVNULL,
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip

    def write(self, path: str, text: str) -> None:
        """Write a file in this host's private filesystem."""
        self.run(["sh", "-c", 'mkdir -p "$(dirname "$1")" && cat > "$1"', "sh", path], input=text)

    def read(self, path: str) -> str | None:
        """A file of this host's private filesystem, or None when it is missing."""
        proc = subprocess.run(
            self.argv(["cat", path]), capture_output=True, text=True, timeout=30, check=False
        )
        return proc.stdout if proc.returncode == 0 else None


# The checkout the hosts run swarmdeck from, when it lies under /tmp (a CI's clean clone):
# the host's private /tmp would hide it, so it is shown again there, read-only ($2).
CHECKOUT = Path(__file__).resolve().parents[1]
KEEP = str(CHECKOUT) if Path("/tmp") in CHECKOUT.parents else ""
SETUP = (
    'hostname "$1" && '
    'if [ -n "$2" ]; then mount -t tmpfs lab-keep /mnt && mkdir /mnt/k && '
    'mount --bind "$2" /mnt/k; fi && '
    "mount -t tmpfs -o mode=1777 lab-tmp /tmp && "
    'if [ -n "$2" ]; then mkdir -p "$2" && mount --bind /mnt/k "$2" && '
    'mount -o remount,bind,ro "$2"; fi && mkdir -p /srv && '
    f"mount -t tmpfs -o mode=755 lab-srv /srv && mkdir -p {ROOT}/home {ROOT}/user {ROOT}/work && "
    f"chmod 700 {ROOT}/home && echo ready && exec sleep infinity"
)


@dataclass
class Lab:
    """The namespaced hosts of one test run and the bridge between them."""

    base_env: dict[str, str]
    tag: str = field(default_factory=lambda: f"{PREFIX}{os.getpid()}")
    hosts: dict[str, NsHost] = field(default_factory=dict)
    _switch: str = ""

    def __post_init__(self) -> None:
        reap_leftovers()
        self._switch = f"{self.tag}-switch"
        try:
            _ip("netns", "add", self._switch)
            self._sw("link", "add", "br0", "type", "bridge")
            self._sw("link", "set", "br0", "up")
        except BaseException:
            self.close()
            raise

    def _sw(self, *args: str) -> None:
        _ip("-n", self._switch, *args)

    def add_host(self, name: str, last_octet: int) -> NsHost:
        """A new host on the bridge at SUBNET.last_octet, with its private filesystem."""
        netns, address = f"{self.tag}-{name}", f"{SUBNET}.{last_octet}"
        _ip("netns", "add", netns)
        port = f"v-{name}"
        self._sw("link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", netns)
        self._sw("link", "set", port, "master", "br0", "up")
        for args in (["addr", "add", f"{address}/24", "dev", "eth0"],
                     ["link", "set", "eth0", "up"], ["link", "set", "lo", "up"]):  # fmt: skip
            _ip("-n", netns, *args)
        holder = subprocess.Popen(
            ["ip", "netns", "exec", netns, "unshare", "--mount", "--uts", "--pid", "--fork",
             "--mount-proc", "--propagation", "private", "--", "sh", "-c", SETUP, "sh", name,
             KEEP],
            stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        assert holder.stdout is not None
        if holder.stdout.readline().strip() != b"ready":
            raise RuntimeError(f"host {name} did not start (exit {holder.poll()})")
        children = Path(f"/proc/{holder.pid}/task/{holder.pid}/children").read_text().split()
        host = NsHost(name, netns, address, holder, int(children[0]), dict(self.base_env))
        self.hosts[name] = host
        return host

    def link(self, name: str, up: bool) -> None:
        """Cut a host off (its link down at the bridge) or join it again.

        Downed at the bridge's end, the host's own interface only loses its carrier: its
        routes stay, so its connections wait on the network (TCP retransmits) as across a
        failed switch, rather than failing at once with "network unreachable"."""
        self._sw("link", "set", f"v-{name}", "up" if up else "down")

    def close(self) -> None:
        """Kill every process of every host and remove the namespaces and links."""
        for host in reversed(self.hosts.values()):  # the store's clients before the store
            _kill_netns(host.netns)
            with contextlib.suppress(Exception):
                host.holder.wait(timeout=10)
        if self._switch:
            _kill_netns(self._switch)  # its veth ends and the bridge go with it
        self.hosts.clear()
