"""Pages of data sources: the list with catalog search, adding one (with a connection
test right after), a source's page with its schema browser and sampled values, testing
or rediscovering it, editing it and deleting it (after a confirm step that names the
agents whose versions bind it).

Everything goes through the datasources services, so a page refuses what the API
refuses (a host on a private or link-local network, a SQLite file outside the
workspace's folder). A password is written, never shown: the form never fills it back
in. Sampled values are data from the customer's database: they are escaped like any
text and cut (``SAMPLE_VALUES`` per column, ``SAMPLE_CHARS`` each).
"""

from __future__ import annotations

import pydantic
from django import forms
from django.contrib import messages
from django.core.paginator import Paginator
from django.http import Http404
from django.shortcuts import redirect, render
from django.urls import path
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from agents.selectors import data_source_uses
from datasources.catalog import catalog_search
from datasources.models import DataSource
from datasources.selectors import (
    data_source_get_for_user,
    data_sources_for_user,
    data_sources_searchable,
    data_sources_with_table_count,
)
from datasources.services import (
    data_source_create,
    data_source_delete,
    data_source_discover,
    data_source_test,
    data_source_update,
)
from datasources.types import LIMIT_RANGES, DataSourceChanges
from rivercore import limits
from rivercore.errors import RiverError
from rivercore.types.datasources import TableInfo
from tenancy.permissions import DATA_SOURCE_CREATE, DATA_SOURCE_DELETE, DATA_SOURCE_UPDATE, DATA_SOURCE_VIEW
from tenancy.selectors import workspace_permissions
from web.page_tools import (
    errors_onto_form,
    or_404,
    page_login_required,
    paginate,
    query_without_page,
    require,
    workspace_and_permissions,
)

SEARCH_RESULTS = 20
TABLES_PER_PAGE = 20
SAMPLE_VALUES = 8
SAMPLE_CHARS = 60
SSL_MODES = ["", "disable", "allow", "prefer", "require", "verify-ca", "verify-full"]


@page_login_required
@require_GET
def data_sources_list(request):
    workspace, granted = workspace_and_permissions(request)
    query = (request.GET.get("q") or "").strip()[:200]
    page = search = None
    if workspace is not None:
        rows = data_sources_for_user(user=request.user, workspace_id=workspace.pk)
        page = paginate(request, data_sources_with_table_count(rows))
        if query:
            searched = data_sources_searchable(rows)
            search = catalog_search(data_sources=searched, query=query, top_k=SEARCH_RESULTS)
    return render(request, "datasources/list.html", {
        "workspace": workspace, "page": page, "q": query, "search": search,
        "query": query_without_page(request), "may_add": DATA_SOURCE_CREATE in granted,
    })


