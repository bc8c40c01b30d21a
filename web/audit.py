"""The audit page: the trail's entries with filters (who, what, which agent or run, when),
paginated, each entry's details as a structured view, downloads of the filtered entries
(CSV, JSON Lines: ``web.audit_export``), and for organization admins the chain's
verification verdict.

The verdict comes from ``governance.audit.audit_verify_progress``: each view checks at
most ``PROGRESS_BUDGET`` entries from where the last one stopped, so the page costs the
same on a trail of a thousand entries or of millions (docs/ui.md, "Audit").
"""

from __future__ import annotations

from django import forms
from django.core.handlers.asgi import ASGIRequest
from django.http import Http404, HttpResponse, StreamingHttpResponse
from django.shortcuts import render
from django.urls import path
from django.utils import timezone
from django.utils.text import slugify
from django.views.decorators.http import require_GET

from agents.selectors import agent_choices, agent_names
from common.days import day_window
from governance.audit import PROGRESS_BUDGET, audit_verify_progress
from governance.selectors import AuditFilters, audit_entries_filter
from tenancy.permissions import WORKSPACE_VIEW
from tenancy.selectors import is_org_admin
from web.audit_export import CONTENT_TYPES, export_chunks, export_chunks_async
from web.page_tools import page_login_required, paginate, query_without_page, require, workspace_and_permissions

# What each recorded action is called on the page.
ACTIONS = {
    "agent_version_deployed": "Agent version deployed",
    "agent_lifecycle_changed": "Agent activated, paused or archived",
    "agent_health_changed": "Agent health changed",
    "approval_requested": "Approval requested",
    "approval_approved": "Approved",
    "approval_edited": "Approved with edited arguments",
    "approval_rejected": "Rejected",
    "approval_auto_approved": "Approved automatically",
    "approval_expired": "Approval expired",
    "unknown_outcome_confirmed": "Unknown outcome answered (done or not done)",
    "approved_action_failed": "Approved action failed",
    "governance_decision": "Governance decision",
    "delegation_started": "Work handed to another agent",
    "prompt_injection_detected": "Prompt injection detected",
    "organization_deleted": "Organization deleted",
    "policy_created": "Policy created",
    "policy_updated": "Policy changed",
    "policy_deleted": "Policy deleted",
    "trigger_updated": "Trigger changed",
}


class AuditFilterForm(forms.Form):
    actor = forms.CharField(required=False, max_length=200, label="Who", help_text="Part of a name.")
    action = forms.ChoiceField(required=False, label="What")
    agent = forms.ChoiceField(required=False)
    run = forms.IntegerField(required=False, min_value=1, max_value=2**63 - 1, label="Run number")
    since = forms.DateField(required=False, label="From", widget=forms.DateInput(attrs={"type": "date"}))
    until = forms.DateField(required=False, label="To", widget=forms.DateInput(attrs={"type": "date"}))
    scope = forms.ChoiceField(required=False, choices=[("", "This workspace"), ("organization", "Whole organization")],
                              label="Entries of")

    def __init__(self, *args, agents=(), org_admin=False, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["action"].choices = [("", "Any action"), *ACTIONS.items()]
        self.fields["agent"].choices = [("", "Any agent"), *agents]
        if not org_admin:
            del self.fields["scope"]

    def clean(self):
        data = super().clean()
        if data.get("since") and data.get("until") and data["until"] < data["since"]:
            self.add_error("until", "The end comes before the start.")
        return data


def action_label(event_type: str) -> str:
    return ACTIONS.get(event_type, event_type.replace("_", " ").capitalize())


def _filtered(request, workspace, org_admin: bool):
    """(the bound filter form, the entries it selects or None when it has errors): the
    page and its downloads select the same entries for the same query."""
    form = AuditFilterForm(request.GET, agents=agent_choices(workspace=workspace), org_admin=org_admin)
    if not form.is_valid():
        return form, None
    data = form.cleaned_data
    whole_organization = data.get("scope") == "organization"
    since, until = day_window(since=data["since"], until=data["until"])
    return form, audit_entries_filter(user=request.user, filters=AuditFilters(
        organization_id=workspace.organization_id if whole_organization else None,
        workspace_id=None if whole_organization else workspace.pk,
        actor=data["actor"] or None, action=data["action"] or None, agent_id=data["agent"] or None,
        execution_id=data["run"] or None, since=since, until=until,
    ))


@page_login_required
@require_GET
def audit_page(request):
    workspace, _ = workspace_and_permissions(request)
    if workspace is None:
        return render(request, "audit/list.html", {"workspace": None, "form": AuditFilterForm()})
    org_admin = is_org_admin(user=request.user, organization_id=workspace.organization_id)
    form, rows = _filtered(request, workspace, org_admin)
    context = {"workspace": workspace, "form": form, "org_admin": org_admin, "actions": ACTIONS,
               "query": query_without_page(request), "budget": PROGRESS_BUDGET}
    if org_admin:
        context["progress"] = audit_verify_progress(organization_id=workspace.organization_id)
    if rows is None:
        return render(request, "audit/list.html", context, status=400)
    page = paginate(request, rows)
    ids = {entry.agent_id for entry in page.object_list if entry.agent_id}
    names = agent_names(organization_id=workspace.organization_id, agent_ids=ids)
    for entry in page.object_list:
        entry.action_label = action_label(entry.event_type)
        entry.agent_name = names.get(entry.agent_id)
    context["page"] = page
    return render(request, "audit/list.html", context)


def _export_filename(workspace, *, fmt: str, whole_organization: bool) -> str:
    name = slugify(workspace.slug or workspace.name) or f"workspace-{workspace.pk}"
    scope = "-organization" if whole_organization else ""
    return f"river-audit-{name}{scope}-{timezone.localdate().isoformat()}.{fmt}"


@page_login_required
@require_GET
def audit_export(request, fmt: str):
    """The entries the audit page shows for the same query, every page of them, as a
    download (``web.audit_export``): the same filters, the same tenant scope
    (``audit_entries_filter``), for whoever may view the page."""
    workspace, granted = workspace_and_permissions(request)
    if workspace is None:
        raise Http404("No workspace to export the audit trail of.")
    require(granted, WORKSPACE_VIEW)
    org_admin = is_org_admin(user=request.user, organization_id=workspace.organization_id)
    form, rows = _filtered(request, workspace, org_admin)
    if rows is None:
        problems = "; ".join(f"{form[name].label if name in form.fields else 'Filters'}: {' '.join(errors)}"
                             for name, errors in form.errors.items())
        return HttpResponse(f"Nothing was exported: the filters have errors. {problems}", status=400,
                            content_type="text/plain; charset=utf-8")
    chunks = export_chunks(rows, organization_id=workspace.organization_id, fmt=fmt, labels=action_label)
    response = StreamingHttpResponse(export_chunks_async(chunks) if isinstance(request, ASGIRequest) else chunks,
                                     content_type=CONTENT_TYPES[fmt])
    filename = _export_filename(workspace, fmt=fmt, whole_organization=form.cleaned_data.get("scope") == "organization")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    response["Cache-Control"] = "no-store"
    return response


urlpatterns = [
    path("audit/", audit_page, name="audit"),
    path("audit/export.csv", audit_export, {"fmt": "csv"}, name="audit-export-csv"),
    path("audit/export.jsonl", audit_export, {"fmt": "jsonl"}, name="audit-export-jsonl"),
]
