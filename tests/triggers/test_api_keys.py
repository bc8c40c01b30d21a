"""API triggers: POST /api/v1/triggers/{id}/invoke with X-API-Key. Keys are shown once
and stored hashed; a key outside the trigger's organization or workspace is refused
without a hint; payloads are checked against the trigger's JSON Schema; each key has
an atomic per-minute limit."""

import threading

import pytest
from django.db import connection
from django.test import Client
from rest_framework.test import APIClient

from executions.models import Execution
from executions.services.load import request_build
from tenancy.models import Membership, Workspace
from tests.factories import make_agent
from triggers.apikeys import api_key_issue, api_key_revoke
from triggers.models import ApiKey, Trigger, TriggerFiring
from triggers.services import trigger_create

pytestmark = pytest.mark.django_db

SCHEMA = {"type": "object", "required": ["customer"],
          "properties": {"customer": {"type": "object", "required": ["id"],
                                      "properties": {"id": {"type": "integer"}}}}}


@pytest.fixture
def api_trigger(owner, workspace, active_agent):
    return trigger_create(actor=owner, workspace=workspace, agent=active_agent, name="Orders", trigger_type="api",
                          prompt="Check customer {{ payload.customer.id }}", config={"input_schema": SCHEMA})


@pytest.fixture
def key(owner, workspace):
    return api_key_issue(created_by=owner, workspace=workspace, name="CRM").plaintext


def invoke(trigger_id, key=None, body=None, **headers):
    if key is not None:
        headers["HTTP_X_API_KEY"] = key
    return APIClient().post(f"/api/v1/triggers/{trigger_id}/invoke", body if body is not None else {},
                            format="json", **headers)


def test_a_valid_key_starts_a_run_as_the_trigger_identity(api_trigger, key):
    response = invoke(api_trigger.pk, key, {"customer": {"id": 7}})
    assert response.status_code == 202, response.json()
    [execution_id] = response.json()["executions"]
    run = Execution.objects.get(pk=execution_id)
    context = request_build(run).trigger_context
    assert (context.trigger_type, context.trigger_source, context.trigger_payload) == (
        "api", "api:Orders", {"customer": {"id": 7}})
    assert context.triggered_by == str(api_trigger.run_as.user_id)
    assert run.input_prompt == "Check customer 7"
    assert ApiKey.objects.get().last_used_at is not None


@pytest.mark.parametrize("bad", [None, "", "rtk_nothing_here", "rvr_abc_def", "x" * 5000])
def test_a_missing_or_unknown_key_is_401(api_trigger, bad):
    response = invoke(api_trigger.pk, bad, {"customer": {"id": 7}})
    assert response.status_code == 401
    assert response.json()["error"]["message"] == "Invalid API key."
    assert response["WWW-Authenticate"] == 'ApiKey header="X-API-Key"'
    assert not Execution.objects.exists()


def test_a_revoked_key_is_401_like_any_other(api_trigger, owner, workspace):
    issued = api_key_issue(created_by=owner, workspace=workspace, name="Old")
    api_key_revoke(key=issued.key)
    response = invoke(api_trigger.pk, issued.plaintext, {"customer": {"id": 7}})
    assert response.status_code == 401 and response.json()["error"]["message"] == "Invalid API key."


def test_another_orgs_key_gets_the_same_403_as_a_trigger_that_does_not_exist(api_trigger, outsider,
                                                                            other_workspace):
    theirs = api_key_issue(created_by=outsider, workspace=other_workspace, name="Theirs").plaintext
    foreign = invoke(api_trigger.pk, theirs, {"customer": {"id": 7}})
    missing = invoke("00000000-0000-0000-0000-000000000000", theirs, {"customer": {"id": 7}})
    assert foreign.status_code == missing.status_code == 403
    assert foreign.json() == missing.json()
    assert not Execution.objects.exists() and not TriggerFiring.objects.exists()


