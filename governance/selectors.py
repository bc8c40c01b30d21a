"""Reads for governance."""

from __future__ import annotations

from governance.models import WorkspaceSettings
from governance.types import ApprovalNotificationConfig


def approval_notification_config(*, workspace_id: int) -> ApprovalNotificationConfig:
    settings_row = WorkspaceSettings.objects.filter(workspace_id=workspace_id).first()
    return ApprovalNotificationConfig.model_validate(settings_row.approval_notification_config if settings_row else {})


def approval_channels_active(*, workspace_id: int) -> bool:
    """An act_with_approval agent may only be activated while this is true."""
    return approval_notification_config(workspace_id=workspace_id).any_active()


def active_policies(*, org_id: int, workspace_id: int) -> list:
    """Enabled policies that bind a run in this workspace: organization-wide ones and
    the workspace's own."""
    from django.db.models import Q

    from governance.models import Policy
    from governance.types import GovernancePolicySpec

    rows = Policy.objects.filter(enabled=True, organization_id=org_id).filter(
        Q(scope="organization") | Q(scope="workspace", workspace_id=workspace_id)
    ).order_by("created_at")
    return [
        GovernancePolicySpec(
            policy_id=str(p.pk), name=p.name, scope=p.scope, policy_type=p.policy_type,
            conditions=p.conditions, enforcement=p.enforcement,
        )
        for p in rows
    ]
