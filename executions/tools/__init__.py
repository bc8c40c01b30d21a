"""Built-in tools. Each module registers its tools with the engine registry on import."""

from executions.tools import artifacts, data, delegation, governance_tools, interaction, reasoning  # noqa: F401
