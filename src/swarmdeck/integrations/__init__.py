"""Integrations with the outside: MCP (servers as tools; swarmdeck as a server) and
OpenTelemetry traces. Each needs an optional extra; nothing here imports it at load."""
