"""Server-rendered pages: sign in and out, and the home page.

Sign-in is Django's own LoginView; sign-out is POST only (Django's LogoutView).
Pages that need a user send visitors to the sign-in page by URL name, so they do
not depend on settings.LOGIN_URL.
"""

from collections import defaultdict

from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import Http404
from django.shortcuts import redirect, render
from django.urls import include, path, reverse, reverse_lazy
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from agents.selectors import agents_for_user
from governance.models import Notification
from riverapp.context import SESSION_KEY
from tenancy.selectors import workspaces_for_user

NOTIFICATIONS_PER_PAGE = 25

LOGIN_URL = reverse_lazy("login")


@login_required(login_url=LOGIN_URL)
def home(request):
    workspaces = list(workspaces_for_user(user=request.user).select_related("organization").order_by("name"))
    agents_by_workspace = defaultdict(list)
    for agent in agents_for_user(user=request.user).order_by("name"):
        agents_by_workspace[agent.workspace_id].append(agent)
    items = [{"workspace": ws, "agents": agents_by_workspace[ws.pk]} for ws in workspaces]
    return render(request, "home.html", {"workspaces": items})


def _safe_next(request, fallback: str) -> str:
    target = request.POST.get("next") or ""
    if url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}, require_https=request.is_secure()):
        return target
    return fallback


@require_POST
@login_required(login_url=LOGIN_URL)
def workspace_switch(request):
    """Remember the workspace the pages show; only one of the user's own."""
    try:
        workspace_id = int(request.POST.get("workspace", ""))
    except ValueError:
        raise Http404("No such workspace.") from None
    if not workspaces_for_user(user=request.user).filter(pk=workspace_id).exists():
        raise Http404("No such workspace.")
    request.session[SESSION_KEY] = workspace_id
    return redirect(_safe_next(request, reverse("home")))


@login_required(login_url=LOGIN_URL)
def notifications(request):
    mine = Notification.objects.filter(user=request.user).select_related("workspace").order_by("-created_at", "-pk")
    page = Paginator(mine, NOTIFICATIONS_PER_PAGE).get_page(request.GET.get("page"))
    return render(request, "notifications.html", {"page": page})


@require_POST
@login_required(login_url=LOGIN_URL)
def notifications_mark_read(request):
    """Mark one notification (``id``) or all of the user's (no ``id``) as read."""
    mine = Notification.objects.filter(user=request.user, read_at__isnull=True)
    raw = request.POST.get("id")
    if raw:
        if not raw.isdigit():
            raise Http404("No such notification.")
        mine = mine.filter(pk=int(raw))
    mine.update(read_at=timezone.now())
    return redirect(_safe_next(request, reverse("notifications")))


urlpatterns = [
    path("workspace/", workspace_switch, name="workspace-switch"),
    path("notifications/", notifications, name="notifications"),
    path("notifications/read", notifications_mark_read, name="notifications-read"),
    path("", home, name="home"),
    path(
        "accounts/login/",
        auth_views.LoginView.as_view(redirect_authenticated_user=True, next_page=reverse_lazy("home")),
        name="login",
    ),
    path("accounts/logout/", auth_views.LogoutView.as_view(next_page=LOGIN_URL), name="logout"),
    path("", include("governance.views")),
    path("", include("executions.views")),
    path("", include("riverapp.pages_agents")),
    path("", include("riverapp.pages_triggers")),
    path("", include("riverapp.pages_data")),
    path("", include("riverapp.pages_audit")),
]
