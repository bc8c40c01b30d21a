"""The API keys page (``/settings/api-keys``): the two kinds of secret River issues, each
listed, created (its secret shown once, on the answer to the POST, never again) and
revoked after a confirm step.

- **API keys** (``rtk_...``) call API triggers (``POST /api/v1/triggers/{id}/invoke``).
  Listed as ``GET /api/v1/api-keys/`` lists them, narrowed to the current workspace: its
  keys, for any member, and its organization's organization-wide keys, for that
  organization's admins. Issuing or revoking a workspace's key takes ``agent:create``
  there, an organization's key its admin (``triggers.selectors.api_key_get_manageable``,
  which the API's revoke uses too).
- **Personal access tokens** (``rvr_...``) sign a person in to the whole REST API. Each
  person sees and revokes only their own (``/api/v1/tokens/``'s rule).

Neither API writes an audit entry for issuing or revoking, so neither does this page.
"""

from __future__ import annotations

from datetime import datetime, time

from django import forms
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import Http404
from django.shortcuts import redirect, render
from django.urls import path
from django.utils import timezone
from django.utils.cache import add_never_cache_headers
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from rivercore import limits
from rivercore.errors import PermissionDenied as Refused
from rivercore.errors import RiverError
from tenancy.permissions import AGENT_CREATE
from tenancy.selectors import access_token_get_for_user, access_tokens_for_user, is_org_admin
from tenancy.services import token_issue, token_revoke
from triggers import apikeys
from triggers.selectors import api_key_get_manageable, api_keys_of_workspace
from web.page_tools import errors_onto_form, or_404, page_login_required, workspace_and_permissions

SCOPE_WORKSPACE = "workspace"
SCOPE_ORGANIZATION = "organization"


class ApiKeyForm(forms.Form):
    """``POST /api/v1/api-keys/``'s fields: a name, where the key serves, its own limit."""

    name = forms.CharField(max_length=100, help_text="Which system will hold it, for example Billing webhook relay.")
    scope = forms.ChoiceField(widget=forms.RadioSelect, label="Serves", initial=SCOPE_WORKSPACE)
    rate_limit_per_minute = forms.IntegerField(
        required=False, min_value=1, max_value=limits.RATE_LIMIT_RPM, label="Calls per minute at most",
        help_text="Empty: the workspace's setting.")

    def __init__(self, *args, workspace, organization_admin: bool, **kwargs):
        super().__init__(*args, **kwargs, prefix="key")
        choices = [(SCOPE_WORKSPACE, f"API triggers of {workspace.name}")]
        if organization_admin:
            choices.append((SCOPE_ORGANIZATION, f"API triggers of every workspace of {workspace.organization.name}"))
        self.fields["scope"].choices = choices


class TokenForm(forms.Form):
    """``POST /api/v1/tokens/``'s fields."""

    name = forms.CharField(max_length=100, help_text="Where you will use it, for example Reporting script.")
    expires_at = forms.DateField(required=False, label="Expires on", widget=forms.DateInput(attrs={"type": "date"}),
                                 help_text="Empty: it works until you revoke it.")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs, prefix="token")

    def clean_expires_at(self):
        day = self.cleaned_data["expires_at"]
        if day is None:
            return None
        moment = timezone.make_aware(datetime.combine(day, time.min))  # the day begins, in River's zone
        if moment <= timezone.now():
            raise forms.ValidationError("Must be in the future.")
        return moment


def _context(request, workspace, granted, *, key_form=None, token_form=None, issued=None) -> dict:
    organization_admin = workspace is not None and is_org_admin(user=request.user,
                                                                organization_id=workspace.organization_id)
    may_issue = workspace is not None and AGENT_CREATE in granted
    keys = list(api_keys_of_workspace(user=request.user, workspace=workspace)) if workspace is not None else []
    for key in keys:
        key.may_revoke = key.revoked_at is None and (organization_admin if key.workspace_id is None else may_issue)
    if workspace is not None and key_form is None:
        key_form = ApiKeyForm(workspace=workspace, organization_admin=organization_admin)
    return {
        "workspace": workspace, "keys": keys, "may_issue": may_issue or organization_admin,
        "key_form": key_form, "token_form": token_form or TokenForm(),
        "tokens": list(access_tokens_for_user(user=request.user)), "issued": issued,
    }


def _answer(request, context: dict, status: int = 200):
    response = render(request, "settings/api_keys.html", context, status=status)
    add_never_cache_headers(response)  # a new secret is in it, or may be next time
    return response


