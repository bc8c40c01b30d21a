"""What every page's frame shows: the workspaces the user may switch between, the current
one, the pending approvals and unread notifications counts, and which section of the
navigation the page belongs to.

Computed lazily, once per request: a page that does not render the frame (Django admin,
an htmx fragment) runs none of these queries.
"""

from __future__ import annotations

from functools import cached_property

from governance.approvals import approvals_pending_count
from governance.notifications import notifications_unread_count
from tenancy.permissions import POLICY_CREATE
from tenancy.selectors import workspace_permissions, workspaces_listed

SESSION_KEY = "river_workspace_id"
# The first path segment of a page names its section of the main navigation.
SECTIONS = {
    "": "overview", "agents": "agents", "runs": "runs", "sessions": "sessions", "approvals": "approvals",
    "triggers": "triggers", "data-sources": "data", "audit": "audit", "policies": "policies",
    "notifications": "notifications", "tool-servers": "toolservers",
}


class Nav:
    def __init__(self, request):
        self.request = request

    @cached_property
    def workspaces(self) -> list:
        return workspaces_listed(user=self.request.user)

    @cached_property
    def workspace(self):
        """The workspace the user chose (kept in the session), else their first one."""
        chosen = self.request.session.get(SESSION_KEY)
        for workspace in self.workspaces:
            if workspace.pk == chosen:
                return workspace
        return self.workspaces[0] if self.workspaces else None

    @cached_property
    def pending_approvals(self) -> int:
        if self.workspace is None:
            return 0
        return approvals_pending_count(user=self.request.user, workspace=self.workspace)

    @cached_property
    def unread_notifications(self) -> int:
        return notifications_unread_count(user=self.request.user)

    @cached_property
    def may_manage_policies(self) -> bool:
        """Whether the Policies link shows: the user may manage policies here."""
        if self.workspace is None:
            return False
        return POLICY_CREATE in workspace_permissions(user=self.request.user, workspace=self.workspace)

    @cached_property
    def section(self) -> str:
        first = self.request.path.strip("/").split("/", 1)[0]
        return SECTIONS.get(first, "")


def _nav(request) -> Nav:
    """One Nav per request, so a view that asks for the workspace and the frame that
    shows it read it once."""
    nav = getattr(request, "_river_nav", None)
    if nav is None:
        nav = request._river_nav = Nav(request)
    return nav


def current_workspace(request):
    """The page's workspace (None for a user with none)."""
    return _nav(request).workspace


def river_nav(request) -> dict:
    if not getattr(request, "user", None) or not request.user.is_authenticated:
        return {}
    return {"nav": _nav(request)}
