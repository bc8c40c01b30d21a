"""Pages of governance policies: the list of the policies binding the workspace, a form
to create or edit one (a condition builder beside the raw expression), enabling or
disabling it, deleting it after a confirm step, and its history of changes from the
audit trail.

Every write goes through ``governance.services`` (the API's services), so each change is
validated and audited exactly as over ``/api/v1/policies/``. Two read-only JSON
endpoints serve the form's script: ``policies/validate`` (the services' own validator,
so the errors are the API's) and ``policies/test`` (the draft policy against the recorded
tool calls of a recent run, decided by the checker the gate uses, without counting a
rate-limit call). Only members holding ``policy:create`` in the workspace see these
pages; others get 403, and a policy of another workspace is a 404.
"""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.http import Http404, JsonResponse
from django.shortcuts import redirect, render
from django.urls import path
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from agents.selectors import agent_choices
from datasources.identifiers import identifier_key, policy_name_key
from datasources.selectors import data_sources_in_workspace
from executions.selectors import execution_get_for_user, execution_tool_calls, executions_recent
from governance import checker
from governance.models import Policy
from governance.selectors import policies_for_workspace, policy_get_for_user, policy_history
from governance.services import policy_create, policy_delete, policy_update, policy_validate
from rivercore import limits
from rivercore.errors import InvalidInput, RiverError
from rivercore.tools import all_tools, get_tool
from rivercore.types.agents import MAX_REQUIRED_APPROVALS
from rivercore.types.datasources import TableInfo
from rivercore.types.governance import CallFacts, Enforcement, GovernancePolicySpec, PolicyScope, PolicyType
from tenancy.permissions import POLICY_CREATE
from tenancy.selectors import workspace_permissions
from web.page_tools import errors_onto_form, or_404, page_login_required, paginate, require, workspace_and_permissions

RECENT_RUNS = 20
MAX_EXPRESSION = 4000

ENFORCEMENT_HELP = {
    "block": "Block: the call does not run.",
    "require_approval": "Require approval: the run pauses until someone approves the call.",
    "warn": "Warn: the call runs and the run records a warning.",
    "log_only": "Log only: the call runs; the match is logged.",
}


def _choices(enum) -> list[tuple[str, str]]:
    return [(member.value, member.value.replace("_", " ").capitalize()) for member in enum]


class PolicyForm(forms.Form):
    name = forms.CharField(max_length=limits.NAME, help_text="For example No writes to invoices at night.")
    description = forms.CharField(required=False, max_length=limits.DESCRIPTION,
                                  widget=forms.Textarea(attrs={"rows": 2}))
    expression = forms.CharField(
        max_length=MAX_EXPRESSION, label="Condition", strip=False,
        widget=forms.Textarea(attrs={"rows": 4, "spellcheck": "false", "autocomplete": "off",
                                     "class": "condition-expression", "data-policy-expression": ""}),
        help_text="The calls this policy matches, in River's condition language, for example "
                  "tool.name == 'write_back' AND args.table_name == 'invoices'. "
                  "Build it with the condition builder or type it.")
    policy_type = forms.ChoiceField(
        required=False, choices=[("", "Inferred from the condition")] + _choices(PolicyType), label="Policy type",
        help_text="When it is checked: before a tool call (most types), before a model call (budget) or after "
                  "a query (data export limit).")
    enforcement = forms.ChoiceField(choices=_choices(Enforcement), initial=Enforcement.BLOCK.value,
                                    help_text=" ".join(ENFORCEMENT_HELP.values()))
    enabled = forms.BooleanField(required=False, initial=True, label="Enabled")
    # Issue 29: what a require_approval policy asks of its approvers (docs/approvals.md).
    required_approvals = forms.IntegerField(
        required=False, min_value=1, max_value=MAX_REQUIRED_APPROVALS, initial=1, label="Approvers needed",
        help_text="How many different people must approve a call this policy pauses (the run's requester "
                  "never counts; one rejection ends it). 1 is one approver, as usual.")
    require_preview = forms.BooleanField(
        required=False, label="Approve only with a preview of the effect",
        help_text="A call whose effect River cannot preview (the rows it would change) can be rejected but "
                  "not approved.")