def test_a_key_of_another_workspace_of_the_same_org_is_refused_but_an_org_key_works(api_trigger, org, owner,
                                                                                     org_admin):
    sibling = Workspace.objects.create(organization=org, name="Sales", slug="sales")
    Membership.objects.create(workspace=sibling, user=owner, role="admin")
    sibling_key = api_key_issue(created_by=owner, workspace=sibling, name="Sales").plaintext
    assert invoke(api_trigger.pk, sibling_key, {"customer": {"id": 7}}).status_code == 403
    org_key = api_key_issue(created_by=org_admin, organization=org, name="Org-wide").plaintext
    assert invoke(api_trigger.pk, org_key, {"customer": {"id": 7}}).status_code == 202


def test_session_or_bearer_credentials_do_not_invoke(api_client_for, owner, api_trigger):
    response = api_client_for(owner).post(f"/api/v1/triggers/{api_trigger.pk}/invoke", {"customer": {"id": 7}},
                                          format="json")
    assert response.status_code == 401
    client = Client()
    client.force_login(owner)
    assert client.post(f"/api/v1/triggers/{api_trigger.pk}/invoke", {"customer": {"id": 7}},
                       content_type="application/json").status_code == 401
    assert not Execution.objects.exists()


def test_schema_errors_name_the_path_and_are_logged_as_firings(api_trigger, key):
    response = invoke(api_trigger.pk, key, {"customer": {"id": "seven"}})
    assert response.status_code == 400
    details = response.json()["error"]["details"]
    assert "payload.customer.id" in details
    missing = invoke(api_trigger.pk, key, {}).json()["error"]["details"]
    assert "payload" in missing and "customer" in missing["payload"][0]
    assert list(TriggerFiring.objects.values_list("reason", flat=True)) == ["schema_invalid", "schema_invalid"]
    assert not Execution.objects.exists()


def test_a_non_api_trigger_or_a_disabled_one_is_409(owner, workspace, active_agent, key, api_trigger):
    manual = trigger_create(actor=owner, workspace=workspace, agent=active_agent, name="M", trigger_type="manual")
    assert invoke(manual.pk, key).status_code == 409
    api_trigger.enabled = False
    api_trigger.save(update_fields=["enabled"])
    response = invoke(api_trigger.pk, key, {"customer": {"id": 7}})
    assert response.status_code == 409 and response.json()["error"]["code"] == "trigger_disabled"
    assert not TriggerFiring.objects.exists()  # counted on the trigger, not written as a firing
    api_trigger.refresh_from_db()
    assert api_trigger.refused_invocations == 1


def test_a_payload_must_be_an_object(api_trigger, key):
    response = APIClient().post(f"/api/v1/triggers/{api_trigger.pk}/invoke", [1, 2], format="json",
                                HTTP_X_API_KEY=key)
    assert response.status_code == 400 and "payload" in response.json()["error"]["details"]


def test_an_idempotency_key_makes_a_retry_start_nothing(api_trigger, key):
    first = invoke(api_trigger.pk, key, {"customer": {"id": 7}}, HTTP_IDEMPOTENCY_KEY="order-1")
    again = invoke(api_trigger.pk, key, {"customer": {"id": 7}}, HTTP_IDEMPOTENCY_KEY="order-1")
    assert len(first.json()["executions"]) == 1
    assert again.status_code == 202 and again.json()["executions"] == []
    assert again.json()["firing"]["reason"] == "duplicate"


def test_an_inactive_agent_starts_nothing_and_says_why(api_trigger, key, active_agent):
    active_agent.status = "paused"
    active_agent.save(update_fields=["status"])
    response = invoke(api_trigger.pk, key, {"customer": {"id": 7}})
    assert response.status_code == 202
    assert response.json()["executions"] == [] and response.json()["firing"]["reason"] == "agent_inactive"


def test_the_workspace_setting_is_the_default_limit(api_trigger, key, workspace):
    Workspace.objects.filter(pk=workspace.pk).update(api_trigger_rate_limit_per_minute=2)
    codes = [invoke(api_trigger.pk, key, {"customer": {"id": n}}).status_code for n in range(3)]
    assert codes == [202, 202, 429]


