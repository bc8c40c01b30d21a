import pytest
from django.contrib.auth import get_user_model

from tenancy.models import Membership
from tenancy.permissions import Role
from tests.factories import make_agent


@pytest.fixture
def viewer(workspace):
    user = get_user_model().objects.create_user(username="viewer", password="pw-viewer")
    Membership.objects.create(workspace=workspace, user=user, role=Role.VIEWER)
    return user


@pytest.fixture
def active_agent(workspace, owner):
    return make_agent(workspace=workspace, owner=owner, name="Triage")


@pytest.fixture
def make_trigger(owner, workspace, active_agent):
    """trigger_create with defaults: a manual trigger of the active agent, made by the owner."""
    from triggers.services import trigger_create

    def make(**overrides):
        values = {"actor": owner, "workspace": workspace, "agent": active_agent, "name": "T",
                  "trigger_type": "manual", "prompt": "", "config": {}}
        values.update(overrides)
        return trigger_create(**values)

    return make


@pytest.fixture
def zendesk(workspace, owner):
    """A webhook endpoint 'zendesk' in the workspace: event triggers must name one."""
    from triggers.webhooks import webhook_endpoint_create

    return webhook_endpoint_create(workspace=workspace, slug="zendesk", created_by=owner).endpoint
