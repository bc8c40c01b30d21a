"""The audit page: the trail's entries with filters (who, what, which agent or run, when),
paginated, and for organization admins the chain's verification verdict.

The verdict comes from ``governance.audit.audit_verify_progress``: each view checks at
most ``PROGRESS_BUDGET`` entries from where the last one stopped, so the page costs the
same on a trail of a thousand entries or of millions (docs/ui.md, "Audit").
"""

from __future__ import annotations

from django import forms
from django.shortcuts import render
from django.urls import path
from django.views.decorators.http import require_GET

from agents.selectors import agent_choices, agent_names
from common.days import day_window
from governance.audit import PROGRESS_BUDGET, audit_verify_progress
from governance.selectors import AuditFilters, audit_entries_filter
from tenancy.selectors import is_org_admin
from web.page_tools import page_login_required, paginate, query_without_page, workspace_and_permissions

# What each recorded action is called on the page.
ACTIONS = {
    "agent_version_deployed": "Agent version deployed",
    "agent_lifecycle_changed": "Agent activated, paused or archived",
    "agent_health_changed": "Agent health changed",
    "approval_requested": "Approval requested",
    "approval_auto_approved": "Approved automatically",
    "approval_expired": "Approval expired",
    "approved_action_failed": "Approved action failed",
    "governance_decision": "Governance decision",
    "delegation_started": "Work handed to another agent",
    "prompt_injection_detected": "Prompt injection detected",
    "organization_deleted": "Organization deleted",
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


@page_login_required
@require_GET
def audit_page(request):
    workspace, _ = workspace_and_permissions(request)
    if workspace is None:
        return render(request, "audit/list.html", {"workspace": None, "form": AuditFilterForm()})
    org_admin = is_org_admin(user=request.user, organization_id=workspace.organization_id)
    agents = agent_choices(workspace=workspace)
    form = AuditFilterForm(request.GET, agents=agents, org_admin=org_admin)
    context = {"workspace": workspace, "form": form, "org_admin": org_admin, "actions": ACTIONS,
               "query": query_without_page(request), "budget": PROGRESS_BUDGET}
    if org_admin:
        context["progress"] = audit_verify_progress(organization_id=workspace.organization_id)
    if not form.is_valid():
        return render(request, "audit/list.html", context, status=400)
    data = form.cleaned_data
    whole_organization = data.get("scope") == "organization"
    since, until = day_window(since=data["since"], until=data["until"])
    rows = audit_entries_filter(user=request.user, filters=AuditFilters(
        organization_id=workspace.organization_id if whole_organization else None,
        workspace_id=None if whole_organization else workspace.pk,
        actor=data["actor"] or None, action=data["action"] or None, agent_id=data["agent"] or None,
        execution_id=data["run"] or None, since=since, until=until,
    ))
    page = paginate(request, rows)
    ids = {entry.agent_id for entry in page.object_list if entry.agent_id}
    names = agent_names(organization_id=workspace.organization_id, agent_ids=ids)
    for entry in page.object_list:
        entry.action_label = ACTIONS.get(entry.event_type, entry.event_type.replace("_", " ").capitalize())
        entry.agent_name = names.get(entry.agent_id)
    context["page"] = page
    return render(request, "audit/list.html", context)


urlpatterns = [
    path("audit/", audit_page, name="audit"),
]
