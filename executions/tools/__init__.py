"""Built-in tools. Each module registers its tools with the engine registry on import."""

from executions.tools import data, delegation, governance_tools, interaction, memory, reasoning, team  # noqa: F401
