"""The Django admin scoped by organization (tenancy/admin_scoping.py, docs/admin.md).

Two organizations, Alpha and Bravo, each with a row of every registered model whose
visible text says which organization it belongs to. Alpha's staff user holds *every*
Django permission, so only the organization scoping stands between them and Bravo.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.contrib import admin
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.contrib.contenttypes.models import ContentType
from django.core.management import call_command
from django.db import connection
from django.test import Client, RequestFactory
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from agents.evaluation_models import Evaluation, PromotionGate, TestSetPin
from agents.models import Agent, AgentCanary, AgentMemory, AgentVersion, MemoryConsent, WorkspaceMemory
from artifacts.models import Artifact
from common.crypto import encrypt_text
from datasources.models import DataSource
from executions.models import Execution, ExecutionEvent, ExecutionStep, LLMProvider, Session
from governance.audit import audit_anchor, audit_record
from governance.backtest_models import PolicyBacktest
from governance.models import ApprovalRequest, AuditLogEntry, Notification, Policy, PolicyCounter, WorkspaceSettings
from tenancy.admin_scoping import TenantScopedAdminMixin, organization_id_of
from tenancy.models import Membership, Organization, OrganizationMember, Workspace
from tenancy.permissions import Role
from tenancy.services import token_issue
from tests.factories import make_agent
from tests.module_data import rows_for_the_module
from triggers.apikeys import api_key_issue
from triggers.models import MetricSample, PipelineHandoff, TriggerFiring
from triggers.services import trigger_create
from triggers.webhooks import webhook_endpoint_create

pytestmark = pytest.mark.django_db

User = get_user_model()
admin.autodiscover()  # what riverapp.urls does before the admin serves a page
REGISTERED = sorted(admin.site._registry, key=lambda model: model._meta.label)


def _url(model, view: str = "changelist", *args) -> str:
    from django.urls import reverse

    return reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_{view}", args=args)


def seed(*, org: Organization, tag: str, n: int) -> dict:
    """One row of every River model in ``org``, its visible text carrying ``tag``."""
    title = tag.capitalize()
    now = timezone.now()
    ws = Workspace.objects.create(organization=org, name=f"{title} ws {n}", slug=f"{tag}-ws-{n}")
    person = User.objects.create_user(username=f"{tag}_person_{n}", email=f"{tag}{n}@example.com", password="x")
    OrganizationMember.objects.create(organization=org, user=person, role=OrganizationMember.OrgRole.MEMBER)
    Membership.objects.create(workspace=ws, user=person, role=Role.ADMIN)
    token_issue(user=person, name=f"{title} token {n}")
    source = DataSource.objects.create(
        workspace=ws, name=f"{title} source {n}", type="postgresql",
        connection_config={"host": "localhost", "port": 5432, "database": f"{tag}db"},
    )
    Policy.objects.create(organization=org, scope="organization", name=f"{title} policy {n}", policy_type="budget",
                          conditions={"expression": "cost.tokens > 5000"}, enforcement="warn")
    agent = make_agent(workspace=ws, owner=person, name=f"{title} agent {n}", data_sources=[source])
    execution = Execution.objects.create(workspace=ws, agent=agent, agent_version=agent.current_version,
                                         requested_by=person, input_prompt=f"{title} prompt {n}")
    ExecutionStep.objects.create(execution=execution, step_number=1, step_type="reasoning", tool_name=f"{tag}_tool")
    ExecutionEvent.objects.create(execution=execution, seq=1, event_type=f"{tag}_event")
    AgentMemory.objects.create(agent=agent, execution_id=execution.pk, summary=f"{title} memory {n}")
    ApprovalRequest.objects.create(workspace=ws, execution_id=execution.pk, tool_name=f"{tag}_write",
                                   expires_at=now + timedelta(days=1))
    audit_record(organization_id=org.pk, workspace_id=ws.pk, event_type=f"{tag}_event", actor_label=f"{title} {n}")
    audit_anchor(organization_id=org.pk)
    PolicyCounter.objects.create(key=f"{tag}:{n}", window_start=now, value=1)
    WorkspaceSettings.objects.get_or_create(workspace=ws)
    Notification.objects.create(workspace=ws, user=person, kind="test", title=f"{title} notice {n}")
    LLMProvider.objects.create(organization=org, provider_name=f"{tag}-{n}",
                               tier_models={"fast": "openai/gpt-4o-mini"})
    trigger = trigger_create(actor=person, workspace=ws, agent=agent, name=f"{title} schedule {n}",
                             trigger_type="scheduled", config={"cron": "0 8 * * 1-5", "timezone": "UTC"})
    TriggerFiring.objects.create(trigger=trigger, source=f"api:{title}", outcome="skipped", reason="filtered",
                                 dedupe_key=f"{tag}-{n}")
    MetricSample.objects.create(workspace=ws, name=f"{tag}_metric", value=1.0, ts=now)
    PipelineHandoff.objects.create(trigger=trigger, upstream_execution=execution, depth=1)
    api_key_issue(created_by=person, name=f"{title} key {n}", workspace=ws)
    webhook_endpoint_create(workspace=ws, slug=f"{tag}-hook-{n}", created_by=person)
    Session.objects.create(workspace=ws, agent=agent, created_by=person, title=f"{title} conversation {n}")
    WorkspaceMemory.objects.create(workspace=ws, agent=agent, content=f"{title} shared memory {n}", keywords=tag)
    MemoryConsent.objects.create(workspace=ws, user=person, personal=True)
    canary_version = AgentVersion.objects.create(agent=agent, version=2, goal="Try.", instructions="Try.",
                                                 action_level="automated")
    AgentCanary.objects.create(agent=agent, version=canary_version, base_version=agent.current_version, percent=10,
                               margin=0.1, min_runs=5, seed=n)
    Artifact.objects.create(workspace=ws, name=f"{title} notes {n}.txt", kind="text", content_type="text/plain",
                            size=1, sha256="0" * 64, version=1, storage_name=f"{ws.pk}/{tag}-{n}.txt",
                            created_by=person)
    Evaluation.objects.create(workspace=ws, agent=agent, version=agent.current_version, days=14)
    PromotionGate.objects.create(workspace=ws, min_rejections=0.5)
    TestSetPin.objects.create(agent=agent, execution_id=execution.pk, label="good", note=f"{title} pin {n}")
    PolicyBacktest.objects.create(workspace=ws, requested_by=person, days=14)
    return {"workspace": ws, "person": person, "agent": agent}


@pytest.fixture(scope="module")
def world(django_db_setup, django_db_blocker):
    """Built once for the module (tests/module_data.py): each test's writes roll back to it."""
    with rows_for_the_module(django_db_blocker):
        alpha = Organization.objects.create(name="Alpha org", slug="alpha")
        bravo = Organization.objects.create(name="Bravo org", slug="bravo")
        a, b = seed(org=alpha, tag="alpha", n=1), seed(org=bravo, tag="bravo", n=1)
        Group.objects.create(name="Bravo group")
        yield {"alpha": alpha, "bravo": bravo, "a": a, "b": b}


