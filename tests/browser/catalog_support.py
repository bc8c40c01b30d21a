"""Helpers the catalog's browser tests share: a second organization's admin, and the
two screenshots (laptop and phone) every page gets."""

from __future__ import annotations

from django.contrib.auth import get_user_model

from tenancy.models import Membership, Organization, OrganizationMember, Workspace
from tenancy.permissions import Role
from tests.browser.conftest import axe_violations, screenshot

PHONE = {"width": 390, "height": 844}
LAPTOP = {"width": 1280, "height": 800}


def other_org_admin():
    """The admin of another organization (staff too): must see nothing of the demo's."""
    org = Organization.objects.create(name="Globex", slug="globex")
    workspace = Workspace.objects.create(organization=org, name="Elsewhere", slug="elsewhere")
    user = get_user_model().objects.create_user(username="globex-admin", password="pw-globex-admin-123",
                                                is_staff=True)
    OrganizationMember.objects.create(organization=org, user=user, role=OrganizationMember.OrgRole.ADMIN)
    Membership.objects.create(workspace=workspace, user=user, role=Role.ADMIN)
    return user


def check_and_capture(page, name: str) -> None:
    """No serious accessibility violation, and screenshots at 1280 and on a phone."""
    violations = axe_violations(page)
    assert violations == [], violations
    screenshot(page, name)
    page.set_viewport_size(PHONE)
    violations = axe_violations(page)
    assert violations == [], violations
    screenshot(page, f"{name}-phone")
    page.set_viewport_size(LAPTOP)
