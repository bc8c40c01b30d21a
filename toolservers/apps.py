from django.apps import AppConfig


class ToolserversConfig(AppConfig):
    name = "toolservers"
    verbose_name = "Tool servers (MCP)"

    def ready(self) -> None:
        from rivercore.tools import mcp_port_install
        from toolservers.engine import RiverMcpPort

        mcp_port_install(RiverMcpPort())