def _policies_workspace(request):
    """The current workspace, with a 403 for a member who may not manage policies."""
    workspace, granted = workspace_and_permissions(request)
    if workspace is not None:
        require(granted, POLICY_CREATE)
    return workspace


def _policy_for_manager(request, policy_id) -> Policy:
    """The policy (404 outside the user's workspaces), 403 unless they may manage policies
    in its workspace (organization policies: the service decides, an org admin)."""
    policy = or_404(policy_get_for_user, user=request.user, policy_id=policy_id)
    if policy.workspace is not None:
        require(workspace_permissions(user=request.user, workspace=policy.workspace), POLICY_CREATE)
    else:
        _policies_workspace(request)
    return policy


def catalog_tables(*, workspace) -> list[dict]:
    """The tables and columns of the workspace's data sources' catalogs, named as
    conditions compare them (see datasources.identifiers): what a condition builder
    offers, on this page and on an agent version's auto-approve conditions."""
    tables: dict[str, set[str]] = {}
    for source in data_sources_in_workspace(workspace_id=workspace.pk):
        for raw in source.schema_cache or []:
            table = TableInfo.model_validate(raw)
            tables.setdefault(policy_name_key(table.table_name), set()).update(
                identifier_key(column.column_name) for column in table.columns)
    return [{"name": name, "columns": sorted(columns)} for name, columns in sorted(tables.items())]


def _builder_context(request, workspace) -> dict:
    """What the condition builder offers: River's tools, the workspace's agents, the
    tables and columns of its data sources' catalogs, and recent runs for the test panel."""
    return {
        "builder": {
            "tools": sorted(all_tools()),
            "agents": [{"id": value, "name": label} for value, label in agent_choices(workspace=workspace)],
            "tables": catalog_tables(workspace=workspace),
            "action_levels": sorted(checker.ACTION_LEVELS),
            "days": list(checker.WEEKDAYS),
        },
        "recent_runs": executions_recent(user=request.user, workspace=workspace, limit=RECENT_RUNS),
    }


# --- the list ---------------------------------------------------------------------------


@page_login_required
@require_GET
def policies_list(request):
    workspace = _policies_workspace(request)
    page = None
    if workspace is not None:
        page = paginate(request, policies_for_workspace(user=request.user, workspace_id=workspace.pk))
    return render(request, "policies/list.html", {"workspace": workspace, "page": page,
                                                  "enforcement_help": ENFORCEMENT_HELP})


# --- creating and editing ---------------------------------------------------------------

FIELD_MAP = {"conditions": "expression"}


def _error_onto_form(form, exc: RiverError) -> None:
    """The service's error next to the field; a condition's position and reason repeat
    its message, so only the message is shown."""
    details = exc.details if isinstance(exc.details, dict) else {}
    trimmed = {key: value for key, value in details.items() if key not in ("position", "reason")}
    errors_onto_form(form, InvalidInput(exc.message, details=trimmed), FIELD_MAP)


def _approval_fields(data: dict) -> dict:
    """The form's approval settings, checked by the services with the API's messages
    (more than one approver only for a require_approval policy, at the field)."""
    return {"required_approvals": data["required_approvals"] or 1, "require_preview": data["require_preview"]}


