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
