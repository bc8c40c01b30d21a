"""Server-rendered pages of the frame: sign in and out, the overview, the notifications
(page, bell panel, mark read), the live counts and the workspace switch.

Sign-in is Django's own LoginView; sign-out is POST only (Django's LogoutView).
Pages that need a user send visitors to the sign-in page (settings.LOGIN_URL, a URL
name) through ``web.page_tools.page_login_required``.
"""

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import views as auth_views
from django.core.paginator import Paginator
from django.http import Http404, HttpResponseBadRequest, JsonResponse
from django.shortcuts import redirect, render
from django.urls import path, reverse, reverse_lazy
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_POST

from agents.models import Agent
from common.ids import id_from_text
from governance.notifications import notifications_for_user, notifications_mark_read
from tenancy.selectors import workspace_get_for_user
from web.context import SECTIONS, SESSION_KEY, Nav, current_workspace
from web.overview import overview_for_workspace
from web.page_tools import or_404, page_login_required

NOTIFICATIONS_PER_PAGE = 25
PANEL_SIZE = 6



@page_login_required
def home(request):
    """The overview of the current workspace."""
    workspace = current_workspace(request)
    if workspace is None:
        return render(request, "overview.html", {"workspace": None})
    overview = overview_for_workspace(workspace=workspace)
    return render(request, "overview.html", {
        "workspace": workspace,
        "ov": overview,
        "chart": overview.chart_data(),
        "since_today": overview.today.isoformat(),
        "since_week": overview.week_start.isoformat(),
        "agent_statuses": Agent.Status.choices,
        "agent_healths": Agent.Health.choices,
    })


@require_GET
@page_login_required
def nav_counts(request):
    """The two live numbers of the frame, for the page that heard they changed."""
    nav = Nav(request)
    response = JsonResponse({"approvals": nav.pending_approvals, "notifications": nav.unread_notifications})
    response["Cache-Control"] = "no-store"
    return response


def _safe_next(request, fallback: str) -> str:
    target = request.POST.get("next") or ""
    if url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}, require_https=request.is_secure()):
        return target
    return fallback


def _section_root(target: str) -> str:
    """Where a switch of workspace lands: the same section's first page. A run, an agent
    or a filter of the previous workspace means nothing in the next one."""
    first = target.split("?", 1)[0].strip("/").split("/", 1)[0]
    if first and first in SECTIONS:
        return f"/{first}/"
    return reverse("home")


@require_POST
@page_login_required
def workspace_switch(request):
    """Remember the workspace the pages show; only one of the user's own."""
    workspace_id = id_from_text(request.POST.get("workspace", ""))
    if workspace_id is None:
        raise Http404("No such workspace.")
    workspace = or_404(workspace_get_for_user, user=request.user, workspace_id=workspace_id)
    request.session[SESSION_KEY] = workspace.pk
    messages.success(request, f"Now showing {workspace.name} ({workspace.organization.name}).")
    return redirect(_section_root(_safe_next(request, reverse("home"))))


@page_login_required
def notifications(request):
    unread_only = request.GET.get("show") == "unread"
    mine = notifications_for_user(user=request.user, unread_only=unread_only)
    page = Paginator(mine, NOTIFICATIONS_PER_PAGE).get_page(request.GET.get("page"))
    return render(request, "notifications.html", {
        "page": page, "unread_only": unread_only, "query": "show=unread" if unread_only else "",
    })


def _panel(request):
    unread = list(notifications_for_user(user=request.user, unread_only=True)[:PANEL_SIZE])
    return render(request, "_bell_panel.html", {"unread": unread})


@require_GET
@page_login_required
def notifications_panel(request):
    """The bell's panel: the latest unread notifications (an htmx fragment)."""
    return _panel(request)


@require_POST
@page_login_required
def notifications_mark_read_view(request):
    """Mark one notification (``id``) or all of the user's (no ``id``) as read. From the
    bell's panel (htmx) the answer is the panel again; from a page, a redirect back.
    An ``id`` that is given but is not an id (``²``, ``٣``, empty) is a 400: it must
    never fall back to marking everything read."""
    notification_id = None
    if "id" in request.POST:
        notification_id = id_from_text(request.POST["id"])
        if notification_id is None:
            return HttpResponseBadRequest("id must be a notification id (ASCII digits).",
                                          content_type="text/plain; charset=utf-8")
    notifications_mark_read(user=request.user, notification_id=notification_id)
    if request.headers.get("HX-Request") == "true":
        response = _panel(request)
        response["HX-Trigger"] = "river:counts-changed"
        return response
    return redirect(_safe_next(request, reverse("notifications")))


urlpatterns = [
    path("workspace/", workspace_switch, name="workspace-switch"),
    path("notifications/", notifications, name="notifications"),
    path("notifications/read", notifications_mark_read_view, name="notifications-read"),
    path("notifications/panel", notifications_panel, name="notifications-panel"),
    path("nav/counts", nav_counts, name="nav-counts"),
    path("", home, name="home"),
    path(
        "accounts/login/",
        auth_views.LoginView.as_view(redirect_authenticated_user=True, next_page=reverse_lazy("home")),
        name="login",
    ),
    path("accounts/logout/", auth_views.LogoutView.as_view(next_page=settings.LOGIN_URL), name="logout"),
]
