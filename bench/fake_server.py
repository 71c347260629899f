"""Run the fake LLM server in its own process, as a remote LLM would be, for benchmarks."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


@contextmanager
def fake_llm_process(script: dict) -> Iterator[str]:
    """Start `swarmdeck fake-llm` on a free port; yields its OpenAI base URL."""
    path = Path(tempfile.mkdtemp(prefix="sd-fake-")) / "script.json"
    path.write_text(json.dumps(script))
    proc = subprocess.Popen(
        [sys.executable, "-m", "swarmdeck", "fake-llm", "--port", "0", "--script", str(path)],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        match = re.search(r"http://127\.0\.0\.1:(\d+)", line)
        if not match:
            raise RuntimeError(f"fake LLM did not start: {line!r}")
        yield f"http://127.0.0.1:{match.group(1)}/v1"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        # Its last line counts requests and connections: keep-alive shows as far fewer
        # connections than requests.
        assert proc.stderr is not None
        for line in proc.stderr.read().splitlines():
            if line.startswith("fake LLM served"):
                print(f"  {line}")


def bench_provider(base_url: str) -> Any:
    """The provider the benches' sessions call: the fake server, no key, and a concurrency
    cap above their 1,000 sessions."""
    from swarmdeck.models.registry import ProviderConfig

    return ProviderConfig(
        key="bench",
        kind="openai",
        base_url=base_url,
        model="scripted",
        needs_key=False,
        concurrency=1024,
    )


def write_bench_provider(
    home: Path, base_url: str, *, model: str = "scripted", concurrency: int | None = 1024
) -> None:
    """bench_provider as a provider file in `home`, for the worker processes a bench starts
    (`concurrency` None: the provider's default cap)."""
    import yaml

    provider = bench_provider(base_url).model_dump(include={"key", "kind", "base_url", "needs_key"})
    provider["model"] = model
    if concurrency is not None:
        provider["concurrency"] = concurrency
    (home / "providers").mkdir(parents=True, exist_ok=True, mode=0o700)
    (home / "providers" / "bench.yaml").write_text(yaml.safe_dump(provider))
