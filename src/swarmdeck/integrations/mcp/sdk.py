"""The MCP SDK, imported only when a server is used: it is the `swarmdeck[mcp]` extra, and
a configured server without it is refused with the line that installs it."""

from __future__ import annotations

import functools
from types import SimpleNamespace
from typing import Any

from swarmdeck.errors import ConfigError
from swarmdeck.version import __version__

INSTALL_HINT = "install the extra: pip install 'swarmdeck[mcp]'"


def sdk_available() -> bool:
    """True when the MCP SDK can be imported."""
    try:
        require_sdk()
    except ConfigError:
        return False
    return True


@functools.cache
def require_sdk() -> Any:
    """The SDK's parts swarmdeck uses; ConfigError with the install line without it."""
    try:
        from mcp import Client, StdioServerParameters, stdio_client
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared._httpx_utils import create_mcp_http_client
        from mcp.shared.exceptions import MCPError
        from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT, Implementation
    except ImportError:
        raise ConfigError(
            "MCP servers are configured but the MCP SDK is not installed", INSTALL_HINT
        ) from None
    return SimpleNamespace(
        Client=Client,
        StdioServerParameters=StdioServerParameters,
        stdio_client=stdio_client,
        streamable_http_client=streamable_http_client,
        create_mcp_http_client=create_mcp_http_client,
        MCPError=MCPError,
        CONNECTION_CLOSED=CONNECTION_CLOSED,
        REQUEST_TIMEOUT=REQUEST_TIMEOUT,
        client_info=lambda: Implementation(name="swarmdeck", version=__version__),
        version=__version__,
    )
