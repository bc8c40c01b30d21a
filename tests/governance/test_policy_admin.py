"""The admin validates policies exactly like the API, and the audit trail is read-only there."""

import pytest
from django.contrib.admin.sites import site
from django.contrib.auth import get_user_model
from django.test import RequestFactory

from governance.admin import PolicyAdminForm
from governance.models import ApprovalRequest, AuditLogEntry, Policy, PolicyCounter


def _data(org, ws, **overrides):
    data = {
        "organization": org.pk,
        "workspace": ws.pk,
        "scope": "workspace",
        "name": "Admin policy",
        "description": "",
        "policy_type": "",
        "conditions": '{"expression": "tool.name IN [\'write_back\']"}',
        "enforcement": "block",
        "enabled": "on",
    }
    data.update(overrides)
    return data


def test_form_refuses_a_bad_condition_with_its_position(org, workspace):
    form = PolicyAdminForm(data=_data(org, workspace, conditions='{"expression": "tool.name IN [\'a\',"}'))
    assert not form.is_valid()
    assert form.errors["conditions"] == [
        "River cannot use this condition (position 18: expected a value, found end of expression). "
        'Write it as {"expression": "cost.tokens > 5000"}.'
    ]


def test_form_normalises_the_keyed_form_and_infers_the_type(org, workspace):
    form = PolicyAdminForm(data=_data(org, workspace, conditions='{"rows_gt": 10000, "table_classification": "pii"}'))
    assert form.is_valid(), form.errors
    policy = form.save()
    assert policy.conditions == {"expression": "rows > 10000 AND table.classification == 'pii'"}
    assert policy.policy_type == "data_export_limit"


def test_form_checks_scope_against_workspace(org, workspace, other_workspace):
    form = PolicyAdminForm(data=_data(org, workspace, workspace=""))
    assert not form.is_valid() and "workspace" in form.errors
    form = PolicyAdminForm(data=_data(org, workspace, workspace=other_workspace.pk))
    assert not form.is_valid() and "workspace" in form.errors
    form = PolicyAdminForm(data=_data(org, workspace, scope="organization"))
    assert not form.is_valid() and "workspace" in form.errors


def test_admin_save_and_delete_are_audited(org, workspace):
    admin_user = get_user_model().objects.create_superuser("root", "root@example.com", "pw")
    request = RequestFactory().post("/admin/")
    request.user = admin_user
    model_admin = site._registry[Policy]
    form = PolicyAdminForm(data=_data(org, workspace))
    assert form.is_valid(), form.errors
    policy = form.save(commit=False)
    model_admin.save_model(request, policy, form, change=False)
    assert policy.created_by == admin_user
    model_admin.delete_model(request, policy)
    events = list(AuditLogEntry.objects.order_by("id").values_list("event_type", flat=True))
    assert events == ["policy_created", "policy_deleted"]
    assert not Policy.objects.exists()


@pytest.mark.parametrize("model", [AuditLogEntry, ApprovalRequest, PolicyCounter])
def test_read_only_models(db, model):
    request = RequestFactory().get("/admin/")
    request.user = get_user_model().objects.create_superuser("root2", "root2@example.com", "pw")
    model_admin = site._registry[model]
    assert not model_admin.has_add_permission(request)
    assert not model_admin.has_change_permission(request)
    assert not model_admin.has_delete_permission(request)
