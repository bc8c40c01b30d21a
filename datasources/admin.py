import json

from django import forms
from django.contrib import admin, messages
from django.http import HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.urls import path, reverse
from django.utils.html import format_html, format_html_join

from datasources import services
from datasources.models import DataSource
from datasources.types import LIMIT_RANGES, DataSourceChanges
from rivercore.errors import RiverError
from tenancy.admin_scoping import TenantScopedAdmin


class DataSourceForm(forms.ModelForm):
    """Credentials are a write-only field: never rendered, blank keeps what is stored."""

    credentials = forms.CharField(
        required=False,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password", "size": 80}),
        help_text='The login River uses, as JSON: {"user": "reporting", "password": "..."}. It is stored '
                  "encrypted and never shown again; leave blank to keep the stored login.",
    )

    class Meta:
        model = DataSource
        fields = [
            "workspace",
            "name",
            "description",
            "type",
            "connection_config",
            "access_level",
            "classifications",
            "query_row_limit",
            "observation_byte_limit",
            "query_timeout_seconds",
        ]
        help_texts = {
            "workspace": "The workspace whose agents may use this source.",
            "name": "How people and agents will recognise it, e.g. \"Orders warehouse\".",
            "description": "What is in it; agents read this to decide when to use it.",
            "type": "The kind of database.",
            "connection_config": 'Where the database is, without any password: for PostgreSQL {"host": '
                                 '"db.example.com", "port": 5432, "database": "sales"}; for SQLite {"path": '
                                 '"sales.db"}, a file in the workspace\'s folder.',
            "access_level": "Read only: agents may only read. Read and write: agents may also write back, "
                            "within their action level and policies.",
            "classifications": 'Optional labels for sensitive tables, e.g. {"customers": "pii"}. Policies can '
                               "use them, and sample values of labelled tables are never shown to a model.",
            "query_row_limit": "The most rows one query may return. Empty uses the workspace's setting.",
            "observation_byte_limit": "The most bytes of a result an agent is shown. Empty uses the "
                                      "workspace's setting.",
            "query_timeout_seconds": "How long one query may run. Empty uses the workspace's setting.",
        }

    def clean_credentials(self):
        raw = self.cleaned_data.get("credentials") or ""
        if not raw.strip():
            return None
        try:
            value = json.loads(raw)
        except ValueError:
            raise forms.ValidationError("Credentials must be a JSON object.") from None
        if not isinstance(value, dict):
            raise forms.ValidationError("Credentials must be a JSON object.")
        return value

    def clean(self):
        cleaned = super().clean()
        kind = cleaned.get("type") or (self.instance.type if self.instance.pk else None)
        if not kind:
            return cleaned
        try:
            workspace = cleaned.get("workspace") or (self.instance.workspace if self.instance.pk else None)
            if "connection_config" in cleaned and workspace is not None:
                config = services.connection_config_validate(
                    type=kind, connection_config=cleaned["connection_config"], workspace_id=workspace.pk
                )
                if kind == DataSource.Type.SQLITE:
                    services.sqlite_file_ensure(workspace_id=workspace.pk, path=config["path"], create=False)
                services.connection_host_check(type=kind, connection_config=config)
            credentials = cleaned.get("credentials")
            if credentials is not None or not self.instance.pk:
                services.credentials_validate(type=kind, credentials=credentials or {})
            if self.instance.pk and not self._errors:
                self.changes(current=self.instance)  # the checks of the value, shown on the form
        except RiverError as exc:
            for key, problems in (exc.details or {}).items():
                field = key.split(".", 1)[0]
                target = field if field in self.fields else None
                self.add_error(target, f"{key}: {'; '.join(problems)}")
            if not exc.details:
                self.add_error(None, exc.message)
        return cleaned

    def changes(self, *, current: DataSource) -> DataSourceChanges:
        """The fields this form changed on ``current``, as the update service takes them.
        The form shows the whole connection_config, so a key left out of it is removed."""
        data = self.cleaned_data
        changes = {}
        for field in ("name", "description", "type", "access_level", "classifications", *LIMIT_RANGES):
            if field in self.changed_data:
                changes[field] = data[field]
        if "connection_config" in self.changed_data:
            new_config = data["connection_config"] or {}
            removed = {key: None for key in (current.connection_config or {}) if key not in new_config}
            changes["connection_config"] = {**removed, **new_config}
        if data.get("credentials") is not None:
            changes["credentials"] = data["credentials"]
        return DataSourceChanges.model_validate(changes)


