"""A throwaway PostgreSQL cluster for tests: initdb in a temp dir, pg_ctl on 127.0.0.1.

`PgCluster.start()` makes a cluster that lives only for the test session; every test that
needs isolation asks it for a fresh database (`create_database()`), so DBOS's system
tables and the catalog never leak between tests. `stop()` kills it and removes its files.

initdb and postgres refuse to run as root: as root the cluster runs as the `postgres`
system user (or `nobody` when there is none); as a normal user it runs as that user.
"""

from __future__ import annotations

import atexit
import glob
import os
import pwd
import re
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

REQUIRED = ("initdb", "pg_ctl", "postgres")
SUPERUSER = "postgres"
START_TIMEOUT_SECONDS = 60

# Throwaway data: fsync, full-page writes and durable commits only matter when the OS or
# the server crashes, and these tests kill clients, never the server. Skipping them makes
# initdb, CREATE DATABASE and every commit much faster.
SETTINGS = {
    "listen_addresses": "'127.0.0.1'",
    "max_connections": "300",  # many CLI processes, each with DBOS's and the catalog's pools
    "fsync": "off",
    "full_page_writes": "off",
    "synchronous_commit": "off",
    "shared_buffers": "128MB",
    "log_min_messages": "warning",
    "log_line_prefix": "'%m [%p] %d '",
}


def _version_key(path: str) -> tuple[int, ...]:
    """Sort key: /usr/lib/postgresql/16/bin after .../15/bin."""
    return tuple(int(p) for p in re.findall(r"\d+", path)) or (0,)


def find_bin_dir() -> Path | None:
    """A directory holding initdb, pg_ctl and postgres: $SWARMDECK_PG_BIN, distro, PATH."""
    candidates: list[str] = []
    if os.environ.get("SWARMDECK_PG_BIN"):
        candidates.append(os.environ["SWARMDECK_PG_BIN"])
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=_version_key, reverse=True)
    on_path = shutil.which("initdb")
    if on_path:
        candidates.append(str(Path(on_path).resolve().parent))
    for raw in candidates:
        path = Path(raw)
        if all(os.access(path / name, os.X_OK) for name in REQUIRED):
            return path
    return None


def _run_as() -> pwd.struct_passwd | None:
    """The account the cluster runs as when we are root; None means "as ourselves"."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    raise RuntimeError("running as root and there is no `postgres` or `nobody` user to run initdb")


def unavailable_reason() -> str | None:
    """Why a cluster cannot be started here, or None when it can."""
    if find_bin_dir() is None:
        return (
            "PostgreSQL binaries (initdb, pg_ctl, postgres) not found; install them "
            "(bash scripts/test-deps as root) or set SWARMDECK_PG_BIN"
        )
    try:
        _run_as()
    except RuntimeError as exc:
        return str(exc)
    return None


OWNER_FILE = "owner.pid"
# Signals on which a process stops the clusters it started before it ends: pg_ctl starts
# the server in a session of its own, so neither signal reaches it, and the server would
# outlive an interrupted run (parent 1) until killed by hand.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _process_state(pid: int) -> tuple[str, str] | None:
    """A live process's state letter and start time (clock ticks since boot), from
    /proc/PID/stat; None when there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after its end.
    fields = stat[stat.rindex(")") + 2 :].split()
    return fields[0], fields[19]


def owner_mark(pid: int) -> str:
    """What OWNER_FILE holds: the pid and its start time, so a reused pid is not the owner."""
    state = _process_state(pid)
    return f"{pid} {state[1]}" if state else str(pid)


def owner_alive(mark: str) -> bool:
    """Whether the process an OWNER_FILE names still runs (a zombie or a reused pid does
    not count)."""
    pid, _, started = mark.strip().partition(" ")
    state = _process_state(int(pid))
    if state is None or state[0] in ("Z", "X"):
        return False
    return not started or state[1] == started