@page_login_required
@require_GET
def api_keys_page(request):
    workspace, granted = workspace_and_permissions(request)
    return _answer(request, _context(request, workspace, granted))


def _key_issued(request, workspace, granted, form: ApiKeyForm):
    data = form.cleaned_data
    target = {"workspace": workspace}
    if data["scope"] == SCOPE_ORGANIZATION:
        target = {"organization": workspace.organization}
    elif AGENT_CREATE not in granted:
        raise PermissionDenied("Your role in this workspace may not issue API keys.")
    try:
        return apikeys.api_key_issue(created_by=request.user, name=data["name"],
                                     rate_limit_per_minute=data["rate_limit_per_minute"], **target)
    except RiverError as exc:
        errors_onto_form(form, exc)
        return None


@page_login_required
@require_POST
def api_key_create(request):
    """Issue an API key as ``POST /api/v1/api-keys/`` does; the answer shows it once."""
    workspace, granted = workspace_and_permissions(request)
    if workspace is None:
        raise Http404("You belong to no workspace.")
    organization_admin = is_org_admin(user=request.user, organization_id=workspace.organization_id)
    if AGENT_CREATE not in granted and not organization_admin:
        raise PermissionDenied("Your role in this workspace may not issue API keys.")
    form = ApiKeyForm(request.POST, workspace=workspace, organization_admin=organization_admin)
    issued = _key_issued(request, workspace, granted, form) if form.is_valid() else None
    if issued is None:
        return _answer(request, _context(request, workspace, granted, key_form=form), status=400)
    shown = {"kind": "API key", "name": issued.key.name, "plaintext": issued.plaintext,
             "use": "Send it as the X-API-Key header of POST /api/v1/triggers/{id}/invoke."}
    return _answer(request, _context(request, workspace, granted, issued=shown))


@page_login_required
@require_POST
def token_create(request):
    """Issue a personal access token as ``POST /api/v1/tokens/`` does; shown once."""
    workspace, granted = workspace_and_permissions(request)
    form = TokenForm(request.POST)
    issued = None
    if form.is_valid():
        try:
            issued = token_issue(user=request.user, name=form.cleaned_data["name"],
                                 expires_at=form.cleaned_data["expires_at"])
        except RiverError as exc:
            errors_onto_form(form, exc)
    if issued is None:
        return _answer(request, _context(request, workspace, granted, token_form=form), status=400)
    shown = {"kind": "personal access token", "name": issued.token.name, "plaintext": issued.plaintext,
             "use": "Send it as Authorization: Bearer <token> to any /api/v1/ endpoint. It acts as you."}
    return _answer(request, _context(request, workspace, granted, issued=shown))


@page_login_required
@require_http_methods(["GET", "POST"])
def api_key_revoke_page(request, api_key_id):
    """GET asks to confirm; POST revokes (``DELETE /api/v1/api-keys/{id}/``'s rule)."""
    try:
        key = or_404(api_key_get_manageable, user=request.user, api_key_id=api_key_id)
    except Refused as exc:
        raise PermissionDenied(exc.message) from None
    if request.method == "GET":
        return render(request, "settings/api_keys_revoke.html", {"kind": "API key", "item": key,
                                                                 "action": "api-key-revoke"})
    apikeys.api_key_revoke(key=key)
    messages.success(request, f"API key {key.name} is revoked: River refuses it from now on.")
    return redirect("api-keys")


@page_login_required
@require_http_methods(["GET", "POST"])
def token_revoke_page(request, token_id):
    """GET asks to confirm; POST revokes through ``token_revoke`` (own tokens only)."""
    token = or_404(access_token_get_for_user, user=request.user, token_id=token_id)
    if request.method == "GET":
        return render(request, "settings/api_keys_revoke.html", {"kind": "personal access token", "item": token,
                                                                 "action": "token-revoke"})
    token = or_404(token_revoke, user=request.user, token_id=token.pk)
    messages.success(request, f"Token {token.name} is revoked: River refuses it from now on.")
    return redirect("api-keys")


urlpatterns = [
    path("settings/api-keys", api_keys_page, name="api-keys"),
    path("settings/api-keys/new", api_key_create, name="api-key-create"),
    path("settings/api-keys/<str:api_key_id>/revoke", api_key_revoke_page, name="api-key-revoke"),
    path("settings/tokens/new", token_create, name="token-create"),
    path("settings/tokens/<str:token_id>/revoke", token_revoke_page, name="token-revoke"),
]