class DataSourceForm(forms.Form):
    """One form for every kind of database. A connection setting is required for its own
    kind (``REQUIRED_FOR``, what ``datasources.services`` checks), so its label never says
    "(optional)"; only the chosen kind's settings are checked when the form is sent."""

    REQUIRED_FOR = {DataSource.Type.POSTGRESQL: ("host", "database", "user"), DataSource.Type.SQLITE: ("path",)}

    name = forms.CharField(max_length=limits.NAME,
                           help_text="How agents and people will call it, for example Sales DB.")
    description = forms.CharField(required=False, max_length=limits.DESCRIPTION,
                                  widget=forms.Textarea(attrs={"rows": 2}),
                                  help_text="What is in it: agents read this to pick the right source.")
    type = forms.ChoiceField(choices=DataSource.Type.choices, widget=forms.RadioSelect, initial="postgresql",
                             label="Kind of database")
    host = forms.CharField(required=False, max_length=253, help_text="PostgreSQL: the server's name or address. "
                                                                     "Private and internal addresses are refused.")
    port = forms.IntegerField(required=False, min_value=1, max_value=65535, help_text="PostgreSQL: usually 5432.")
    database = forms.CharField(required=False, max_length=63, label="Database name")
    sslmode = forms.ChoiceField(required=False, choices=[(m, m or "default (prefer)") for m in SSL_MODES],
                                label="Encryption (sslmode)")
    user = forms.CharField(required=False, max_length=200, label="Login",
                           help_text="PostgreSQL: a login that may only read what agents need.")
    password = forms.CharField(required=False, max_length=1000, widget=forms.PasswordInput(render_value=False),
                               help_text="Stored encrypted; never shown again.")
    path = forms.CharField(required=False, max_length=1024, label="SQLite file",
                           help_text="SQLite: a file in this workspace's data folder, for example sales.sqlite3.")
    create_file = forms.BooleanField(required=False, label="Create an empty SQLite file if there is none")
    access_level = forms.ChoiceField(choices=DataSource.AccessLevel.choices, initial="read_only",
                                     widget=forms.RadioSelect, label="Agents may")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for names in self.REQUIRED_FOR.values():
            for name in names:
                self.fields[name].required = True

    def full_clean(self):
        chosen = self.data.get("type") if self.is_bound else None
        others = [self.fields[name] for kind, names in self.REQUIRED_FOR.items() if kind != chosen for name in names]
        for field in others:
            field.required = False
        try:
            super().full_clean()
        finally:
            for field in others:
                field.required = True

    def service_arguments(self) -> dict:
        data = self.cleaned_data
        if data["type"] == DataSource.Type.POSTGRESQL:
            config = {key: data[key] for key in ("host", "port", "database", "sslmode") if data[key]}
            credentials = {"user": data["user"], "password": data["password"]}
        else:
            config = {"path": data["path"]} if data["path"] else {}
            credentials = {}
        return {"name": data["name"], "description": data["description"], "type": data["type"],
                "connection_config": config, "credentials": credentials, "access_level": data["access_level"],
                "create_file": data["create_file"] and data["type"] == DataSource.Type.SQLITE}


FIELD_MAP = {"connection_config.host": "host", "connection_config.port": "port",
             "connection_config.database": "database", "connection_config.sslmode": "sslmode",
             "connection_config.path": "path", "credentials.user": "user", "credentials.password": "password",
             "credentials": "user", "connection_config": "host"}


@page_login_required
def data_source_new(request):
    workspace, granted = workspace_and_permissions(request)
    if workspace is None:
        raise Http404("You belong to no workspace.")
    require(granted, DATA_SOURCE_CREATE)
    form = DataSourceForm(request.POST or None)
    if request.method != "POST":
        return render(request, "datasources/new.html", {"form": form, "workspace": workspace})
    if form.is_valid():
        try:
            source = data_source_create(workspace=workspace, **form.service_arguments())
        except RiverError as exc:
            errors_onto_form(form, exc, FIELD_MAP)
        else:
            _tested(request, source, saved=True)
            return redirect("data-source-page", data_source_id=source.pk)
    return render(request, "datasources/new.html", {"form": form, "workspace": workspace}, status=400)


def _tested(request, source: DataSource, *, saved: bool) -> None:
    result = data_source_test(data_source=source)
    prefix = f"{source.name} is saved. " if saved else ""
    if result.success:
        messages.success(request, f"{prefix}Connection test passed in {result.latency_ms} ms: {result.message}")
    else:
        messages.error(request, f"{prefix}River could not connect: {result.message} Check the settings, then "
                                "test again.")


def _source_or_404(request, data_source_id) -> tuple[DataSource, frozenset[str]]:
    source = or_404(data_source_get_for_user, user=request.user, data_source_id=data_source_id)
    granted = workspace_permissions(user=request.user, workspace=source.workspace)
    require(granted, DATA_SOURCE_VIEW)
    return source, granted


