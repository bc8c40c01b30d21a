"""Server-rendered pages: sign in and out, and the home page.

Sign-in is Django's own LoginView; sign-out is POST only (Django's LogoutView).
Pages that need a user send visitors to the sign-in page by URL name, so they do
not depend on settings.LOGIN_URL.
"""

from collections import defaultdict

from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.shortcuts import render
from django.urls import include, path, reverse_lazy

from agents.selectors import agents_for_user
from tenancy.selectors import workspaces_for_user

LOGIN_URL = reverse_lazy("login")


@login_required(login_url=LOGIN_URL)
def home(request):
    workspaces = list(workspaces_for_user(user=request.user).select_related("organization").order_by("name"))
    agents_by_workspace = defaultdict(list)
    for agent in agents_for_user(user=request.user).order_by("name"):
        agents_by_workspace[agent.workspace_id].append(agent)
    items = [{"workspace": ws, "agents": agents_by_workspace[ws.pk]} for ws in workspaces]
    return render(request, "home.html", {"workspaces": items})


urlpatterns = [
    path("", home, name="home"),
    path(
        "accounts/login/",
        auth_views.LoginView.as_view(redirect_authenticated_user=True, next_page=reverse_lazy("home")),
        name="login",
    ),
    path("accounts/logout/", auth_views.LogoutView.as_view(next_page=LOGIN_URL), name="logout"),
    path("", include("governance.views")),
    path("", include("executions.views")),
    path("", include("triggers.views")),
]