def _staff(username: str, organization=None, role=OrganizationMember.OrgRole.ADMIN) -> Client:
    user = User.objects.create_user(username=username, password="x", is_staff=True)
    user.user_permissions.set(Permission.objects.all())
    if organization is not None:
        OrganizationMember.objects.create(organization=organization, user=user, role=role)
    client = Client()
    client.force_login(user)
    client.user = user
    return client


@pytest.fixture
def alpha_staff(world) -> Client:
    return _staff("alpha_staff", world["alpha"])


@pytest.fixture
def root(world) -> Client:
    user = User.objects.create_superuser("root", "root@example.com", "x")
    client = Client()
    client.force_login(user)
    return client


def _request(client):
    request = RequestFactory().get("/admin/")
    request.user = client.user
    return request


def _rows(response) -> list:
    return list(response.context["cl"].result_list)


def _bravo_row(model, root_client, bravo_id):
    """A row of ``model`` the superuser sees that belongs to Bravo."""
    model_admin = admin.site._registry[model]
    for obj in model.objects.all():
        if model_admin.tenant_path and organization_id_of(obj, model_admin.tenant_path) == bravo_id:
            return obj
    if model is User:
        return User.objects.get(username="bravo_person_1")
    return None


def test_every_registered_admin_is_scoped():
    unscoped = [model._meta.label for model, model_admin in admin.site._registry.items()
                if not isinstance(model_admin, TenantScopedAdminMixin)]
    assert unscoped == []
    assert {Agent, Execution, Policy, ApprovalRequest, AuditLogEntry} <= set(REGISTERED)  # the registry was filled