def test_the_triggers_own_cap_applies_across_keys(owner, workspace, active_agent):
    trigger = trigger_create(actor=owner, workspace=workspace, agent=active_agent, name="Capped",
                             trigger_type="api", config={"rate_limit_per_minute": 1})
    first = api_key_issue(created_by=owner, workspace=workspace, name="A").plaintext
    second = api_key_issue(created_by=owner, workspace=workspace, name="B").plaintext
    assert invoke(trigger.pk, first).status_code == 202
    refused = invoke(trigger.pk, second)
    assert refused.status_code == 429 and 1 <= int(refused["Retry-After"]) <= 60


@pytest.fixture(autouse=True)
def one_minute(monkeypatch):
    """Every invoke in every test here falls in the same rate-limit window: a test whose
    calls crossed a minute boundary would see its count start again (it did, in CI)."""
    from types import SimpleNamespace

    from django.utils import timezone

    fixed = timezone.now().replace(second=10, microsecond=0)
    monkeypatch.setattr("triggers.apikeys.timezone", SimpleNamespace(now=lambda: fixed))
    return fixed


@pytest.mark.usefixtures("one_minute")
def test_a_call_the_triggers_cap_refuses_uses_none_of_the_keys_budget(owner, workspace, active_agent):
    capped = trigger_create(actor=owner, workspace=workspace, agent=active_agent, name="Capped",
                            trigger_type="api", config={"rate_limit_per_minute": 1})
    open_ = trigger_create(actor=owner, workspace=workspace, agent=active_agent, name="Open", trigger_type="api")
    key = api_key_issue(created_by=owner, workspace=workspace, name="K", rate_limit_per_minute=2).plaintext
    assert [invoke(capped.pk, key).status_code for _ in range(3)] == [202, 429, 429]
    assert [invoke(open_.pk, key).status_code for _ in range(2)] == [202, 429]  # one left, not none


@pytest.mark.usefixtures("one_minute")
def test_a_call_the_keys_limit_refuses_gives_back_the_triggers_budget(owner, workspace, active_agent):
    capped = trigger_create(actor=owner, workspace=workspace, agent=active_agent, name="Capped",
                            trigger_type="api", config={"rate_limit_per_minute": 2})
    spent = api_key_issue(created_by=owner, workspace=workspace, name="Spent", rate_limit_per_minute=1).plaintext
    other = api_key_issue(created_by=owner, workspace=workspace, name="Other").plaintext
    assert invoke(capped.pk, spent).status_code == 202
    assert [invoke(capped.pk, spent).status_code for _ in range(3)] == [429, 429, 429]
    assert [invoke(capped.pk, other).status_code for _ in range(2)] == [202, 429]


@pytest.mark.usefixtures("one_minute")
def test_refused_invocations_are_counted_not_written(owner, workspace, active_agent):
    capped = trigger_create(actor=owner, workspace=workspace, agent=active_agent, name="Capped",
                            trigger_type="api", config={"rate_limit_per_minute": 1})
    key = api_key_issue(created_by=owner, workspace=workspace, name="K").plaintext
    codes = [invoke(capped.pk, key).status_code for _ in range(12)]
    assert codes == [202] + [429] * 11
    Trigger.objects.filter(pk=capped.pk).update(enabled=False)
    assert [invoke(capped.pk, key).status_code for _ in range(5)] == [409] * 5
    assert TriggerFiring.objects.filter(trigger=capped).count() == 1  # the started one only
    capped.refresh_from_db()
    assert capped.refused_invocations == 16 and capped.last_refused_at is not None


