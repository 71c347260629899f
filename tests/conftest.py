"""Shared fixtures: an isolated home, the store (SQLite or a throwaway PostgreSQL), provider
files, and the CLI as a real subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable, Generator, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests import pgcluster
from tests.cli_fork import CliForkServer
from tests.pgcluster import PgCluster

STORE_ENV = "SWARMDECK_STORE"
# Set to 1 (as CI may) to fail instead of skip when no PostgreSQL cluster can be started.
REQUIRE_PG_ENV = "SWARMDECK_REQUIRE_PG"
BYTECODE_ENV = "PYTHONDONTWRITEBYTECODE"
# Set to 0 to exec a fresh interpreter for every CLI call instead of forking one.
FORK_ENV = "SWARMDECK_TEST_FORK"


def pytest_configure(config: pytest.Config) -> None:
    """Let this run and every process it starts keep compiled bytecode (see below)."""
    # Each CLI process the suite starts imports ~100 swarmdeck modules. With
    # PYTHONDONTWRITEBYTECODE set (some shells and CI images set it) a clean clone never
    # keeps their bytecode, and every process compiles them again: ~0.16 s CPU each,
    # measured. Popped here, before xdist starts its workers, so they inherit it too.
    os.environ.pop(BYTECODE_ENV, None)
    sys.dont_write_bytecode = False


@pytest.fixture
def sd_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh SWARMDECK_HOME for this test, on SQLite unless the `store` fixture says otherwise."""
    home = tmp_path / "home"
    home.mkdir(mode=0o700)  # as swarmdeck makes it (a looser one is tightened with a note)
    monkeypatch.setenv("SWARMDECK_HOME", str(home))
    monkeypatch.delenv(STORE_ENV, raising=False)
    return home


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[PgCluster]:
    """One throwaway PostgreSQL cluster for the whole test session, removed at the end."""
    reason = pgcluster.unavailable_reason()
    if reason is not None:
        if os.environ.get(REQUIRE_PG_ENV) == "1":
            pytest.fail(f"{REQUIRE_PG_ENV}=1 but {reason}")
        pytest.skip(reason)
    cluster = PgCluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


@dataclass(frozen=True)
class Store:
    """The store a test runs on: its name (a test id part) and its URL."""

    name: str
    url: str

    @property
    def is_postgres(self) -> bool:
        """True on the PostgreSQL cluster."""
        return self.name == "postgres"


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store(
    request: pytest.FixtureRequest, sd_home: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Store]:
    """Run the test on each store; in-process code and CLI subprocesses both use it.

    SQLite is the default file in `sd_home` (SWARMDECK_STORE unset, as a user has it);
    PostgreSQL is a fresh database of the session's cluster, dropped after the test.
    """
    if request.param == "sqlite":
        yield Store("sqlite", f"sqlite:///{sd_home / 'swarmdeck.sqlite'}")
        return
    cluster: PgCluster = request.getfixturevalue("pg_cluster")
    url = cluster.create_database()
    monkeypatch.setenv(STORE_ENV, url)
    try:
        yield Store("postgres", url)
    finally:
        report = getattr(request.node, "rep_call", None)
        if report is not None and report.failed:
            name = url.rsplit("/", 1)[-1]
            print(f"--- PostgreSQL log of {name} ({cluster.log_file}) ---")
            print(cluster.log_tail(40, database=name))
        cluster.drop_database(url)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Keep each phase's report on the item, so fixtures can tell whether the test failed."""
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report


def write_provider(
    home: Path, key: str, base_url: str, kind: str = "openai", **fields: object
) -> Path:
    """A user provider file pointing at a (fake) endpoint; no key needed unless asked."""
    providers = home / "providers"
    providers.mkdir(exist_ok=True)
    doc = {
        "key": key,
        "kind": kind,
        "base_url": base_url,
        "model": fields.pop("model", "scripted"),
        "display_name": fields.pop("display_name", f"test {key}"),
        "needs_key": fields.pop("needs_key", False),
        **fields,
    }
    path = providers / f"{key}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


@dataclass
class CliResult:
    """What a CLI run printed and returned."""

    code: int
    stdout: str
    stderr: str


def cli_env(home: Path, **extra: str) -> dict[str, str]:
    """The environment a CLI subprocess runs with: this test's home and store, no other
    SWARMDECK_* setting of the caller's shell."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWARMDECK_")}
    env["SWARMDECK_HOME"] = str(home)
    # The same store as in-process code: the `store` fixture sets it, `sd_home` clears it.
    if os.environ.get(STORE_ENV):
        env[STORE_ENV] = os.environ[STORE_ENV]
    env.update(extra)
    return env


def run_cli(
    home: Path,
    *args: str,
    timeout: float = 60,
    stdin_text: str | None = None,
    wrapper: tuple[str, ...] = (),
    **env: str,
) -> CliResult:
    """Run `python -m swarmdeck ARGS` as a real process (stdin empty unless `stdin_text`;
    `wrapper` runs it under another command, such as bwrap). The process is forked from
    an interpreter that has imported the CLI (tests/cli_fork.py) unless it runs under a
    wrapper or SWARMDECK_TEST_FORK=0."""
    if not wrapper and os.environ.get(FORK_ENV) != "0":
        return CliResult(
            *cli_fork_server().run(list(args), cli_env(home, **env), timeout, stdin_text)
        )
    proc = subprocess.run(
        [*wrapper, sys.executable, "-m", "swarmdeck", *args],
        env=cli_env(home, **env),
        capture_output=True,
        text=True,
        timeout=timeout,
        input=stdin_text,
        stdin=subprocess.DEVNULL if stdin_text is None else None,
    )
    return CliResult(proc.returncode, proc.stdout, proc.stderr)


_fork_server: CliForkServer | None = None
_fork_server_lock = threading.Lock()


def cli_fork_server() -> CliForkServer:
    """This test process's CLI fork server, started on first use."""
    global _fork_server
    with _fork_server_lock:
        if _fork_server is None:
            _fork_server = CliForkServer(Path(__file__).resolve().parent.parent)
        return _fork_server


def pytest_unconfigure(config: pytest.Config) -> None:
    """Stop the CLI fork server with the test process."""
    if _fork_server is not None:
        _fork_server.close()


def in_parallel(calls: dict[str, Callable[[], CliResult]]) -> dict[str, CliResult]:
    """Run independent CLI calls at once (each is a process; the GIL is not in the way)."""
    with ThreadPoolExecutor(max_workers=4) as pool:
        futures = {name: pool.submit(fn) for name, fn in calls.items()}
        return {name: f.result() for name, f in futures.items()}


@pytest.fixture
def workdir(tmp_path: Path) -> Iterator[Path]:
    """A small project directory for a session to work in."""
    root = tmp_path / "project"
    root.mkdir()
    (root / "README.md").write_text("# project\nhello\n")
    (root / "app.py").write_text("def main():\n    return 42\n")
    yield root