@pytest.mark.parametrize("model", REGISTERED, ids=lambda model: model._meta.label)
def test_staff_see_only_their_organization(model, world, alpha_staff, root):
    model_admin = admin.site._registry[model]
    response = alpha_staff.get(_url(model))
    if model_admin.superuser_only():
        assert response.status_code == 403
        assert root.get(_url(model)).status_code == 200
        return
    assert response.status_code == 200
    page = response.content.decode().lower()
    assert "bravo" not in page  # rows, filters, facets, messages
    rows = _rows(response)
    assert rows, "Alpha has a row of every scoped model"
    everything = _rows(root.get(_url(model)))
    assert len(everything) > len(rows)  # the superuser sees Bravo's as well
    if model_admin.tenant_path:
        assert {organization_id_of(obj, model_admin.tenant_path) for obj in rows} == {world["alpha"].pk}
        assert world["bravo"].pk in {organization_id_of(obj, model_admin.tenant_path) for obj in everything}

    # Alpha's own object page (inlines, relation choices, read-only links) names no Bravo.
    own = alpha_staff.get(_url(model, "change", rows[0].pk))
    assert own.status_code == 200
    assert "bravo" not in own.content.decode().lower()

    # The add form, where there is one, offers none of Bravo's choices.
    add = alpha_staff.get(_url(model, "add"))
    assert add.status_code in (200, 403)  # 403: added elsewhere (API, engine) or by superusers only
    assert "bravo" not in add.content.decode().lower()

    # Searching for Bravo finds nothing, wherever the search looks.
    if model_admin.get_search_fields(None):
        assert _rows(alpha_staff.get(_url(model), {"q": "bravo"})) == []

    # Bravo's object URLs answer exactly as a missing object's: 404 (or 403 where
    # nobody may delete that kind of object, whichever object it is).
    bravo = _bravo_row(model, root, world["bravo"].pk)
    assert bravo is not None
    missing = uuid.uuid4() if isinstance(bravo.pk, uuid.UUID) else 987654321
    for view in ("change", "history", "delete"):
        status = alpha_staff.get(_url(model, view, bravo.pk)).status_code
        assert status == alpha_staff.get(_url(model, view, missing)).status_code, view
        assert status == (404 if view != "delete" or model_admin.has_delete_permission(_request(alpha_staff))
                          else 403), view
        assert root.get(_url(model, view, bravo.pk)).status_code in (200, 403), view  # 403: read-only models
    assert alpha_staff.post(_url(model, "delete", bravo.pk), {"post": "yes"}).status_code in (403, 404)
    assert model.objects.filter(pk=bravo.pk).exists()


