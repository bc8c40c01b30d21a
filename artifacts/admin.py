from django.contrib import admin

from artifacts import services
from artifacts.models import Artifact
from tenancy.admin_scoping import ViewAndDeleteTenantScopedAdmin


@admin.register(Artifact)
class ArtifactAdmin(ViewAndDeleteTenantScopedAdmin):
    """Read-only: files arrive through the API or a run. Deleting goes through the
    service, so the data source and the files go with the row."""

    tenant_path = "workspace__organization"

    list_display = ["name", "version", "kind", "size", "workspace", "data_source", "created_by", "created_at"]
    list_filter = ["kind", "workspace"]
    search_fields = ["name", "sha256"]
    list_select_related = ["workspace", "data_source", "created_by"]

    def get_readonly_fields(self, request, obj=None):
        return [field.name for field in Artifact._meta.fields]

    def delete_model(self, request, obj):
        services.artifact_delete(artifact=obj)

    def delete_queryset(self, request, queryset):
        for artifact in queryset:
            services.artifact_delete(artifact=artifact)
