"""Longest text River accepts in each kind of field, the same in the API and the contracts.

docs/api.md lists every field and its limit; change both together. Bodies as a whole
are capped by RIVER_MAX_REQUEST_BYTES and JSON nesting by RIVER_JSON_MAX_DEPTH.
"""

NAME = 200  # names, domains, labels (the model columns are 200 wide)
IDENTIFIER = 100  # tool names, roles, permissions, sources of a trigger
DESCRIPTION = 2_000  # descriptions of agents, data sources, policies
GOAL = 4_000  # an agent's goal
COMMENT = 4_000  # approval and resolution comments
PROMPT = 20_000  # instructions, system prompts, input prompts, generate-agent prompts
SECRET = 1_000  # API keys
MODEL_ID = 200  # a model id in an LLM provider's tier map
LIST_ITEMS = 100  # entries of a list of names or ids in a request (tools, data sources)

# Whole numbers stored in 32-bit columns must stay below 2**31 or the database refuses them.
PROVIDER_PRIORITY = 10_000
RATE_LIMIT_RPM = 1_000_000
