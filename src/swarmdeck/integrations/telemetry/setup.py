"""Which tracing a process runs with: none unless configured, by the standard OTEL_*
variables or by `telemetry:` in settings.yaml; configured without the SDK, a refusal that
names the extra to install (fail closed: no silent run without the traces asked for)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from swarmdeck.config import user_setting
from swarmdeck.errors import ConfigError
from swarmdeck.integrations.telemetry.tracing import NO_TRACING, OtelTracing, Tracing

INSTALL_HINT = "install the extra: pip install 'swarmdeck[otel]'"
CONTENT_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
ENDPOINT_ENVS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
SETTING_KEYS = {"endpoint", "capture_content", "exporter", "service_name"}


def _truthy(value: Any) -> bool:
    return str(value).strip().lower() in ("1", "true", "yes", "on")


def telemetry_settings(home: Path) -> dict[str, Any]:
    """The `telemetry:` mapping of settings.yaml ({} without one); ConfigError when bad."""
    raw = user_setting("telemetry", home) or {}
    if not isinstance(raw, dict) or set(raw) - SETTING_KEYS:
        raise ConfigError(
            f"{home / 'settings.yaml'}: telemetry takes {', '.join(sorted(SETTING_KEYS))}",
            "fix the file",
        )
    return raw


def tracing_for(home: Path, redact: Callable[[str], str]) -> Tracing:
    """The process's tracing: NO_TRACING unless traces are asked for."""
    if _truthy(os.environ.get("OTEL_SDK_DISABLED", "")):
        return NO_TRACING
    settings = telemetry_settings(home)
    exporter = (os.environ.get("OTEL_TRACES_EXPORTER") or settings.get("exporter") or "").lower()
    env_endpoint = next((os.environ[e] for e in ENDPOINT_ENVS if os.environ.get(e)), None)
    endpoint = settings.get("endpoint")
    if exporter == "none" or (not exporter and not env_endpoint and not endpoint):
        return NO_TRACING
    why = next(
        (f"{e} is set" for e in ENDPOINT_ENVS if os.environ.get(e)),
        "OTEL_TRACES_EXPORTER is set" if os.environ.get("OTEL_TRACES_EXPORTER") else
        "settings.yaml has telemetry",
    )  # fmt: skip
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter
    except ImportError:
        raise ConfigError(
            f"OpenTelemetry is configured ({why}) but its SDK is not installed", INSTALL_HINT
        ) from None
    if exporter not in ("", "otlp", "console"):
        raise ConfigError(
            f"OTEL_TRACES_EXPORTER={exporter} is not supported", "use otlp or console"
        )
    if exporter == "console":
        span_exporter: Any = ConsoleSpanExporter()
    else:
        span_exporter = _otlp_exporter(endpoint if not env_endpoint else None)
    name = os.environ.get("OTEL_SERVICE_NAME") or settings.get("service_name") or "swarmdeck"
    provider = TracerProvider(resource=Resource.create({"service.name": name}))
    provider.add_span_processor(BatchSpanProcessor(span_exporter))
    capture = _truthy(os.environ.get(CONTENT_ENV, settings.get("capture_content", False)))
    meters = _meter_provider(exporter, endpoint if not env_endpoint else None, provider.resource)
    return OtelTracing(provider, redact, capture_content=capture, meter_provider=meters)


def _meter_provider(exporter: str, endpoint: str | None, resource: Any) -> Any:
    """Metrics beside the traces, to the same place (OTLP, or the console)."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import (
        ConsoleMetricExporter,
        PeriodicExportingMetricReader,
    )

    if exporter == "console":
        metric_exporter: Any = ConsoleMetricExporter()
    else:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

        url = (endpoint or "").rstrip("/")
        metric_exporter = (
            OTLPMetricExporter(endpoint=url if url.endswith("/v1/metrics") else url + "/v1/metrics")
            if url
            else OTLPMetricExporter()
        )
    reader = PeriodicExportingMetricReader(metric_exporter)
    return MeterProvider(resource=resource, metric_readers=[reader])


def _otlp_exporter(endpoint: str | None) -> Any:
    """OTLP over HTTP (protobuf); the SDK reads the OTEL_EXPORTER_OTLP_* variables itself."""
    protocol = os.environ.get(
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL", "")
    )
    if protocol and protocol != "http/protobuf":
        raise ConfigError(
            f"OTLP protocol {protocol} is not supported",
            "use OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf",
        )
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError:
        raise ConfigError("the OTLP exporter is not installed", INSTALL_HINT) from None
    if endpoint:
        url = endpoint.rstrip("/")
        return OTLPSpanExporter(endpoint=url if url.endswith("/v1/traces") else url + "/v1/traces")
    return OTLPSpanExporter()
