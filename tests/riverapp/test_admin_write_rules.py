"""Records River writes itself are never added or edited in the admin. Memories of a
run and artifacts may still be deleted there (ViewAndDeleteTenantScopedAdmin); run
records, sessions, audit entries, approvals and workspace memories not even that
(ViewOnlyTenantScopedAdmin; docs/admin.md: run records stay read-only for everyone)."""

import pytest
from django.contrib import admin
from django.test import RequestFactory

from agents.models import AgentMemory, WorkspaceMemory
from artifacts.models import Artifact
from executions.models import Execution, ExecutionEvent, ExecutionStep, Session
from governance.models import ApprovalRequest, AuditLogEntry

admin.autodiscover()  # what riverapp.urls does before the admin serves a page

pytestmark = pytest.mark.django_db


@pytest.fixture
def superuser_request(django_user_model):
    request = RequestFactory().get("/admin/")
    request.user = django_user_model.objects.create_superuser(username="root", password="pw-root")
    return request


@pytest.mark.parametrize("model", [AgentMemory, Artifact])
def test_written_by_river_deletable_in_the_admin(model, superuser_request):
    model_admin = admin.site._registry[model]
    assert not model_admin.has_add_permission(superuser_request)
    assert not model_admin.has_change_permission(superuser_request)
    assert model_admin.has_delete_permission(superuser_request)


@pytest.mark.parametrize("model", [Execution, ExecutionStep, ExecutionEvent, Session, AuditLogEntry, ApprovalRequest,
                                   WorkspaceMemory])
def test_only_viewed_in_the_admin(model, superuser_request):
    model_admin = admin.site._registry[model]
    assert model_admin.has_view_permission(superuser_request)
    assert not model_admin.has_add_permission(superuser_request)
    assert not model_admin.has_change_permission(superuser_request)
    assert not model_admin.has_delete_permission(superuser_request)
