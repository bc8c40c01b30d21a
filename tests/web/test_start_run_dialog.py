"""Start a run from the overview: a dialog (fetched with X-River-Dialog) or the plain
/runs/start page; the run is started by the API's service with its checks (agent:execute,
an active agent of the user's workspace, a bounded request) and the errors land on the
field that caused them."""

from __future__ import annotations

import pytest
from django.test import Client

from agents.models import Agent
from executions.models import Execution
from tests.factories import make_agent

pytestmark = pytest.mark.django_db

DIALOG = {"HTTP_X_RIVER_DIALOG": "1"}


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def agent(workspace, owner):
    return make_agent(workspace=workspace, owner=owner, name="Helpful agent")


def test_overview_opens_the_dialog_and_links_to_the_page(owner, agent):
    page = _client(owner).get("/").content.decode()
    assert 'href="/runs/start" data-start-run' in page and '<dialog id="start-run-dialog"' in page
    assert "start_run.js" in page


def test_the_page_and_the_fragment_offer_only_active_agents_of_the_workspace(owner, agent, workspace,
                                                                             other_workspace, outsider):
    make_agent(workspace=workspace, owner=owner, name="Paused agent", status=Agent.Status.PAUSED)
    make_agent(workspace=other_workspace, owner=outsider, name="Foreign agent")
    client = _client(owner)
    page = client.get("/runs/start").content.decode()
    assert "<h1>Start a run</h1>" in page and f'<option value="{agent.pk}">Helpful agent</option>' in page
    assert "Paused agent" not in page and "Foreign agent" not in page
    fragment = client.get("/runs/start", **DIALOG).content.decode()
    assert "<html" not in fragment
    assert "data-start-run-form" in fragment and "Helpful agent" in fragment


def test_posting_starts_the_run_and_goes_to_its_page(member, agent):
    response = _client(member).post("/runs/start", {"agent": str(agent.pk), "prompt": "Count the open tickets"})
    run = Execution.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/runs/{run.pk}/"
    assert run.agent_id == agent.pk and run.input_prompt == "Count the open tickets"
    assert run.requester_id == member.pk


def test_the_dialog_gets_the_runs_url(member, agent):
    response = _client(member).post("/runs/start", {"agent": str(agent.pk), "prompt": "Hello"}, **DIALOG)
    assert response.status_code == 201 and response.json() == {"url": f"/runs/{Execution.objects.get().pk}/"}


@pytest.mark.parametrize("data, field", [
    ({"agent": "", "prompt": "x"}, "agent"),
    ({"agent": "not-a-uuid", "prompt": "x"}, "agent"),
    ({"agent": "00000000-0000-4000-8000-000000000000", "prompt": "x"}, "agent"),
    ({"prompt": ""}, "prompt"),
    ({"prompt": "   "}, "prompt"),
    ({"prompt": "x" * 20_001}, "prompt"),
])
def test_bad_input_is_a_400_naming_the_field_in_the_dialog(member, agent, data, field):
    data = {"agent": str(agent.pk), **data}
    response = _client(member).post("/runs/start", data, **DIALOG)
    page = response.content.decode()
    assert response.status_code == 400 and f'id="id_{field}_error"' in page and "<html" not in page
    assert not Execution.objects.exists()


def test_an_agent_of_another_workspace_is_not_a_choice(member, agent, outsider, other_workspace):
    foreign = make_agent(workspace=other_workspace, owner=outsider, name="Foreign agent")
    response = _client(member).post("/runs/start", {"agent": str(foreign.pk), "prompt": "x"})
    assert response.status_code == 400 and 'id="id_agent_error"' in response.content.decode()
    assert not Execution.objects.exists()


def test_an_agent_paused_after_the_form_opened_is_refused_by_the_service(member, agent):
    # The choice was valid when listed; the service's own check still applies.
    client = _client(member)
    client.get("/runs/start")
    Agent.objects.filter(pk=agent.pk).update(status=Agent.Status.PAUSED)
    response = client.post("/runs/start", {"agent": str(agent.pk), "prompt": "x"})
    assert response.status_code == 400 and not Execution.objects.exists()


def test_a_viewer_may_not_start_runs(workspace, agent, django_user_model):
    from tenancy.models import Membership
    from tenancy.permissions import Role

    viewer = django_user_model.objects.create_user("viewer", password="x")
    Membership.objects.create(workspace=workspace, user=viewer, role=Role.VIEWER)
    client = _client(viewer)
    page = client.get("/runs/start").content.decode()
    assert "may not start runs" in page and "Helpful agent" not in page
    assert client.post("/runs/start", {"agent": str(agent.pk), "prompt": "x"}).status_code == 403
    assert not Execution.objects.exists()


def test_signed_out_visitors_are_sent_to_sign_in(agent):
    response = Client().post("/runs/start", {"agent": str(agent.pk), "prompt": "x"})
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]
    assert not Execution.objects.exists()


def test_csrf_is_enforced(member, agent):
    client = Client(enforce_csrf_checks=True)
    client.force_login(member)
    assert client.post("/runs/start", {"agent": str(agent.pk), "prompt": "x"}).status_code == 403
    assert not Execution.objects.exists()
