"""Which tracing a process gets: none unless asked, the standard variables or settings.yaml,
a refusal that names the extra when the SDK is missing, and a no-op that costs nothing."""

from __future__ import annotations

import builtins
from pathlib import Path

import pytest

from swarmdeck.errors import ConfigError
from swarmdeck.integrations.telemetry.setup import tracing_for
from swarmdeck.integrations.telemetry.tracing import NO_TRACING, OtelTracing

ENVS = (
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_TRACES_EXPORTER",
    "OTEL_SDK_DISABLED",
    "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT",
)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ENVS:
        monkeypatch.delenv(name, raising=False)


def test_nothing_configured_is_no_tracing(tmp_path: Path) -> None:
    assert tracing_for(tmp_path, str) is NO_TRACING
    # The no-op hooks hand back shared contexts whose recorders ignore everything.
    with NO_TRACING.turn(None) as turn, NO_TRACING.tool(None) as tool:  # type: ignore[arg-type]
        turn.completed(object(), [])
        tool.finished("x", True)
    assert NO_TRACING.traceparent() is None


def test_the_standard_variables_and_the_settings(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
    tracing = tracing_for(tmp_path, str)
    assert isinstance(tracing, OtelTracing) and not tracing.capture_content
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    assert tracing_for(tmp_path, str) is NO_TRACING
    monkeypatch.delenv("OTEL_SDK_DISABLED")
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT")
    (tmp_path / "settings.yaml").write_text(
        "telemetry:\n  endpoint: http://127.0.0.1:4318\n  capture_content: true\n"
    )
    tracing = tracing_for(tmp_path, str)
    assert isinstance(tracing, OtelTracing) and tracing.capture_content
    (tmp_path / "settings.yaml").write_text("telemetry:\n  endpont: x\n")
    with pytest.raises(ConfigError, match="telemetry takes"):
        tracing_for(tmp_path, str)


def test_configured_without_the_sdk_is_refused(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
    real_import = builtins.__import__

    def no_sdk(name: str, *args, **kwargs):
        if name.startswith("opentelemetry.sdk"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_sdk)
    with pytest.raises(ConfigError) as err:
        tracing_for(tmp_path, str)
    assert err.value.one_line() == (
        "OpenTelemetry is configured (OTEL_EXPORTER_OTLP_ENDPOINT is set) but its SDK is "
        "not installed (install the extra: pip install 'swarmdeck[otel]')"
    )
