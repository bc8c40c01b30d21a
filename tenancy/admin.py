from django.contrib import admin, messages

from tenancy.models import AccessToken, Membership, Organization, OrganizationMember, Workspace
from tenancy.services import token_revoke


class OrganizationMemberInline(admin.TabularInline):
    model = OrganizationMember
    extra = 0
    autocomplete_fields = ["user"]


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    autocomplete_fields = ["user"]


@admin.register(Organization)
class OrganizationAdmin(admin.ModelAdmin):
    list_display = ["name", "slug", "created_at"]
    search_fields = ["name", "slug"]
    prepopulated_fields = {"slug": ["name"]}
    inlines = [OrganizationMemberInline]


@admin.register(OrganizationMember)
class OrganizationMemberAdmin(admin.ModelAdmin):
    list_display = ["user", "organization", "role"]
    list_filter = ["role", "organization"]
    search_fields = ["user__username", "user__email", "organization__name"]
    autocomplete_fields = ["user", "organization"]


@admin.register(Workspace)
class WorkspaceAdmin(admin.ModelAdmin):
    list_display = ["name", "organization", "slug", "status", "time_zone", "allow_self_approval", "created_at"]
    list_filter = ["status", "organization", "allow_self_approval"]
    search_fields = ["name", "slug", "organization__name"]
    prepopulated_fields = {"slug": ["name"]}
    autocomplete_fields = ["organization"]
    inlines = [MembershipInline]


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    list_display = ["user", "workspace", "role", "created_at"]
    list_filter = ["role", "workspace__organization", "workspace"]
    search_fields = ["user__username", "user__email", "workspace__name"]
    autocomplete_fields = ["user", "workspace"]


@admin.register(AccessToken)
class AccessTokenAdmin(admin.ModelAdmin):
    """Tokens are issued by the API or ``manage.py issue_token`` (the secret is shown once there).

    The digest is never displayed; the admin can only rename and revoke.
    """

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
