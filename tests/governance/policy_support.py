"""Builders shared by the policy engine tests."""

from __future__ import annotations

import uuid

from rivercore.types.governance import CallFacts, GovernancePolicySpec


def policy(expression: str, enforcement: str, policy_type: str | None = None, name: str = "p") -> GovernancePolicySpec:
    return GovernancePolicySpec(
        policy_id=str(uuid.uuid4()),
        name=name,
        policy_type=policy_type,
        conditions={"expression": expression},
        enforcement=enforcement,
    )


def facts(**overrides) -> CallFacts:
    values = {
        "tool_name": "write_back",
        "tool_category": "execution",
        "writes": True,
        "arguments": {},
        "action_level": "automated",
        "require_approval_for": [],
        "policies": [],
        "org_id": 1,
        "workspace_id": 1,
        "agent_id": str(uuid.uuid4()),
        "execution_id": 1,
    }
    values.update(overrides)
    return CallFacts(**values)