def reap_stale_clusters(bin_dir: Path, account: pwd.struct_passwd | None) -> None:
    """Stop and remove clusters left by test runs that died (SIGKILL) before their teardown."""
    places = {tempfile.gettempdir(), "/tmp"}
    for raw in sorted({p for place in places for p in glob.glob(f"{place}/sd-pg-*")}):
        root = Path(raw)
        try:
            alive = owner_alive((root / OWNER_FILE).read_text())
        except (OSError, ValueError):
            continue  # not ours, or still being created
        if not alive:
            PgCluster(bin_dir, root, 0, account).stop()


# The clusters this process started and has not stopped, and the handlers of STOP_SIGNALS
# that were in place before ours (called after the clusters are stopped).
_live: list[PgCluster] = []
_previous_handlers: dict[int, signal.Handlers | object] = {}


def _stop_live_clusters(signum: int, frame: object) -> None:
    """Stop this process's clusters, then let the signal do what it did before."""
    for cluster in list(_live):
        cluster.stop()
    previous = _previous_handlers.get(signum, signal.SIG_DFL)
    if callable(previous):
        previous(signum, frame)  # SIGINT: KeyboardInterrupt, and pytest's teardown
    elif previous == signal.SIG_DFL:
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)


def _stop_on_signals() -> None:
    """Install _stop_live_clusters on STOP_SIGNALS (once; only the main thread can)."""
    if _previous_handlers or threading.current_thread() is not threading.main_thread():
        return
    for signum in STOP_SIGNALS:
        # Also where the signal was ignored (the process goes on after): xdist's workers
        # ignore SIGINT, and their controller SIGKILLs them when they do not end in time.
        _previous_handlers[signum] = signal.getsignal(signum)
        signal.signal(signum, _stop_live_clusters)


