"""Value types shared by the core and the apps: agents, governance, data sources."""