@pytest.mark.django_db(transaction=True)
def test_the_limit_holds_under_concurrent_requests(owner, workspace, active_agent):
    from unittest import mock

    trigger = trigger_create(actor=owner, workspace=workspace, agent=active_agent, name="Busy", trigger_type="api")
    issued = api_key_issue(created_by=owner, workspace=workspace, name="Busy", rate_limit_per_minute=5)
    barrier = threading.Barrier(12)
    responses = []

    def call():
        try:
            client = APIClient()
            barrier.wait()
            responses.append(client.post(f"/api/v1/triggers/{trigger.pk}/invoke", {}, format="json",
                                         HTTP_X_API_KEY=issued.plaintext))
        finally:
            connection.close()

    with mock.patch("executions.tasks.run_segment.delay"), mock.patch("executions.tasks.post_process.delay"):
        threads = [threading.Thread(target=call) for _ in range(12)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    codes = sorted(r.status_code for r in responses)
    assert codes == [202] * 5 + [429] * 7
    assert all(r["Retry-After"].isdigit() for r in responses if r.status_code == 429)
    assert Execution.objects.filter(trigger_id=trigger.pk).count() == 5
    assert not TriggerFiring.objects.filter(trigger=trigger, reason="rate_limited").exists()
    trigger.refresh_from_db()
    assert trigger.refused_invocations == 7


# --- managing keys over REST -----------------------------------------------------------------


def test_a_key_is_shown_once_and_only_its_digest_is_kept(api_client_for, editor, workspace):
    client = api_client_for(editor)
    created = client.post("/api/v1/api-keys/", {"workspace": workspace.pk, "name": "CRM"})
    assert created.status_code == 201, created.json()
    plaintext = created.json()["key"]
    row = ApiKey.objects.get(pk=created.json()["id"])
    assert plaintext.startswith(f"rtk_{row.prefix}_") and plaintext not in row.digest
    listed = client.get("/api/v1/api-keys/").json()["results"]
    assert [item["id"] for item in listed] == [row.pk] and "key" not in listed[0]
    assert "key" not in client.get(f"/api/v1/api-keys/{row.pk}/").json()
    assert client.delete(f"/api/v1/api-keys/{row.pk}/").status_code == 204
    row.refresh_from_db()
    assert row.revoked_at is not None


def test_body_must_name_one_of_workspace_or_organization(api_client_for, owner, org, workspace):
    client = api_client_for(owner)
    both = client.post("/api/v1/api-keys/", {"workspace": workspace.pk, "organization": org.pk, "name": "x"})
    assert both.status_code == 400 and "workspace" in both.json()["error"]["details"]
    # A workspace admin is not an organization admin: the organization is not theirs to key.
    assert client.post("/api/v1/api-keys/", {"organization": org.pk, "name": "x"}).status_code == 404


def test_org_admin_issues_an_organization_key(api_client_for, org_admin, org):
    response = api_client_for(org_admin).post("/api/v1/api-keys/", {"organization": org.pk, "name": "All"})
    assert response.status_code == 201 and response.json()["workspace"] is None


def test_analyst_cannot_issue_or_revoke_and_outsider_gets_404(api_client_for, member, outsider, owner, workspace):
    issued = api_key_issue(created_by=owner, workspace=workspace, name="CRM")
    assert api_client_for(member).post("/api/v1/api-keys/", {"workspace": workspace.pk, "name": "x"}).status_code \
        == 403
    assert api_client_for(member).delete(f"/api/v1/api-keys/{issued.key.pk}/").status_code == 403
    client = api_client_for(outsider)
    assert client.post("/api/v1/api-keys/", {"workspace": workspace.pk, "name": "x"}).status_code == 404
    assert client.get("/api/v1/api-keys/").json()["results"] == []
    assert client.get(f"/api/v1/api-keys/{issued.key.pk}/").status_code == 404
    assert client.delete(f"/api/v1/api-keys/{issued.key.pk}/").status_code == 404
    issued.key.refresh_from_db()
    assert issued.key.revoked_at is None


def test_an_outsiders_trigger_is_not_invocable_with_our_key(key, outsider, other_workspace):
    theirs = make_agent(workspace=other_workspace, owner=outsider, name="Theirs")
    trigger = trigger_create(actor=outsider, workspace=other_workspace, agent=theirs, name="X", trigger_type="api")
    assert invoke(trigger.pk, key).status_code == 403
