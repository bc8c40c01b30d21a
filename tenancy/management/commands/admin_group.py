"""Create or refresh the "Organization admins" group for the scoped Django admin.

Give a person admin access to their organization: make them staff, an organization
admin (OrganizationMember role "admin") and a member of this group (docs/admin.md).
The group grants Django's model permissions on every model the admin scopes by
organization, and only "view" on people; the admin classes still refuse what they
refuse everyone (editing run records, the audit log, ...). Safe to run again after an
upgrade: the group's permissions are replaced by the current set.
"""

from __future__ import annotations

from django.contrib import admin
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.contrib.contenttypes.models import ContentType
from django.core.management.base import BaseCommand

from tenancy.admin_scoping import TenantScopedAdminMixin

GROUP_NAME = "Organization admins"


def organization_admin_permissions() -> list[Permission]:
    user_model = get_user_model()
    wanted: list[Permission] = []
    admin.autodiscover()  # the registry is filled by the URLconf, which a command does not load
    for model, model_admin in admin.site._registry.items():
        if not isinstance(model_admin, TenantScopedAdminMixin) or model_admin.superuser_only():
            continue
        content_type = ContentType.objects.get_for_model(model)
        permissions = Permission.objects.filter(content_type=content_type)
        if model is user_model:
            permissions = permissions.filter(codename__startswith="view_")
        wanted.extend(permissions)
    return wanted


class Command(BaseCommand):
    help = 'Create or refresh the "Organization admins" group used with the scoped Django admin.'

    def handle(self, *args, **options):
        group, created = Group.objects.get_or_create(name=GROUP_NAME)
        permissions = organization_admin_permissions()
        group.permissions.set(permissions)
        verb = "Created" if created else "Refreshed"
        self.stdout.write(f'{verb} the group "{GROUP_NAME}" with {len(permissions)} permissions.')