def test_posting_another_organizations_id_is_refused(world, alpha_staff):
    bravo, bravo_ws = world["bravo"], world["b"]["workspace"]
    workspaces = Workspace.objects.count()
    response = alpha_staff.post(_url(Workspace, "add"), {
        "organization": bravo.pk, "name": "Sneaky", "slug": "sneaky", "status": "active", "time_zone": "UTC",
        "query_row_limit": 1000, "observation_byte_limit": 65536, "query_timeout_seconds": 30,
        "api_trigger_rate_limit_per_minute": 60,
        "memberships-TOTAL_FORMS": 0, "memberships-INITIAL_FORMS": 0})
    assert response.status_code == 200
    assert "organization" in response.context["adminform"].form.errors
    assert Workspace.objects.count() == workspaces

    policies = Policy.objects.count()
    response = alpha_staff.post(_url(Policy, "add"), {
        "organization": bravo.pk, "scope": "organization", "name": "Sneaky", "policy_type": "",
        "conditions": '{"expression": "cost.tokens > 5000"}', "enforcement": "warn", "enabled": "on"})
    assert response.status_code == 200
    assert "organization" in response.context["adminform"].form.errors
    assert Policy.objects.count() == policies

    response = alpha_staff.post(_url(LLMProvider, "add"), {
        "organization": bravo.pk, "provider_name": "sneaky", "tier_models": '{"fast": "openai/gpt-4o-mini"}',
        "priority": 1, "max_retries": 2, "timeout_seconds": 30, "rate_limit_rpm": 60, "enabled": "on"})
    assert "organization" in response.context["adminform"].form.errors
    assert not LLMProvider.objects.filter(provider_name="sneaky").exists()

    # Alpha's workspace, but a person of Bravo: refused on the person.
    response = alpha_staff.post(_url(Membership, "add"), {
        "workspace": world["a"]["workspace"].pk, "user": world["b"]["person"].pk, "role": "viewer"})
    assert "user" in response.context["adminform"].form.errors
    assert not Membership.objects.filter(user=world["b"]["person"], workspace=world["a"]["workspace"]).exists()

    # A new version of Bravo's agent, or a data source in Bravo's workspace.
    versions = AgentVersion.objects.count()
    response = alpha_staff.post(_url(AgentVersion, "add"), {
        "agent": world["b"]["agent"].pk, "goal": "x", "instructions": "y", "action_level": "read_only",
        "governance_level": "standard"})
    assert "agent" in response.context["adminform"].form.errors
    assert AgentVersion.objects.count() == versions
    response = alpha_staff.post(_url(DataSource, "add"), {
        "workspace": bravo_ws.pk, "name": "Sneaky", "type": "postgresql",
        "connection_config": '{"host": "localhost", "port": 5432, "database": "x"}', "credentials": "",
        "access_level": "read_only", "classifications": "{}"})
    assert "workspace" in response.context["adminform"].form.errors
    assert not DataSource.objects.filter(name="Sneaky").exists()


def test_the_same_form_saves_in_their_own_organization(world, alpha_staff):
    response = alpha_staff.post(_url(Policy, "add"), {
        "organization": world["alpha"].pk, "scope": "organization", "name": "Cap spend", "policy_type": "",
        "conditions": '{"expression": "cost.tokens > 5000"}', "enforcement": "warn", "enabled": "on"})
    assert response.status_code == 302, response.context["adminform"].form.errors
    assert Policy.objects.get(name="Cap spend").organization == world["alpha"]


def test_autocomplete_offers_only_their_organization(world, alpha_staff):
    def results(app_label, model_name, field_name, term):
        response = alpha_staff.get("/admin/autocomplete/", {
            "app_label": app_label, "model_name": model_name, "field_name": field_name, "term": term})
        assert response.status_code == 200
        return [row["text"] for row in response.json()["results"]]

    assert results("tenancy", "membership", "user", "bravo") == []
    assert "alpha_person_1" in results("tenancy", "membership", "user", "person")
    assert "bravo_person_1" not in results("tenancy", "membership", "user", "")
    assert results("agents", "agent", "workspace", "") == ["Alpha ws 1"]
    assert results("agents", "agentversion", "agent", "") == ["Alpha agent 1"]


def test_filtering_by_another_organizations_id_shows_nothing(world, alpha_staff):
    # (With one workspace to choose from, Django hides the filter and ignores its
    # parameter: the list shows Alpha's rows, never Bravo's.)
    bravo_ws = world["b"]["workspace"]
    for params in ({"workspace__id__exact": bravo_ws.pk}, {"workspace__organization__id__exact": world["bravo"].pk},
                   {"workspace__organization": world["bravo"].pk}):
        response = alpha_staff.get(_url(Agent), params)
        assert response.status_code in (200, 302)
        if response.status_code == 200:
            assert {agent.workspace.organization_id for agent in _rows(response)} <= {world["alpha"].pk}


