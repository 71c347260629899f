"""The optional extras stay out of the processes that do not use them: dispatch's fleet path
(which must start in well under a second) imports neither the MCP SDK nor OpenTelemetry,
nor swarmdeck's integrations, nor the store's and the models' libraries (SQLAlchemy, DBOS, the
LLM SDKs) while it submits and follows a session; `swarmdeck mcp` registers like every other command."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import cli_env, write_provider

PROBE = """
import json, sys
from swarmdeck.cli import app
app._register(sys.argv[1:])
import swarmdeck.dispatch.drivers, swarmdeck.dispatch.runner, swarmdeck.dispatch.runlog
heavy = ("mcp", "opentelemetry", "swarmdeck.integrations", "swarmdeck.runtime.services",
         "sqlalchemy", "dbos", "openai", "anthropic", "aiohttp", "httpx")
groups = [g.name for g in app.app.registered_groups]
print(json.dumps({"groups": groups, "loaded": sorted(m for m in sys.modules if m.startswith(heavy))}))
"""


# Up to the hand-over the fleet path needs only the command's own modules: what follows it
# (the event loop, the progress printer, the verdict) is imported after the session was
# handed over, beside the worker already running it (drivers.WARM_MODULES). The probe runs
# the real `dispatch` command and reports what was imported when its hand-over committed.
HANDOVER_PROBE = """
import json, os, sys
import swarmdeck.catalog.direct as direct
hand_over = direct.DirectCatalog.hand_over
def report(self, row, task):
    hand_over(self, row, task)
    later = ("asyncio", "rich", "swarmdeck.dispatch.runlog", "swarmdeck.dispatch.verdict",
             "swarmdeck.dispatch.schemas", "swarmdeck.ui")
    # stdout is the contract's (ContractStdout guards it): the report goes to a file.
    with open(os.environ["PROBE_REPORT"], "w") as out:
        json.dump({"loaded": sorted(m for m in sys.modules if m.startswith(later))}, out)
    os._exit(0)
direct.DirectCatalog.hand_over = report
sys.argv = ["swarmdeck", *sys.argv[1:]]
from swarmdeck.cli.app import main
main()
"""


def _probe(*argv: str) -> dict[str, list[str]]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout)


def test_the_dispatch_fleet_path_imports_what_follows_only_after_the_hand_over(
    sd_home: Path, workdir: Path, tmp_path: Path
) -> None:
    from swarmdeck.catalog.catalog import Catalog
    from swarmdeck.catalog.workers import WorkerRegistry
    from swarmdeck.config import load_settings

    write_provider(sd_home, "fake", "http://127.0.0.1:9/v1")
    # A live worker on another host (its lease fresh): dispatch takes the fleet path.
    catalog = Catalog.open(load_settings().store_url)
    WorkerRegistry(catalog.engine, "elsewhere").register("elsewhere-1-abc", "worker")
    catalog.engine.dispose()
    report = tmp_path / "imports.json"
    subprocess.run(
        [sys.executable, "-c", HANDOVER_PROBE,
        "dispatch", "--provider", "fake", "--mode", "explore", "--workdir", str(workdir),
        "--task", "what does main return?", "--quiet",
        # A long lease: on a slow machine the probe's start-up outlasted the 3 s one, the
        # worker looked dead, and dispatch ran the session itself.
        ], env=cli_env(sd_home, PROBE_REPORT=str(report), SWARMDECK_LEASE_SECONDS="600"),
        check=True, capture_output=True,
    )  # fmt: skip
    assert json.loads(report.read_text())["loaded"] == []


def test_the_dispatch_fleet_path_imports_no_extra() -> None:
    probe = _probe("dispatch", "--provider", "x")
    assert probe["loaded"] == [] and "mcp" not in probe["groups"]


def test_mcp_is_a_lazily_registered_command() -> None:
    # `swarmdeck mcp ...` imports its module, which registers the group; the SDK itself
    # waits for a server's first use.
    probe = _probe("mcp", "ls")
    assert "mcp" in probe["groups"]
    assert not [m for m in probe["loaded"] if m == "mcp" or m.startswith(("mcp.", "opentelemetry"))]


# A worker imports its providers' SDKs in a thread as it starts (once what it took over
# began again: none here), not in its first session's turn (on the event loop every
# session shares). The probe runs the real `worker` command and reports what was imported
# once that preload was done.
WORKER_PROBE = """
import json, os, sys
import swarmdeck.models.factory as factory
preload = factory.preload_adapters
def report(configs):
    preload(configs)
    with open(os.environ["PROBE_REPORT"], "w") as out:
        json.dump({"kinds": sorted({c.kind for c in configs}),
                   "loaded": sorted(m for m in ("openai", "anthropic", "genai_prices.data")
                                    if m in sys.modules)}, out)
    os._exit(0)
factory.preload_adapters = report
sys.argv = ["swarmdeck", *sys.argv[1:]]
from swarmdeck.cli.app import main
main()
"""


def test_a_worker_imports_its_providers_sdk_as_it_starts(sd_home: Path, tmp_path: Path) -> None:
    write_provider(sd_home, "fake", "http://127.0.0.1:9/v1")
    report = tmp_path / "imports.json"
    subprocess.run(
        [sys.executable, "-c", WORKER_PROBE, "worker"],
        env=cli_env(sd_home, PROBE_REPORT=str(report)),
        capture_output=True,
        timeout=120,
    )
    loaded = ["genai_prices.data", "openai"]  # the price tables too
    assert json.loads(report.read_text()) == {"kinds": ["openai"], "loaded": loaded}
