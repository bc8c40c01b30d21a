"""Every run knows its cause: the execution API and the run page show the trigger."""

import pytest

from executions.services import execution_start, person_run_request
from triggers.services import trigger_fire

pytestmark = pytest.mark.django_db


def test_the_api_and_the_run_page_name_the_trigger(api_client_for, owner, client, make_trigger, zendesk):
    trigger = make_trigger(name="Tickets", trigger_type="event",
                           config={"endpoint": "zendesk", "event_type": "ticket.created"})
    firing = trigger_fire(trigger=trigger, payload={"id": 1}, source="webhook:zendesk")
    data = api_client_for(owner).get(f"/api/v1/executions/{firing.execution_id}/").json()
    assert data["trigger"] == {"id": str(trigger.pk), "type": "event", "source": "webhook:zendesk"}
    assert data["requested_by"] == trigger.run_as.user_id
    client.force_login(owner)
    page = client.get(f"/runs/{firing.execution_id}/").content.decode()
    assert "webhook:zendesk" in page and str(trigger.pk) in page and trigger.run_as.user.username in page


def test_a_persons_run_has_no_trigger_id(api_client_for, owner, active_agent):
    execution = execution_start(agent=active_agent, request=person_run_request(
        agent=active_agent, user=owner, prompt="hi"))
    data = api_client_for(owner).get(f"/api/v1/executions/{execution.pk}/").json()
    assert data["trigger"] == {"id": None, "type": "manual", "source": "ui"}
