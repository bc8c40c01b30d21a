"""Permission strings and the roles that grant them.

Permission names follow the spec (``data_source:view`` ...). A workspace role maps
to a fixed set; an organization admin holds every permission in every workspace
of the organization.
"""

from __future__ import annotations

from django.db import models

WORKSPACE_VIEW = "workspace:view"
STORAGE_VIEW = "storage:view"
DATA_SOURCE_VIEW = "data_source:view"
DATA_SOURCE_QUERY = "data_source:query"
DATA_SOURCE_CREATE = "data_source:create"
DATA_SOURCE_UPDATE = "data_source:update"
DATA_SOURCE_DELETE = "data_source:delete"
AGENT_CREATE = "agent:create"
AGENT_EXECUTE = "agent:execute"
POLICY_CREATE = "policy:create"
APPROVAL_RESOLVE = "approval:resolve"
# Register, review and delete MCP tool servers (docs/mcp.md): admins only, since a
# reviewed tool is something every agent of the workspace may be given.
TOOL_SERVER_MANAGE = "tool_server:manage"

ALL_PERMISSIONS = frozenset(
    {
        WORKSPACE_VIEW,
        STORAGE_VIEW,
        DATA_SOURCE_VIEW,
        DATA_SOURCE_QUERY,
        DATA_SOURCE_CREATE,
        DATA_SOURCE_UPDATE,
        DATA_SOURCE_DELETE,
        AGENT_CREATE,
        AGENT_EXECUTE,
        POLICY_CREATE,
        APPROVAL_RESOLVE,
        TOOL_SERVER_MANAGE,
    }
)


class Role(models.TextChoices):
    ADMIN = "admin", "Admin"
    EDITOR = "editor", "Editor"
    ANALYST = "analyst", "Analyst"
    VIEWER = "viewer", "Viewer"


_VIEWER = {WORKSPACE_VIEW, STORAGE_VIEW, DATA_SOURCE_VIEW}
_ANALYST = _VIEWER | {DATA_SOURCE_QUERY, AGENT_EXECUTE}
_EDITOR = _ANALYST | {DATA_SOURCE_CREATE, DATA_SOURCE_UPDATE, AGENT_CREATE, APPROVAL_RESOLVE}
_ADMIN = set(ALL_PERMISSIONS)

ROLE_PERMISSIONS: dict[str, frozenset[str]] = {
    Role.VIEWER: frozenset(_VIEWER),
    Role.ANALYST: frozenset(_ANALYST),
    Role.EDITOR: frozenset(_EDITOR),
    Role.ADMIN: frozenset(_ADMIN),
}

ORG_ADMIN_ROLE = "org_admin"


def permissions_for_role(role: str) -> frozenset[str]:
    return ROLE_PERMISSIONS.get(role, frozenset())


# Workspace roles from least to most: each grants every permission of the ones below it.
ROLE_ORDER: tuple[str, ...] = (Role.VIEWER, Role.ANALYST, Role.EDITOR, Role.ADMIN)


def role_rank(role: str) -> int:
    """Position of ``role`` in ROLE_ORDER; an organization admin ranks above every
    workspace role; an unknown role ranks below them all."""
    if role == ORG_ADMIN_ROLE:
        return len(ROLE_ORDER)
    try:
        return ROLE_ORDER.index(role)
    except ValueError:
        return -1