def test_actions_cannot_reach_another_organizations_rows(world, alpha_staff):
    bravo_agent = world["b"]["agent"]
    alpha_staff.post(_url(Agent), {"action": "pause", "_selected_action": [bravo_agent.pk]})
    alpha_staff.post(_url(Notification), {"action": "delete_selected", "post": "yes",
                                          "_selected_action": list(Notification.objects.values_list("pk", flat=True))})
    bravo_agent.refresh_from_db()
    assert bravo_agent.status == Agent.Status.ACTIVE
    assert Notification.objects.filter(workspace__organization=world["bravo"]).count() == 1
    assert Notification.objects.filter(workspace__organization=world["alpha"]).count() == 0


def test_custom_admin_views_are_scoped_too(world, alpha_staff):
    bravo_source = DataSource.objects.get(name="Bravo source 1")
    response = alpha_staff.post(f"/admin/datasources/datasource/{bravo_source.pk}/refresh-schema/")
    assert response.status_code == 404


def test_recent_actions_show_only_objects_still_theirs(world, alpha_staff):
    user = alpha_staff.user
    for agent, name in ((world["a"]["agent"], "Alpha agent 1"), (world["b"]["agent"], "Bravo agent 1")):
        LogEntry.objects.create(user=user, content_type=ContentType.objects.get_for_model(Agent),
                                object_id=str(agent.pk), object_repr=name, action_flag=CHANGE, change_message="[]")
    page = alpha_staff.get("/admin/").content.decode()
    assert "Alpha agent 1" in page
    assert "Bravo agent 1" not in page  # e.g. after they stopped administering Bravo


def test_the_audit_list_shows_only_their_organizations_verdict(world, alpha_staff, root):
    page = alpha_staff.get(_url(AuditLogEntry)).content.decode()
    assert f"Audit trail of organization {world['alpha'].pk}:" in page
    assert f"Audit trail of organization {world['bravo'].pk}:" not in page
    assert f"Audit trail of organization {world['bravo'].pk}:" in root.get(_url(AuditLogEntry)).content.decode()


def test_the_audit_log_is_read_only_even_for_its_organizations_admin(world, alpha_staff):
    entry = AuditLogEntry.objects.filter(organization=world["alpha"]).first()
    assert alpha_staff.get(_url(AuditLogEntry, "change", entry.pk)).status_code == 200
    assert alpha_staff.post(_url(AuditLogEntry, "change", entry.pk), {"event_type": "x"}).status_code == 403
    assert alpha_staff.get(_url(AuditLogEntry, "delete", entry.pk)).status_code == 403
    assert alpha_staff.get(_url(AuditLogEntry, "add")).status_code == 403


def test_people_are_visible_to_their_organization_admin_but_not_editable(world, alpha_staff):
    person = world["a"]["person"]
    page = alpha_staff.get(_url(User, "change", person.pk))
    assert page.status_code == 200
    assert b'name="username"' not in page.content and b"is_superuser" not in page.content
    assert alpha_staff.post(_url(User, "change", person.pk), {"username": "renamed"}).status_code == 403
    assert alpha_staff.get(f"/admin/auth/user/{person.pk}/password/").status_code == 403


@pytest.mark.parametrize("role", [None, OrganizationMember.OrgRole.MEMBER])
def test_staff_who_administer_no_organization_see_nothing(world, role):
    client = _staff("lonely", world["alpha"] if role else None, role=role or OrganizationMember.OrgRole.MEMBER)
    index = client.get("/admin/")
    assert index.status_code == 200
    assert index.context["app_list"] == []
    for model in REGISTERED:
        assert client.get(_url(model)).status_code == 403, model


def test_the_superuser_sees_both_organizations(world, root):
    names = {agent.name for agent in _rows(root.get(_url(Agent)))}
    assert names == {"Alpha agent 1", "Bravo agent 1"}
    assert root.get(_url(Agent, "change", world["b"]["agent"].pk)).status_code == 200


def test_a_missing_object_is_404_for_everyone(world, root):
    assert root.get(_url(Workspace, "change", 999999)).status_code == 404


