"""Reasoning tools (local; model-backed ones go through the router)."""
