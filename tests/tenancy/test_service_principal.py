"""A trigger's service identity: never signs in, never holds a token, holds at most its
creator's role, and can never resolve an approval."""

import pytest
from django.test import Client

from common.secrets import secret_digest
from rivercore.errors import InvalidInput, PermissionDenied
from tenancy.models import AccessToken, Membership
from tenancy.services import run_as_role_check, service_principal_create, token_authenticate, token_issue

pytestmark = pytest.mark.django_db


def test_the_identity_cannot_sign_in_or_hold_a_token(workspace, owner):
    principal = service_principal_create(workspace=workspace, created_by=owner, label="Trigger x", role="analyst")
    user = principal.user
    assert user.is_active and not user.has_usable_password()
    assert not Client().login(username=user.username, password="")
    user.set_password("given-in-the-admin-by-mistake")
    user.save()
    assert not Client().login(username=user.username, password="given-in-the-admin-by-mistake")
    with pytest.raises(InvalidInput):
        token_issue(user=user)
    # Even a token row made behind River's back does not authenticate.
    plaintext = "rvr_abcdef123456_secret"
    AccessToken.objects.create(user=user, prefix="abcdef123456", digest=secret_digest(plaintext))
    assert token_authenticate(plaintext=plaintext) is None


@pytest.mark.parametrize(("creator_role", "asked", "allowed"), [
    ("editor", "editor", True), ("editor", "analyst", True), ("editor", "admin", False),
    ("analyst", "editor", False), ("admin", "admin", True), ("viewer", "analyst", False),
])
def test_the_role_never_exceeds_the_creators(workspace, django_user_model, creator_role, asked, allowed):
    creator = django_user_model.objects.create_user(username="c", password="x")
    Membership.objects.create(workspace=workspace, user=creator, role=creator_role)
    if allowed:
        run_as_role_check(actor=creator, workspace=workspace, role=asked)
    else:
        with pytest.raises(PermissionDenied) as raised:
            run_as_role_check(actor=creator, workspace=workspace, role=asked)
        assert "run_as_role" in raised.value.details


def test_an_org_admin_may_grant_admin_and_an_outsider_nothing(workspace, org_admin, outsider):
    run_as_role_check(actor=org_admin, workspace=workspace, role="admin")
    with pytest.raises(PermissionDenied):
        run_as_role_check(actor=outsider, workspace=workspace, role="viewer")
