"""OpenTelemetry traces of sessions in the GenAI semantic conventions (the `swarmdeck[otel]`
extra): `invoke_agent` per session generation, `chat {model}` per turn, `execute_tool
{name}` per tool call. With nothing configured the runtime holds NO_TRACING, whose every
hook is a shared no-op."""
