"""The agent's page: a Run now form (prompt and optional JSON payload, errors next to
the field), the agent's triggers with their latest firings, and its latest runs."""

import pytest
from django.test import Client

from agents.models import Agent
from executions.models import Execution
from triggers.services import trigger_create, trigger_fire

pytestmark = pytest.mark.django_db


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_run_now_starts_a_run_as_the_person_and_goes_to_it(member, active_agent):
    response = signed_in(member).post(f"/agents/{active_agent.pk}/",
                                      {"prompt": "Summarize today", "payload": '{"ticket_id": 42}'})
    run = Execution.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/runs/{run.pk}/"
    assert (run.requested_by, run.trigger_type, run.trigger_source, run.trigger_id) == (member, "manual", "ui",
                                                                                        None)
    assert run.input_prompt == "Summarize today" and run.trigger_payload == {"ticket_id": 42}


@pytest.mark.parametrize(("payload", "message"), [("{not json", "This is not valid JSON"),
                                                  ("[1, 2]", "must be a JSON object"),
                                                  ("[" * 100_000, ""), ('{"a": "\\u0000"}', "NUL"),
                                                  ('{"a": NaN}', "not valid JSON")])
def test_bad_json_is_shown_next_to_the_field_and_starts_nothing(member, active_agent, payload, message):
    response = signed_in(member).post(f"/agents/{active_agent.pk}/", {"prompt": "x", "payload": payload})
    assert response.status_code == 400
    page = response.content.decode()
    assert 'id="id_payload_error"' in page and message in page
    assert not Execution.objects.exists()


def test_an_inactive_agent_says_so_and_starts_nothing(member, active_agent):
    Agent.objects.filter(pk=active_agent.pk).update(status=Agent.Status.PAUSED)
    response = signed_in(member).post(f"/agents/{active_agent.pk}/", {"prompt": "x"})
    assert response.status_code == 400 and "only active agents run" in response.content.decode()
    assert not Execution.objects.exists()


def test_a_manual_trigger_runs_its_prompt_with_the_payload_as_the_person(member, owner, workspace, active_agent):
    trigger = trigger_create(actor=owner, workspace=workspace, agent=active_agent, name="Refund check",
                             trigger_type="manual", prompt="Check refund {{ payload.id }}")
    client = signed_in(member)
    both = client.post(f"/agents/{active_agent.pk}/", {"preset": str(trigger.pk), "prompt": "typed"})
    assert both.status_code == 400 and not Execution.objects.exists()
    response = client.post(f"/agents/{active_agent.pk}/", {"preset": str(trigger.pk), "payload": '{"id": 9}'})
    run = Execution.objects.get()
    assert response.status_code == 302
    assert (run.input_prompt, run.requested_by, run.trigger_id) == ("Check refund 9", member, trigger.pk)


def test_the_page_lists_triggers_their_firings_and_recent_runs(viewer, owner, workspace, active_agent):
    trigger = trigger_create(actor=owner, workspace=workspace, agent=active_agent, name="Nightly", trigger_type="api")
    started = trigger_fire(trigger=trigger, payload={}, source="api:Nightly")
    trigger_fire(trigger=trigger, payload={}, source="api:Nightly", dedupe_key="a")
    trigger_fire(trigger=trigger, payload={}, source="api:Nightly", dedupe_key="a")
    page = signed_in(viewer).get(f"/agents/{active_agent.pk}/").content.decode()
    assert "Nightly" in page and "Duplicate delivery" in page and f"/runs/{started.execution_id}/" in page
    assert "may not run agents" in page  # a viewer sees, but has no form


def test_a_viewer_cannot_run(viewer, active_agent):
    assert signed_in(viewer).post(f"/agents/{active_agent.pk}/", {"prompt": "x"}).status_code == 403
    assert not Execution.objects.exists()


def test_outsider_gets_404(outsider, active_agent):
    client = signed_in(outsider)
    assert client.get(f"/agents/{active_agent.pk}/").status_code == 404
    assert client.post(f"/agents/{active_agent.pk}/", {"prompt": "x"}).status_code == 404
    assert client.get("/agents/not-a-uuid/").status_code == 404
    assert not Execution.objects.exists()


def test_anonymous_is_sent_to_sign_in(active_agent):
    response = Client().get(f"/agents/{active_agent.pk}/")
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]