def _tables(source: DataSource, needle: str) -> list[dict]:
    tables = []
    for raw in source.schema_cache or []:
        table = TableInfo.model_validate(raw)
        if needle and needle not in table.table_name.lower() and not any(
                needle in column.column_name.lower() for column in table.columns):
            continue
        columns = []
        for column in table.columns:
            samples = [value if len(value) <= SAMPLE_CHARS else value[:SAMPLE_CHARS - 1] + "…"
                       for value in column.sample_values[:SAMPLE_VALUES]]
            columns.append({"column": column, "samples": samples,
                            "more_samples": max(len(column.sample_values) - SAMPLE_VALUES, 0)})
        tables.append({"table": table, "columns": columns})
    return tables


@page_login_required
@require_GET
def data_source_page(request, data_source_id):
    source, granted = _source_or_404(request, data_source_id)
    needle = (request.GET.get("table") or "").strip().lower()[:200]
    tables = Paginator(_tables(source, needle), TABLES_PER_PAGE).get_page(request.GET.get("page"))
    config = dict(source.connection_config or {})
    return render(request, "datasources/detail.html", {
        "source": source, "page": tables, "query": query_without_page(request), "table_filter": needle,
        "config": config, "table_total": len(source.schema_cache or []),
        "classifications": source.classifications or {},
        "may_edit": DATA_SOURCE_UPDATE in granted, "may_delete": DATA_SOURCE_DELETE in granted,
    })


@require_POST
@page_login_required
def data_source_check(request, data_source_id):
    source, _ = _source_or_404(request, data_source_id)
    _tested(request, source, saved=False)
    return redirect("data-source-page", data_source_id=source.pk)


@require_POST
@page_login_required
def data_source_rediscover(request, data_source_id):
    source, _ = _source_or_404(request, data_source_id)
    try:
        tables = data_source_discover(data_source=source)
    except RiverError as exc:
        messages.error(request, f"The schema was not read: {exc.message}")
    else:
        messages.success(request, f"Schema read: {len(tables)} table{'s' if len(tables) != 1 else ''}.")
    return redirect("data-source-page", data_source_id=source.pk)


# --- editing and deleting ------------------------------------------------------------------


def _limit_field(name: str, label: str, unit: str) -> forms.IntegerField:
    low, high = LIMIT_RANGES[name]
    return forms.IntegerField(required=False, min_value=low, max_value=high, label=label,
                              help_text=f"{low:,} to {high:,} {unit}. Empty: the workspace's value.")


class DataSourceEditForm(DataSourceForm):
    """The add form for one existing source: its kind stays (the other kind's settings are
    not offered), the login and password are never filled in (empty keeps what is stored,
    a value replaces it), and the source's limits are editable. What it sends is the
    ``PATCH /api/v1/data-sources/{id}/`` body, checked by the same ``DataSourceChanges``
    and ``data_source_update``."""

    POSTGRESQL_FIELDS = ("host", "port", "database", "sslmode", "user", "password")
    SQLITE_FIELDS = ("path", "create_file")

    query_row_limit = _limit_field("query_row_limit", "Rows per query at most", "rows")
    observation_byte_limit = _limit_field("observation_byte_limit", "Bytes of a result the model reads at most",
                                          "bytes")
    query_timeout_seconds = _limit_field("query_timeout_seconds", "Query timeout (seconds)", "seconds")

    def __init__(self, *args, source: DataSource, **kwargs):
        self.source = source
        super().__init__(*args, initial=self._initial(source), **kwargs)
        del self.fields["type"]
        other_kind = self.SQLITE_FIELDS if source.type == DataSource.Type.POSTGRESQL else self.POSTGRESQL_FIELDS
        for name in other_kind:
            del self.fields[name]
        if source.type == DataSource.Type.POSTGRESQL:
            self.fields["user"].required = False
            self.fields["user"].help_text = "Empty: keep the stored login (never shown). A value replaces it."
            self.fields["password"].help_text = "Empty: keep the stored password (never shown). A value replaces it."
        workspace = source.workspace
        for name, default in (("query_row_limit", workspace.query_row_limit),
                              ("observation_byte_limit", workspace.observation_byte_limit),
                              ("query_timeout_seconds", workspace.query_timeout_seconds)):
            self.fields[name].help_text = self.fields[name].help_text.replace(
                "the workspace's value", f"the workspace's value ({default:,})")

    @staticmethod
    def _initial(source: DataSource) -> dict:
        config = source.connection_config or {}
        return {"name": source.name, "description": source.description, "access_level": source.access_level,
                **{key: config.get(key) for key in ("host", "port", "database", "sslmode", "path")},
                **{name: getattr(source, name) for name in LIMIT_RANGES}}

    def full_clean(self):
        forms.Form.full_clean(self)

    def changes(self) -> tuple[dict, bool]:
        """(the PATCH body, whether to create a missing SQLite file)."""
        data = self.cleaned_data
        values = {key: data[key] for key in ("name", "description", "access_level", *LIMIT_RANGES)}
        if self.source.type == DataSource.Type.POSTGRESQL:
            values["connection_config"] = {"host": data["host"], "port": data["port"], "database": data["database"],
                                           "sslmode": data["sslmode"] or None}
            replaced = {key: data[key] for key in ("user", "password") if data[key]}
            if replaced:
                values["credentials"] = replaced
            return values, False
        values["connection_config"] = {"path": data["path"]}
        return values, bool(data.get("create_file"))


