from django.contrib import admin, messages
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import GroupAdmin, UserAdmin
from django.contrib.auth.models import Group

from tenancy.admin_scoping import (
    ScopedInlineMixin,
    TenantScopedAdmin,
    TenantScopedAdminMixin,
    admin_organization_ids,
    users_of_organizations,
)
from tenancy.models import AccessToken, Membership, Organization, OrganizationMember, Workspace
from tenancy.services import token_revoke

User = get_user_model()


class OrganizationMemberInline(ScopedInlineMixin, admin.TabularInline):
    model = OrganizationMember
    extra = 0
    autocomplete_fields = ["user"]


class MembershipInline(ScopedInlineMixin, admin.TabularInline):
    model = Membership
    extra = 0
    autocomplete_fields = ["user"]


@admin.register(Organization)
class OrganizationAdmin(TenantScopedAdmin):
    """Organization admins edit their organization and its members; only a superuser
    creates or deletes an organization (deleting one deletes everything in it)."""

    tenant_path = "pk"
    list_display = ["name", "slug", "created_at"]
    search_fields = ["name", "slug"]
    prepopulated_fields = {"slug": ["name"]}
    inlines = [OrganizationMemberInline]

    def has_add_permission(self, request):
        return request.user.is_superuser and super().has_add_permission(request)

    def has_delete_permission(self, request, obj=None):
        return request.user.is_superuser and super().has_delete_permission(request, obj)


@admin.register(OrganizationMember)
class OrganizationMemberAdmin(TenantScopedAdmin):
    tenant_path = "organization"
    list_display = ["user", "organization", "role"]
    list_filter = ["role", "organization"]
    search_fields = ["user__username", "user__email", "organization__name"]
    autocomplete_fields = ["user", "organization"]


@admin.register(Workspace)
class WorkspaceAdmin(TenantScopedAdmin):
    tenant_path = "organization"
    list_display = ["name", "organization", "slug", "status", "time_zone", "allow_self_approval", "created_at"]
    list_filter = ["status", "organization", "allow_self_approval"]
    search_fields = ["name", "slug", "organization__name"]
    prepopulated_fields = {"slug": ["name"]}
    autocomplete_fields = ["organization"]
    inlines = [MembershipInline]


@admin.register(Membership)
class MembershipAdmin(TenantScopedAdmin):
    tenant_path = "workspace__organization"
    list_display = ["user", "workspace", "role", "created_at"]
    list_filter = ["role", "workspace__organization", "workspace"]
    search_fields = ["user__username", "user__email", "workspace__name"]
    autocomplete_fields = ["user", "workspace"]


@admin.register(AccessToken)
class AccessTokenAdmin(TenantScopedAdmin):
    """Tokens are issued by the API or ``manage.py issue_token`` (the secret is shown once there).

    The digest is never displayed; the admin can only rename and revoke. A token is a
    person's, whatever organizations they work in: superusers only (tenant_path None).
    """

    tenant_path = None

    list_display = ["name", "user", "kind", "prefix", "created_at", "expires_at", "revoked_at", "last_used_at"]
    list_filter = ["kind", ("revoked_at", admin.EmptyFieldListFilter), "expires_at"]
    search_fields = ["name", "prefix", "user__username"]
    fields = ["user", "name", "kind", "prefix", "created_at", "expires_at", "revoked_at", "last_used_at"]
    readonly_fields = ["user", "kind", "prefix", "created_at", "expires_at", "revoked_at", "last_used_at"]
    actions = ["revoke"]

    def has_add_permission(self, request):
        return False

    @admin.action(description="Revoke selected tokens")
    def revoke(self, request, queryset):
        for token in queryset:
            token_revoke(user=token.user, token_id=token.pk)
        self.message_user(request, f"Revoked {queryset.count()} token(s).", messages.SUCCESS)


# Django's own user and group admins, scoped. Groups carry permissions and belong to no
# organization: superusers only. People are shown to an organization admin when they
# belong to one of their organizations (so they can be picked as members, owners and
# recipients), read-only and without their permissions: editing a person who also works
# elsewhere, their password or their superuser flag is a superuser's job.
admin.site.unregister(User)
admin.site.unregister(Group)


@admin.register(User)
class RiverUserAdmin(TenantScopedAdminMixin, UserAdmin):
    staff_fieldsets = [(None, {"fields": ["username", "first_name", "last_name", "email", "is_active",
                                          "last_login", "date_joined"]})]

    def superuser_only(self) -> bool:
        return False

    def scope_queryset(self, request, queryset):
        return queryset.filter(pk__in=users_of_organizations(admin_organization_ids(request)).values("pk"))

    def get_fieldsets(self, request, obj=None):
        if request.user.is_superuser:
            return super().get_fieldsets(request, obj)
        return self.staff_fieldsets

    def get_list_filter(self, request):
        if request.user.is_superuser:
            return super().get_list_filter(request)
        return ["is_active"]  # groups belong to no organization

    def has_add_permission(self, request):
        return request.user.is_superuser and super().has_add_permission(request)

    def has_change_permission(self, request, obj=None):
        return request.user.is_superuser and super().has_change_permission(request, obj)

    def has_delete_permission(self, request, obj=None):
        return request.user.is_superuser and super().has_delete_permission(request, obj)


@admin.register(Group)
class RiverGroupAdmin(TenantScopedAdminMixin, GroupAdmin):
    tenant_path = None