@admin.register(DataSource)
class DataSourceAdmin(TenantScopedAdmin):
    """Writes go through the services: credentials are encrypted, connection changes
    drop the cached schema. "Refresh schema" rediscovers it from the database."""

    tenant_path = "workspace__organization"
    form = DataSourceForm
    list_display = ["name", "workspace", "type", "access_level", "status", "has_credentials", "schema_discovered_at"]
    list_filter = ["type", "access_level", "status", "workspace__organization", "workspace"]
    search_fields = ["name", "description", "workspace__name"]
    readonly_fields = ["status", "status_message", "has_credentials", "schema_discovered_at", "schema_summary"]
    actions = ["refresh_schema", "test_connection"]
    change_form_template = "admin/datasources/datasource/change_form.html"

    def get_fieldsets(self, request, obj=None):
        main = [
            "workspace",
            "name",
            "description",
            "type",
            "connection_config",
            "credentials",
            "access_level",
            "classifications",
        ]
        if obj is None:
            return [(None, {"fields": main})]
        return [
            (None, {"fields": main}),
            ("State", {"fields": ["status", "status_message", "has_credentials", "schema_discovered_at"]}),
            ("Cached schema", {"fields": ["schema_summary"]}),
        ]

    @admin.display(boolean=True, description="Credentials")
    def has_credentials(self, obj):
        return obj.has_credentials

    @admin.display(description="Tables")
    def schema_summary(self, obj):
        tables = obj.schema_cache or []
        if not tables:
            return "Not discovered yet."
        rows = format_html_join(
            "",
            "<li><b>{}</b> ({} columns, ~{} rows)</li>",
            (
                (
                    t.get("table_name"),
                    len(t.get("columns") or []),
                    "?" if t.get("row_estimate") is None else t["row_estimate"],
                )
                for t in tables
            ),
        )
        return format_html("<ul>{}</ul>", rows)

    def save_model(self, request, obj, form, change):
        data = form.cleaned_data
        if not change:
            created = services.data_source_create(
                workspace=data["workspace"],
                name=data["name"],
                type=data["type"],
                connection_config=data["connection_config"],
                credentials=data.get("credentials") or {},
                description=data.get("description") or "",
                access_level=data["access_level"],
                classifications=data.get("classifications") or {},
                query_row_limit=data.get("query_row_limit"),
                observation_byte_limit=data.get("observation_byte_limit"),
                query_timeout_seconds=data.get("query_timeout_seconds"),
            )
            obj.pk = created.pk
            obj.credentials_encrypted = created.credentials_encrypted
            return
        current = DataSource.objects.get(pk=obj.pk)
        services.data_source_update(data_source=current, changes=form.changes(current=current))

    # --- schema refresh and connection test ------------------------------------------------
    def _refresh(self, request, source: DataSource) -> None:
        try:
            tables = services.data_source_discover(data_source=source)
        except RiverError as exc:
            self.message_user(request, f"{source}: {exc.message}", messages.ERROR)
        else:
            self.message_user(request, f"{source}: discovered {len(tables)} tables.", messages.SUCCESS)

    @admin.action(description="Refresh schema")
    def refresh_schema(self, request, queryset):
        for source in queryset:
            self._refresh(request, source)

    @admin.action(description="Test connection")
    def test_connection(self, request, queryset):
        for source in queryset:
            result = services.data_source_test(data_source=source)
            level = messages.SUCCESS if result.success else messages.ERROR
            self.message_user(request, f"{source}: {result.message} ({result.latency_ms} ms)", level)

    def get_urls(self):
        custom = [
            path(
                "<int:object_id>/refresh-schema/",
                self.admin_site.admin_view(self.refresh_schema_view),
                name="datasources_datasource_refresh_schema",
            )
        ]
        return custom + super().get_urls()

    def refresh_schema_view(self, request, object_id):
        source = get_object_or_404(self.get_queryset(request), pk=object_id)
        if request.method != "POST" or not self.has_change_permission(request, source):
            return HttpResponseRedirect(reverse("admin:datasources_datasource_change", args=[object_id]))
        self._refresh(request, source)
        return HttpResponseRedirect(reverse("admin:datasources_datasource_change", args=[object_id]))
