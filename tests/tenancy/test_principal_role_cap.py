"""A trigger's service identity holds its role only up to its responsible person's
current role in the workspace, and nothing once that person is gone: read live, the same
through ``workspace_roles`` and through the batched ``role_annotations``/``roles_annotated``."""

import pytest

from tenancy.models import Membership, OrganizationMember, Workspace
from tenancy.selectors import role_annotations, roles_annotated, workspace_permissions, workspace_roles
from tenancy.services import service_principal_create

pytestmark = pytest.mark.django_db


def _annotated_roles(*, user, workspace) -> list[str]:
    row = Workspace.objects.annotate(**role_annotations(
        user_id=user.pk, workspace_ref="pk", organization_ref="organization_id")).get(pk=workspace.pk)
    return roles_annotated(row)


def _both(*, user, workspace) -> tuple[list[str], list[str]]:
    return workspace_roles(user=user, workspace=workspace), _annotated_roles(user=user, workspace=workspace)


@pytest.fixture
def admin_identity(owner, workspace):
    """An identity with the admin role, created by the workspace admin ``owner``."""
    return service_principal_create(workspace=workspace, created_by=owner, label="Trigger A", role="admin")


def test_an_identity_holds_its_role_while_its_responsible_person_holds_as_much(admin_identity, workspace):
    assert _both(user=admin_identity.user, workspace=workspace) == (["admin"], ["admin"])
    assert "policy:create" in workspace_permissions(user=admin_identity.user, workspace=workspace)


@pytest.mark.parametrize(("new_role", "expected"), [("editor", ["editor"]), ("analyst", ["analyst"]),
                                                     ("viewer", ["viewer"])])
def test_demoting_the_responsible_person_caps_the_identity_at_once(admin_identity, owner, workspace, new_role,
                                                                   expected):
    Membership.objects.filter(user=owner, workspace=workspace).update(role=new_role)
    assert _both(user=admin_identity.user, workspace=workspace) == (expected, expected)
    assert "policy:create" not in workspace_permissions(user=admin_identity.user, workspace=workspace)


def _remove(owner, workspace):
    Membership.objects.filter(user=owner, workspace=workspace).delete()


def _deactivate(owner, workspace):
    owner.is_active = False
    owner.save(update_fields=["is_active"])


def _delete(owner, workspace):
    owner.delete()


@pytest.mark.parametrize("gone", [_remove, _deactivate, _delete], ids=["removed", "deactivated", "deleted"])
def test_an_identity_whose_responsible_person_is_gone_holds_no_role(admin_identity, owner, workspace, gone):
    gone(owner, workspace)
    assert _both(user=admin_identity.user, workspace=workspace) == ([], [])
    assert workspace_permissions(user=admin_identity.user, workspace=workspace) == frozenset()


def test_a_responsible_org_admin_lends_every_workspace_role(workspace, org_admin):
    identity = service_principal_create(workspace=workspace, created_by=org_admin, label="T", role="admin")
    assert _both(user=identity.user, workspace=identity.workspace) == (["admin"], ["admin"])
    OrganizationMember.objects.filter(user=org_admin).update(role=OrganizationMember.OrgRole.MEMBER)
    assert _both(user=identity.user, workspace=workspace) == ([], [])


def test_a_deactivated_org_admin_lends_nothing(workspace, org_admin):
    identity = service_principal_create(workspace=workspace, created_by=org_admin, label="T", role="editor")
    org_admin.is_active = False
    org_admin.save(update_fields=["is_active"])
    assert _both(user=identity.user, workspace=workspace) == ([], [])


def test_a_person_is_not_capped(owner, editor, workspace):
    assert _both(user=owner, workspace=workspace) == (["admin"], ["admin"])
    assert _both(user=editor, workspace=workspace) == (["editor"], ["editor"])


def test_the_batched_read_stays_one_query(admin_identity, workspace, django_assert_num_queries):
    with django_assert_num_queries(1):
        assert _annotated_roles(user=admin_identity.user, workspace=workspace) == ["admin"]


@pytest.mark.parametrize(("change", "expected"), [
    (lambda owner, workspace: Membership.objects.filter(user=owner, workspace=workspace).update(role="analyst"),
     ["analyst"]),
    (lambda owner, workspace: Membership.objects.filter(user=owner, workspace=workspace).delete(), []),
], ids=["demoted", "removed"])
def test_a_claimed_run_of_a_trigger_reads_the_cap_at_its_segment(owner, workspace, change, expected):
    """The worker's claim loads a run with hand-written SQL; its request's roles are capped
    there too, as they are when the claim happens, not when the run was queued."""
    from executions.services.claim import execution_claim_load
    from executions.services.load import user_context_build
    from tests.factories import make_agent
    from triggers.services import trigger_create, trigger_fire

    agent = make_agent(workspace=workspace, owner=owner, name="Ops")
    trigger = trigger_create(actor=owner, workspace=workspace, agent=agent, name="Ops", trigger_type="api",
                             run_as_role="admin")
    firing = trigger_fire(trigger=trigger, payload={}, source="test")
    change(owner, workspace)
    _token, run = execution_claim_load(execution_id=firing.execution_id)
    context = user_context_build(execution=run)
    assert context.roles == expected and "policy:create" not in context.permissions
