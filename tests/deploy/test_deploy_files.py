"""The deployment files in deploy/ hold up to the tools this machine has: systemd-analyze on
the worker unit, compose's own config check, and the Helm chart rendered and parsed."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
CHART = DEPLOY / "helm" / "swarmdeck"


@pytest.mark.parametrize(
    ("name", "as_name"),
    [
        ("swarmdeck-worker.service", "swarmdeck-worker.service"),
        ("swarmdeck-worker@.service", "swarmdeck-worker@prod.service"),
    ],
)
def test_the_worker_units_pass_systemd_analyze_verify(
    tmp_path: Path, name: str, as_name: str
) -> None:
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed here")
    unit = (DEPLOY / "systemd" / name).read_text()
    assert "ExecStart=/usr/local/bin/swarmdeck worker" in unit
    # verify wants ExecStart's binary to exist: point it at this venv's swarmdeck.
    here = Path(sys.executable).with_name("swarmdeck")
    checked = tmp_path / as_name
    checked.write_text(unit.replace("/usr/local/bin/swarmdeck", str(here)))
    res = subprocess.run(
        ["systemd-analyze", "verify", str(checked)], capture_output=True, text=True, timeout=60
    )
    assert res.returncode == 0, res.stderr
    assert "swarmdeck-worker" not in res.stderr, res.stderr


def compose_command() -> list[str] | None:
    """`docker compose` when the plugin is there, else Debian's `docker-compose`."""
    if shutil.which("docker"):
        ok = subprocess.run(["docker", "compose", "version"], capture_output=True, timeout=30)
        if ok.returncode == 0:
            return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    return None


def test_compose_file_passes_compose_config(tmp_path: Path) -> None:
    command = compose_command()
    if command is None:
        pytest.skip("neither `docker compose` nor `docker-compose` is installed here")
    # The files compose.yaml names but that hold secrets, so are not in the repository.
    for name in ("swarmdeck.env", "pg_password"):
        (tmp_path / name).write_text("")
    shutil.copy(DEPLOY / "compose.yaml", tmp_path / "compose.yaml")
    res = subprocess.run(
        [*command, "-f", str(tmp_path / "compose.yaml"), "config"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stderr
    assert "worker" in res.stdout and "postgres" in res.stdout


def render(template: str, values: dict[str, Any]) -> str:
    """The chart's template subset: `{{ .Values.x.y }}`, `| quote`, `.Release.Name`, and
    `{{- if .Values.x }}` ... `{{- end }}` (all the chart uses; anything else fails)."""

    def lookup(path: str) -> Any:
        node: Any = {"Values": values, "Release": {"Name": "sd"}}
        for part in path.strip(".").split("."):
            node = node[part]
        return node

    def block(m: re.Match[str]) -> str:
        return m.group(2) if lookup(m.group(1)) else ""

    text = re.sub(r"\{\{- if (\S+) \}\}\n(.*?)\{\{- end \}\}\n?", block, template, flags=re.S)

    def expr(m: re.Match[str]) -> str:
        path, _, pipe = m.group(1).partition("|")
        value = lookup(path.strip())
        if pipe.strip() == "quote":
            return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'
        assert not pipe, f"unsupported pipe {pipe!r}"
        return str(value).lower() if isinstance(value, bool) else str(value)

    rendered = re.sub(r"\{\{ (\.[^}]+?) \}\}", expr, text)
    assert "{{" not in rendered, rendered
    return rendered


def rendered_chart(**overrides: Any) -> list[dict[str, Any]]:
    """Every document of the chart's templates, with values.yaml and these overrides."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    for key, value in overrides.items():
        values[key]["enabled"] = value
    docs = []
    for template in sorted((CHART / "templates").glob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(render(template.read_text(), values)) if d]
    return docs


def test_the_chart_renders_to_kubernetes_objects() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert (chart["apiVersion"], chart["name"]) == ("v2", "swarmdeck")
    kinds = {(d["kind"], d["metadata"]["name"]) for d in rendered_chart(portal=True)}
    assert kinds == {
        ("Secret", "sd-store"),
        ("Deployment", "sd-worker"),
        ("Deployment", "sd-portal"),
        ("Service", "sd-portal"),
        ("ScaledObject", "sd-worker"),
    }
    assert ("Deployment", "sd-portal") not in {
        (d["kind"], d["metadata"]["name"]) for d in rendered_chart(portal=False)
    }
    [scaled] = [d for d in rendered_chart() if d["kind"] == "ScaledObject"]
    [trigger] = scaled["spec"]["triggers"]
    assert trigger["type"] == "postgresql"
    assert trigger["metadata"]["connectionFromEnv"] == "SWARMDECK_STORE"
    assert trigger["metadata"]["query"].startswith("SELECT count(*) FROM sd_sessions")
    assert scaled["spec"]["scaleTargetRef"]["name"] == "sd-worker"