@page_login_required
@require_http_methods(["GET", "POST"])
def policy_new(request):
    workspace = _policies_workspace(request)
    if workspace is None:
        raise Http404("Choose a workspace first.")
    form = PolicyForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            policy = policy_create(
                actor=request.user, scope=PolicyScope.WORKSPACE.value, workspace_id=workspace.pk,
                name=data["name"], description=data["description"], conditions={"expression": data["expression"]},
                policy_type=data["policy_type"] or None, enforcement=data["enforcement"], enabled=data["enabled"],
                **_approval_fields(data))
        except RiverError as exc:
            _error_onto_form(form, exc)
        else:
            messages.success(request, f"Policy {policy.name} is saved and applies to the next call it matches.")
            return redirect("policy-page", policy_id=policy.pk)
    status = 400 if request.method == "POST" else 200
    return render(request, "policies/form.html", {"form": form, "workspace": workspace, "policy": None,
                                                  **_builder_context(request, workspace)}, status=status)


def _inferred_type(policy: Policy) -> str | None:
    """The type the policy's condition implies; the form shows "inferred" when the stored
    type is that one, so a new condition re-infers it (as a PATCH without a type does)."""
    try:
        return policy_validate(conditions=policy.conditions).policy_type.value
    except RiverError:
        return None


@page_login_required
@require_http_methods(["GET", "POST"])
def policy_page(request, policy_id):
    """A policy's form (its fields, the builder and the test panel) and its history."""
    policy = _policy_for_manager(request, policy_id)
    workspace = policy.workspace or _policies_workspace(request)
    if workspace is None:
        raise Http404("Choose a workspace first.")
    initial = {"name": policy.name, "description": policy.description, "enforcement": policy.enforcement,
               "expression": (policy.conditions or {}).get("expression", ""), "enabled": policy.enabled,
               "policy_type": "" if _inferred_type(policy) == policy.policy_type else policy.policy_type,
               "required_approvals": policy.required_approvals, "require_preview": policy.require_preview}
    form = PolicyForm(request.POST or None, initial=initial)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            policy = policy_update(
                actor=request.user, policy_id=policy.pk, name=data["name"], description=data["description"],
                conditions={"expression": data["expression"]}, policy_type=data["policy_type"] or None,
                enforcement=data["enforcement"], enabled=data["enabled"], **_approval_fields(data))
        except RiverError as exc:
            _error_onto_form(form, exc)
        else:
            messages.success(request, f"Policy {policy.name} is saved.")
            return redirect("policy-page", policy_id=policy.pk)
    status = 400 if request.method == "POST" else 200
    return render(request, "policies/form.html", {
        "form": form, "workspace": workspace, "policy": policy,
        "history": paginate(request, policy_history(user=request.user, policy_id=policy.pk)),
        **_builder_context(request, workspace),
    }, status=status)


@page_login_required
@require_POST
def policy_enabled(request, policy_id):
    policy = _policy_for_manager(request, policy_id)
    try:
        policy = policy_update(actor=request.user, policy_id=policy.pk, enabled=request.POST.get("enabled") == "1")
    except RiverError as exc:
        messages.error(request, f"Nothing changed: {exc.message}")
    else:
        messages.success(request, f"{policy.name} is {'enabled' if policy.enabled else 'disabled'}.")
    return redirect("policies")


@page_login_required
@require_http_methods(["GET", "POST"])
def policy_delete_page(request, policy_id):
    """GET asks to confirm; POST deletes (``DELETE /api/v1/policies/{id}/``'s rules, audited)."""
    policy = _policy_for_manager(request, policy_id)
    if request.method == "GET":
        return render(request, "policies/delete.html", {"policy": policy})
    name = policy.name
    try:
        policy_delete(actor=request.user, policy_id=policy.pk)
    except RiverError as exc:
        messages.error(request, f"The policy was not deleted: {exc.message}")
        return redirect("policy-page", policy_id=policy.pk)
    messages.success(request, f"Policy {name} is deleted. Its history stays in the audit trail.")
    return redirect("policies")


# --- the form's JSON endpoints ------------------------------------------------------------


def _draft(request) -> tuple[str, str | None]:
    expression = request.GET.get("expression", "")
    if len(expression) > MAX_EXPRESSION:
        raise InvalidInput("Condition too long.",
                           details={"conditions": [f"Ensure this field has no more than {MAX_EXPRESSION} characters."]})
    return expression, request.GET.get("policy_type") or None