def _free_port() -> int:
    """A loopback port nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class PgCluster:
    """A running throwaway cluster; trust auth on 127.0.0.1 for the `postgres` superuser."""

    bin_dir: Path
    root: Path
    port: int
    account: pwd.struct_passwd | None
    databases: list[str] = field(default_factory=list)
    _stopped: bool = False

    @property
    def data_dir(self) -> Path:
        """PGDATA."""
        return self.root / "data"

    @property
    def log_file(self) -> Path:
        """The server's log (read it when a test fails mysteriously)."""
        return self.root / "postgres.log"

    def url(self, dbname: str = "postgres") -> str:
        """A store URL for one database of this cluster."""
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/{dbname}"

    # -- lifecycle --------------------------------------------------------------------

    @classmethod
    def start(cls, bin_dir: Path | None = None) -> PgCluster:
        """initdb in a fresh temp dir and start the server; returns once it accepts queries."""
        bin_dir = bin_dir or find_bin_dir()
        if bin_dir is None:
            raise RuntimeError(unavailable_reason() or "no PostgreSQL binaries")
        account = _run_as()
        reap_stale_clusters(bin_dir, account)
        # As root, /tmp rather than $TMPDIR: the server's account must reach the directory.
        root = Path(tempfile.mkdtemp(prefix="sd-pg-", dir="/tmp" if account else None))
        cluster = cls(bin_dir, root, 0, account)
        _stop_on_signals()
        _live.append(cluster)
        try:
            (root / OWNER_FILE).write_text(owner_mark(os.getpid()))
            if account is not None:
                os.chown(root, account.pw_uid, account.pw_gid)
            (root / "sock").mkdir()
            if account is not None:
                os.chown(root / "sock", account.pw_uid, account.pw_gid)
            cluster._pg(
                "initdb",
                "-D",
                str(cluster.data_dir),
                "-U",
                SUPERUSER,
                "--auth=trust",
                "--encoding=UTF8",
                "--locale=C",
                "--no-sync",
                "--no-instructions",
            )
            with (cluster.data_dir / "postgresql.conf").open("a") as conf:
                conf.write("\n# swarmdeck tests\n")
                conf.write(f"unix_socket_directories = '{root / 'sock'}'\n")
                for name, value in SETTINGS.items():
                    conf.write(f"{name} = {value}\n")
            cluster._start_on_free_port()
        except BaseException:
            cluster.stop()
            raise
        atexit.register(cluster.stop)
        return cluster

    def _start_on_free_port(self) -> None:
        """pg_ctl start on a free port, retried when another process takes the port first."""
        for attempt in range(5):
            self.port = _free_port()
            try:
                self._pg(
                    "pg_ctl",
                    "start",
                    "-D",
                    str(self.data_dir),
                    "-l",
                    str(self.log_file),
                    "-w",
                    "-t",
                    str(START_TIMEOUT_SECONDS),
                    "-o",
                    f"-p {self.port}",
                )
                self._wait_ready()
                return
            except RuntimeError:
                if attempt == 4:
                    raise
                self._pg("pg_ctl", "stop", "-D", str(self.data_dir), "-m", "immediate", check=False)

    def _wait_ready(self) -> None:
        """Block until the server answers a query over TCP."""
        import psycopg

        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while True:
            try:
                with psycopg.connect(self.url(), connect_timeout=5) as conn:
                    conn.execute("SELECT 1")
                return
            except psycopg.OperationalError as exc:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"PostgreSQL did not become ready: {exc}") from exc
                time.sleep(0.05)

    def stop(self) -> None:
        """Stop the server at once (immediate mode) and remove every file; idempotent."""
        if self._stopped:
            return
        self._stopped = True
        _live[:] = [cluster for cluster in _live if cluster is not self]
        try:
            server = int((self.data_dir / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            server = None
        if server is not None:
            self._pg("pg_ctl", "stop", "-D", str(self.data_dir), "-m", "immediate", check=False)
            # pg_ctl returns once the pid file is gone, a moment before the server is.
            deadline = time.monotonic() + START_TIMEOUT_SECONDS
            while owner_alive(str(server)) and time.monotonic() < deadline:
                time.sleep(0.01)
        shutil.rmtree(self.root, ignore_errors=True)

    def _pg(self, tool: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run a PostgreSQL program as the cluster's account."""
        env = {
            "PATH": f"{self.bin_dir}:/usr/bin:/bin",
            "LC_ALL": "C",
            "LANG": "C",
            "TZ": "UTC",
        }
        kwargs: dict[str, object] = {}
        if self.account is not None:
            env["HOME"] = str(self.root)
            env["USER"] = env["LOGNAME"] = self.account.pw_name
            kwargs = {
                "user": self.account.pw_uid,
                "group": self.account.pw_gid,
                "extra_groups": [],
            }
        proc = subprocess.run(
            [str(self.bin_dir / tool), *args],
            env=env,
            cwd=self.root,
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            timeout=START_TIMEOUT_SECONDS + 30,
            check=False,
            **kwargs,  # type: ignore[arg-type]
        )
        if check and proc.returncode != 0:
            raise RuntimeError(
                f"{tool} failed ({proc.returncode}): {proc.stderr.strip() or proc.stdout.strip()}"
                f"\n{self.log_tail()}"
            )
        return proc

    def log_tail(self, lines: int = 20, database: str | None = None) -> str:
        """The last lines of the server log (only one database's, when named)."""
        try:
            text = self.log_file.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        if database is not None:
            text = [line for line in text if f" {database} " in line]
        return "\n".join(text[-lines:])

    # -- databases --------------------------------------------------------------------

    def _admin(self, sql: str) -> None:
        """Run one statement on the `postgres` database outside a transaction."""
        import psycopg

        with psycopg.connect(self.url(), autocommit=True, connect_timeout=10) as conn:
            conn.execute(sql)  # type: ignore[arg-type]

    def create_database(self, prefix: str = "t") -> str:
        """A new empty database (`CREATE DATABASE t_<random>`, ~tens of ms); returns its URL."""
        name = f"{prefix}_{secrets.token_hex(6)}"
        self._admin(f"CREATE DATABASE {name}")
        self.databases.append(name)
        return self.url(name)

    def drop_database(self, url_or_name: str) -> None:
        """Drop a database, ending the sessions still connected to it (best effort)."""
        name = url_or_name.rsplit("/", 1)[-1]
        if not re.fullmatch(r"[a-z0-9_]+", name):
            raise ValueError(f"not a test database name: {name}")
        try:
            self._admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        except Exception:
            return
        if name in self.databases:
            self.databases.remove(name)