def _source_for(request, data_source_id, permission: str) -> DataSource:
    source, granted = _source_or_404(request, data_source_id)
    require(granted, permission)
    return source


def _edit_saved(request, source: DataSource, form: DataSourceEditForm) -> DataSource | None:
    values, create_file = form.changes()
    try:
        changes = DataSourceChanges.model_validate(values)
        saved = data_source_update(data_source=source, changes=changes, create_file=create_file)
    except RiverError as exc:
        errors_onto_form(form, exc, FIELD_MAP)
    except pydantic.ValidationError:
        form.add_error(None, "Nothing was saved: a value has the wrong type.")
    else:
        return saved
    return None


@page_login_required
@require_http_methods(["GET", "POST"])
def data_source_edit(request, data_source_id):
    """GET shows the settings; POST applies them through ``data_source_update`` (the API's
    PATCH: the host policy is checked before anything connects). A changed connection is
    tested right after, like a new source."""
    source = _source_for(request, data_source_id, DATA_SOURCE_UPDATE)
    form = DataSourceEditForm(request.POST or None, source=source)
    if request.method == "POST":
        saved = _edit_saved(request, source, form) if form.is_valid() else None
        if saved is not None:
            if saved.status == DataSource.Status.UNTESTED:
                _tested(request, saved, saved=True)
            else:
                messages.success(request, f"{saved.name} is saved.")
            return redirect("data-source-page", data_source_id=saved.pk)
        source.refresh_from_db()
    return render(request, "datasources/edit.html", {"form": form, "source": source},
                  status=400 if request.method == "POST" else 200)


@page_login_required
@require_http_methods(["GET", "POST"])
def data_source_delete_page(request, data_source_id):
    """GET asks to confirm and names the agents whose versions bind the source; POST
    deletes it as ``DELETE /api/v1/data-sources/{id}/`` does: those versions lose it."""
    source = _source_for(request, data_source_id, DATA_SOURCE_DELETE)
    if request.method == "GET":
        return render(request, "datasources/delete.html", {"source": source,
                                                           "uses": data_source_uses(data_source=source)})
    name = source.name
    data_source_delete(data_source=source)
    messages.success(request, f"{name} is deleted.")
    return redirect("data-sources")


urlpatterns = [
    path("data-sources/", data_sources_list, name="data-sources"),
    path("data-sources/new/", data_source_new, name="data-source-new"),
    path("data-sources/<str:data_source_id>/", data_source_page, name="data-source-page"),
    path("data-sources/<str:data_source_id>/test", data_source_check, name="data-source-check"),
    path("data-sources/<str:data_source_id>/discover", data_source_rediscover, name="data-source-rediscover"),
    path("data-sources/<str:data_source_id>/edit", data_source_edit, name="data-source-edit"),
    path("data-sources/<str:data_source_id>/delete", data_source_delete_page, name="data-source-delete"),
]
