"""Reads scoped to what a user may see. Every user-supplied id passes through here."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.db.models import Exists, OuterRef, Q, QuerySet, Subquery

from rivercore.errors import NotFound, PermissionDenied
from tenancy.models import AccessToken, Membership, Organization, OrganizationMember, ServicePrincipal, Workspace
from tenancy.permissions import ALL_PERMISSIONS, ORG_ADMIN_ROLE, permissions_for_role, role_rank


def user_active_get(*, user_id: int):
    """The active user with this id, or None (a run's user may have been deactivated)."""
    return get_user_model().objects.filter(pk=user_id, is_active=True).first()


def workspaces_for_user(*, user) -> QuerySet[Workspace]:
    if not user.is_authenticated:
        return Workspace.objects.none()
    return workspaces_of_user_id(user_id=user.pk)


def workspaces_of_user_id(*, user_id) -> QuerySet[Workspace]:
    """``workspaces_for_user`` for a signed-in user given by id (or by a stand-in, in a
    query compiled once: common.compiled)."""
    return Workspace.objects.filter(
        Q(memberships__user_id=user_id)
        | Q(organization__members__user_id=user_id, organization__members__role=OrganizationMember.OrgRole.ADMIN)
    ).distinct()


def workspace_get_for_user(*, user, workspace_id) -> Workspace:
    """The workspace if the user belongs to it (or administers its org); else 404."""
    try:
        return workspaces_for_user(user=user).get(pk=int(workspace_id))
    except (Workspace.DoesNotExist, TypeError, ValueError):
        raise NotFound("Workspace not found.") from None


def organizations_administered(*, user) -> QuerySet[Organization]:
    if not user.is_authenticated:
        return Organization.objects.none()
    return Organization.objects.filter(
        members__user=user, members__role=OrganizationMember.OrgRole.ADMIN
    )


def is_org_admin(*, user, organization_id: int) -> bool:
    return organizations_administered(user=user).filter(pk=organization_id).exists()


def _roles_held(*, user, workspace: Workspace) -> list[str]:
    """The workspace role and ``org_admin`` as stored, before any cap."""
    roles = list(Membership.objects.filter(user=user, workspace=workspace).values_list("role", flat=True))
    if is_org_admin(user=user, organization_id=workspace.organization_id):
        roles.append(ORG_ADMIN_ROLE)
    return roles


def roles_capped(roles: list[str], *, ceiling: str | None) -> list[str]:
    """``roles`` with each one above ``ceiling`` lowered to it; none at all without a
    ceiling (a service identity whose responsible person holds nothing here)."""
    if ceiling is None:
        return []
    capped: list[str] = []
    for role in roles:
        role = role if role_rank(role) <= role_rank(ceiling) else ceiling
        if role not in capped:
            capped.append(role)
    return capped


def _ceiling(roles: list[str]) -> str | None:
    return max(roles, key=role_rank) if roles else None


def workspace_roles(*, user, workspace: Workspace) -> list[str]:
    """Role names the user holds here: the workspace role, plus ``org_admin``.

    A trigger's service identity holds its role only up to its responsible person's
    highest role here *now*, and nothing once that person is deleted, deactivated or
    holds no role in the workspace: a trigger never acts with authority nobody has.
    Read live, so a demotion applies to the next check, mid-run included."""
    if not getattr(user, "pk", None):
        return _roles_held(user=user, workspace=workspace)
    is_principal = Exists(ServicePrincipal.objects.filter(user_id=OuterRef("user_id")))
    rows = list(Membership.objects.filter(user=user, workspace=workspace).annotate(
        run_as_principal=is_principal).values_list("role", "run_as_principal"))
    admin = OrganizationMember.objects.filter(user=user, organization_id=workspace.organization_id,
                                              role=OrganizationMember.OrgRole.ADMIN).annotate(
        run_as_principal=is_principal).values_list("run_as_principal", flat=True).first()
    roles = [role for role, _ in rows]
    if admin is not None:
        roles.append(ORG_ADMIN_ROLE)
    if not admin and not any(principal for _, principal in rows):
        return roles  # a person: the same two queries as ever
    principal = ServicePrincipal.objects.filter(user_id=user.pk).select_related("responsible").first()
    if principal is None:
        return roles
    responsible = principal.responsible
    if responsible is None or not responsible.is_active:
        return []
    return roles_capped(roles, ceiling=_ceiling(_roles_held(user=responsible, workspace=workspace)))


def roles_permissions(roles: list[str]) -> frozenset[str]:
    """Every permission the roles grant (an org admin holds them all)."""
    if ORG_ADMIN_ROLE in roles:
        return ALL_PERMISSIONS
    granted: set[str] = set()
    for role in roles:
        granted |= permissions_for_role(role)
    return frozenset(granted)


def workspace_permissions(*, user, workspace: Workspace) -> frozenset[str]:
    return roles_permissions(workspace_roles(user=user, workspace=workspace))


def role_annotations(*, workspace_ref: str, organization_ref: str, user_ref: str | None = None,
                     user_id: int | None = None) -> dict:
    """Annotations that read a user's roles in the same query as the row that names the
    workspace (``*_ref`` are field paths on that row; the user is ``user_ref`` on it, or
    ``user_id``): ``member_role`` (the workspace role or None) and ``org_admin``; and,
    for a trigger's service identity (``run_as_principal``), its responsible person's
    standing (``responsible_role``, ``responsible_org_admin``, both empty unless that
    person exists and is active). ``roles_annotated`` turns them into
    ``workspace_roles``'s list, with the same cap."""
    user = OuterRef(user_ref) if user_ref is not None else user_id
    principal = ServicePrincipal.objects.filter(user_id=user)
    responsible_member = Membership.objects.filter(
        user_id=OuterRef("responsible_id"), user__is_active=True, workspace_id=OuterRef(OuterRef(workspace_ref)))
    responsible_admin = OrganizationMember.objects.filter(
        user_id=OuterRef("responsible_id"), user__is_active=True,
        organization_id=OuterRef(OuterRef(organization_ref)), role=OrganizationMember.OrgRole.ADMIN)
    return {
        "member_role": Subquery(Membership.objects.filter(
            user_id=user, workspace_id=OuterRef(workspace_ref)).values("role")[:1]),
        "org_admin": Exists(OrganizationMember.objects.filter(
            user_id=user, organization_id=OuterRef(organization_ref), role=OrganizationMember.OrgRole.ADMIN)),
        "run_as_principal": Exists(principal),
        "responsible_role": Subquery(principal.annotate(
            held=Subquery(responsible_member.values("role")[:1])).values("held")[:1]),
        "responsible_org_admin": Subquery(principal.annotate(
            held=Exists(responsible_admin)).values("held")[:1]),
    }


def roles_annotated(row) -> list[str]:
    """``workspace_roles``'s list from a row annotated by ``role_annotations``.

    A row carrying ``member_role`` and ``org_admin`` only (no ``run_as_principal``) has
    its responsible person's standing read here, in one query, so the cap holds for such
    callers too (the claim's SQL, executions.services.claim, carries all five)."""
    if not hasattr(row, "run_as_principal"):
        return _run_roles_read(row)
    roles = [row.member_role] if row.member_role else []
    if row.org_admin:
        roles.append(ORG_ADMIN_ROLE)
    if not row.run_as_principal:
        return roles
    held = [row.responsible_role] if row.responsible_role else []
    if row.responsible_org_admin:
        held.append(ORG_ADMIN_ROLE)
    return roles_capped(roles, ceiling=_ceiling(held))


def _run_roles_read(run) -> list[str]:
    if run.requested_by_id is None or not (run.member_role or run.org_admin):
        return []  # holds nothing; a cap could only lower it
    fresh = Workspace.objects.annotate(**role_annotations(
        user_id=run.requested_by_id, workspace_ref="pk", organization_ref="organization_id")).only("pk").get(
        pk=run.workspace_id)
    return roles_annotated(fresh)


def require_permission(*, user, workspace: Workspace, permission: str) -> None:
    """Raise 403 unless the user holds ``permission`` in a workspace they can already see."""
    require_granted(granted=workspace_permissions(user=user, workspace=workspace), permission=permission)


def require_granted(*, granted: frozenset[str], permission: str) -> None:
    """Raise 403 unless ``permission`` is among those the user was found to hold."""
    if permission not in granted:
        raise PermissionDenied(f"You need the {permission} permission in this workspace.")


def access_tokens_for_user(*, user) -> QuerySet[AccessToken]:
    """The user's own tokens, newest first. Nobody lists another user's tokens."""
    return AccessToken.objects.filter(user=user).order_by("-created_at", "-id")


def access_token_get_for_user(*, user, token_id) -> AccessToken:
    """One of the user's own tokens; another's, or none, is NotFound (404)."""
    try:
        return access_tokens_for_user(user=user).get(pk=int(token_id))
    except (AccessToken.DoesNotExist, TypeError, ValueError, OverflowError):
        raise NotFound("Token not found.") from None


def user_is_service_principal(*, user) -> bool:
    """True for a trigger's run-as identity (tenancy.ServicePrincipal): it never signs in
    and never approves."""
    if user is None or not getattr(user, "pk", None):
        return False
    return ServicePrincipal.objects.filter(user_id=user.pk).exists()


def service_principal_of(*, user) -> ServicePrincipal | None:
    """The service identity ``user`` is (with its responsible person), or None for a person."""
    if user is None or not getattr(user, "pk", None):
        return None
    return ServicePrincipal.objects.select_related("responsible").filter(user_id=user.pk).first()


def role_highest(*, user, workspace: Workspace) -> str | None:
    """The highest role the user holds in the workspace (``org_admin`` above all), or None."""
    roles = workspace_roles(user=user, workspace=workspace)
    return max(roles, key=role_rank) if roles else None


def users_by_id(*, user_ids) -> dict:
    """``{id: user}`` for the given ids (one query; none for no ids): the people a page
    already holds the ids of, such as a run's requester."""
    ids = [pk for pk in user_ids if pk]
    return get_user_model().objects.in_bulk(ids) if ids else {}


def workspaces_listed(*, user) -> list[Workspace]:
    """The user's workspaces with their organization, by organization then name (the
    frame's workspace switch)."""
    return list(workspaces_for_user(user=user).select_related("organization").order_by("organization__name", "name"))


def user_ids_named(*, workspace: Workspace, words) -> QuerySet:
    """The ids of the workspace's members and its organization's members whose username,
    first or last name contains every one of ``words`` (the search box's requester
    match)."""
    users = get_user_model().objects.filter(
        Q(memberships__workspace=workspace) | Q(org_memberships__organization_id=workspace.organization_id))
    for word in words:
        users = users.filter(Q(username__icontains=word) | Q(first_name__icontains=word)
                             | Q(last_name__icontains=word))
    return users.values_list("pk", flat=True).distinct()


# The most people a page's requester field offers.
REQUESTER_CHOICES_MAX = 500


def requester_choices(*, workspace: Workspace) -> list[tuple[str, str]]:
    """``(id, name)`` of the workspace's members and its organization's admins, by name,
    at most ``REQUESTER_CHOICES_MAX``: the runs list's requester filter."""
    users = get_user_model().objects.filter(
        Q(memberships__workspace=workspace)
        | Q(org_memberships__organization_id=workspace.organization_id,
            org_memberships__role=OrganizationMember.OrgRole.ADMIN)).distinct()
    rows = users.order_by("first_name", "last_name", "username", "pk").values_list(
        "pk", "username", "first_name", "last_name")[:REQUESTER_CHOICES_MAX]
    return [(str(pk), f"{first} {last}".strip() or username) for pk, username, first, last in rows]
