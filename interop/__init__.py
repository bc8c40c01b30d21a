"""River reached from other agent clients: an MCP server (``/mcp/``, docs/mcp.md) and
Agent2Agent endpoints (``/a2a/``, docs/a2a.md). Both authenticate, scope and throttle a
caller in ``callers``, and start and read runs through ``runs``, which calls the same
selectors and services as the REST API."""
