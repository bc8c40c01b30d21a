import pytest

from agents.services import agent_create, agent_version_create, agent_version_deploy
from governance.models import WorkspaceSettings


def version_body(**overrides) -> dict:
    body = {
        "goal": "Resolve support tickets.",
        "instructions": "Look up the ticket, then propose a reply.",
        "action_level": "read_only",
        "tools": ["execute_query", "explain_results"],
    }
    body.update(overrides)
    return body


@pytest.fixture
def agent(workspace, owner):
    return agent_create(workspace=workspace, owner=owner, name="Triage", business_function="customer_support")


@pytest.fixture
def deployed_agent(agent, owner):
    """A draft agent with version 1 (read_only) deployed."""
    version = agent_version_create(agent=agent, actor=owner, **version_body())
    return agent_version_deploy(agent=agent, version=version, actor=owner)


@pytest.fixture
def no_approval_channels(workspace):
    return WorkspaceSettings.objects.create(
        workspace=workspace,
        approval_notification_config={
            "in_app": {"enabled": False},
            "email": {"enabled": False},
            "slack": {"enabled": False},
        },
    )