def error_json(exc: RiverError) -> JsonResponse:
    """The API's error body (``common.api.exception_handler``), beside ``valid``."""
    error = {"code": exc.code, "message": exc.message, "details": exc.details or {}}
    return JsonResponse({"valid": False, "error": error}, status=exc.status_code)


@page_login_required
@require_GET
def policy_validate_json(request):
    """Validate a draft condition with the services' validator (the API's errors)."""
    _policies_workspace(request)
    try:
        expression, policy_type = _draft(request)
        shape = policy_validate(conditions={"expression": expression}, policy_type=policy_type)
    except RiverError as exc:
        return error_json(exc)
    return JsonResponse({"valid": True, "policy_type": shape.policy_type.value})


@page_login_required
@require_GET
def policy_test_json(request):
    """The draft policy against one recent run's recorded tool calls: which it matches.

    Each call is decided by ``governance.checker.check_tool_call`` with the draft as the
    only policy, at the time the call was recorded, without consuming a rate-limit call.
    Data export limits are checked after a query, on its result, so they are reported as
    not testable here rather than guessed."""
    workspace = _policies_workspace(request)
    if workspace is None:
        raise Http404("Choose a workspace first.")
    try:
        expression, policy_type = _draft(request)
        shape = policy_validate(conditions={"expression": expression}, policy_type=policy_type)
        enforcement = Enforcement(request.GET.get("enforcement") or Enforcement.BLOCK.value)
    except ValueError:
        return error_json(InvalidInput("Invalid enforcement.", details={"enforcement": ["Choose an enforcement."]}))
    except RiverError as exc:
        return error_json(exc)
    run = or_404(execution_get_for_user, user=request.user, execution_id=request.GET.get("run") or "")
    if run.workspace_id != workspace.pk:
        raise Http404("Run not found.")
    if shape.policy_type == PolicyType.DATA_EXPORT_LIMIT:
        return JsonResponse({"valid": True, "policy_type": shape.policy_type.value, "calls": [],
                             "note": "Data export limits are checked on a query's result, after it ran; "
                                     "this panel tests the calls before they run."})
    spec = GovernancePolicySpec(policy_id=None, name="Draft policy", scope=PolicyScope.WORKSPACE.value,
                                policy_type=shape.policy_type.value, conditions=shape.conditions,
                                enforcement=enforcement.value)
    calls = []
    for step in execution_tool_calls(execution=run):
        tool = get_tool(step.tool_name)
        facts = CallFacts(
            tool_name=step.tool_name, tool_category=step.tool_category or (tool.category.value if tool else ""),
            writes=bool(tool.writes) if tool else True, arguments=step.input if isinstance(step.input, dict) else {},
            action_level=run.agent_version.action_level, policies=[spec], org_id=workspace.organization_id,
            workspace_id=workspace.pk, agent_id=str(run.agent_id), execution_id=run.pk)
        result = checker.check_tool_call(facts, now=step.created_at, count=False)
        matched = any(match.policy_id is None for match in result.matched)
        calls.append({"step": step.step_number, "tool": step.tool_name, "matched": matched,
                      "decision": result.decision.value, "reason": result.reason,
                      "recorded_decision": step.governance_decision})
    return JsonResponse({"valid": True, "policy_type": shape.policy_type.value, "calls": calls,
                         "run": {"id": run.pk, "agent": run.agent.name}})


urlpatterns = [
    path("policies/", policies_list, name="policies"),
    path("policies/new/", policy_new, name="policy-new"),
    path("policies/validate", policy_validate_json, name="policy-validate"),
    path("policies/test", policy_test_json, name="policy-test"),
    path("policies/<str:policy_id>/", policy_page, name="policy-page"),
    path("policies/<str:policy_id>/enabled", policy_enabled, name="policy-enabled"),
    path("policies/<str:policy_id>/delete", policy_delete_page, name="policy-delete"),
]
