"""Built-in tools. Each module registers its tools with the engine registry on import."""

from executions.tools import (  # noqa: F401
    artifacts,
    data,
    delegation,
    governance_tools,
    interaction,
    memory,
    reasoning,
    team,
)
