"""Built-in tools. Each module registers its tools with the engine registry on import."""

from executions.tools import interaction, reasoning  # noqa: F401
