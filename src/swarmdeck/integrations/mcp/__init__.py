"""MCP: servers from `.mcp.json` files as tools of a session (client side), and the tools
`swarmdeck mcp serve` offers a planner (server side). The SDK is the `swarmdeck[mcp]` extra."""