def test_changelist_queries_do_not_grow_with_rows(world, alpha_staff, root):
    """Every change list, for a staff user and a superuser, with one and with four rows
    of each kind in Alpha: the same number of queries."""
    def counts() -> dict[str, tuple[int, int]]:
        result = {}
        for model in REGISTERED:
            pair = []
            for client in (alpha_staff, root):
                with CaptureQueriesContext(connection) as queries:
                    assert client.get(_url(model)).status_code in (200, 403)
                pair.append(len(queries))
            result[model._meta.label] = tuple(pair)
        return result

    before = counts()
    for n in (2, 3, 4):
        seed(org=world["alpha"], tag="alpha", n=n)
    after = counts()
    assert {label: (before[label], after[label]) for label in before if before[label] != after[label]} == {}


def test_the_organization_admin_group_grants_what_the_scoped_admin_allows(world):
    call_command("admin_group")
    call_command("admin_group")  # safe to run twice
    group = Group.objects.get(name="Organization admins")
    codenames = set(group.permissions.values_list("content_type__app_label", "codename"))
    assert ("agents", "change_agent") in codenames and ("governance", "add_policy") in codenames
    assert ("auth", "view_user") in codenames and ("auth", "change_user") not in codenames
    assert not {code for code in codenames if code[0] == "django_celery_beat"}
    assert ("auth", "change_group") not in codenames and ("tenancy", "view_accesstoken") not in codenames

    user = User.objects.create_user(username="grouped", password="x", is_staff=True)
    user.groups.add(group)
    OrganizationMember.objects.create(organization=world["alpha"], user=user, role=OrganizationMember.OrgRole.ADMIN)
    client = Client()
    client.force_login(user)
    assert client.get(_url(Policy)).status_code == 200
    assert client.get(_url(Group)).status_code == 403


def test_forms_explain_themselves_and_never_show_a_secret(world, root):
    provider = LLMProvider.objects.get(provider_name="alpha-1")
    provider.api_key_encrypted = encrypt_text("sk-secret-123")
    provider.save(update_fields=["api_key_encrypted"])
    page = root.get(_url(LLMProvider, "change", provider.pk)).content.decode()
    assert "sk-secret-123" not in page and "never shown again" in page
    assert "the lowest number is tried first" in page
    policy_page = root.get(_url(Policy, "add")).content.decode()
    assert "Require approval pauses the run" in policy_page
    assert "River checks it before each action" in policy_page
    agent_page = root.get(_url(Agent, "change", world["a"]["agent"].pk)).content.decode()
    assert "How people will recognise the agent" in agent_page
    assert "How far the agent may act on its own" in root.get(_url(AgentVersion, "add")).content.decode()
    assert "never shown again" in root.get(_url(DataSource, "add")).content.decode()

    # A duplicate provider name is explained on the field, not as a database error.
    response = root.post(_url(LLMProvider, "add"), {
        "organization": world["alpha"].pk, "provider_name": "alpha-1", "tier_models": "{}",
        "priority": 1, "max_retries": 2, "timeout_seconds": 30, "rate_limit_rpm": 60, "enabled": "on"})
    assert response.context["adminform"].form.errors["provider_name"] == [
        "This organization already has a provider with this name. Choose another name, or edit the existing "
        "provider."]


def test_the_saved_object_is_checked_even_when_a_choice_was_not_scoped(world):
    """The last line of defence: a form whose relation choices were not narrowed (a
    custom field, a future form) still cannot save into another organization."""
    from django import forms

    from tenancy.admin_scoping import NOT_YOURS, _tenant_checked

    class PlainForm(forms.ModelForm):
        class Meta:
            model = Notification
            fields = ["workspace", "user", "kind", "title"]

    alpha_only = frozenset({world["alpha"].pk})
    checked = _tenant_checked(PlainForm, path="workspace__organization", organization_ids=alpha_only)
    data = {"user": world["a"]["person"].pk, "kind": "note", "title": "Hello"}
    assert PlainForm(data={**data, "workspace": world["b"]["workspace"].pk}).is_valid()  # unscoped: accepted
    form = checked(data={**data, "workspace": world["b"]["workspace"].pk})
    assert not form.is_valid()
    assert form.errors["workspace"] == [NOT_YOURS]
    assert checked(data={**data, "workspace": world["a"]["workspace"].pk}).is_valid()
