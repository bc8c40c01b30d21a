"""A trigger's identity can never resolve an approval, even with an approver's role; its
runs' approvals go to the workspace's people."""

from unittest import mock

import pytest

from executions import services, tasks
from governance.approvals import approvals_for_user, may_resolve
from governance.models import ApprovalRequest
from governance.notifications import approvers_for
from governance.resolution import approval_resolve
from rivercore.errors import PermissionDenied
from tests.factories import ScriptedLLM, make_agent, tool_reply
from tests.governance import approval_tools
from tests.governance.approval_tools import WRITE_TOOL
from triggers.services import trigger_create, trigger_fire

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _clean_calls():
    approval_tools.reset()


def test_trigger_identity_with_an_approver_role_cannot_approve(workspace, owner, editor):
    agent = make_agent(workspace=workspace, owner=owner, tools=[WRITE_TOOL], action_level="act_with_approval",
                       require_approval_for=[WRITE_TOOL], approver_roles=["admin", "editor"])
    trigger = trigger_create(actor=owner, workspace=workspace, agent=agent, name="Refunds", trigger_type="api",
                             run_as_role="editor")
    firing = trigger_fire(trigger=trigger, payload={"ticket": 7}, source="api:Refunds")
    services.execution_run_segment(execution_id=firing.execution_id, llm=ScriptedLLM(
        [tool_reply(WRITE_TOOL, {"ticket_id": 7, "amount": 40.0}, call_id="call_refund")]))
    approval = ApprovalRequest.objects.get(execution_id=firing.execution_id)
    identity = trigger.run_as.user
    # The run acts as the identity; its requester (who may not approve) is the trigger's
    # responsible person, the owner who created it.
    assert approval.run_started_by_id == owner.pk

    with pytest.raises(PermissionDenied) as raised:
        approval_resolve(user=identity, approval_id=approval.pk, status="approved")
    assert raised.value.code == "service_principal_cannot_approve"
    approval.refresh_from_db()
    assert approval.status == ApprovalRequest.Status.PENDING
    assert not may_resolve(user=identity, approval=approval)
    assert not approvals_for_user(user=identity, resolvable_only=True).exists()
    assert identity not in approvers_for(workspace=workspace, roles=["editor"])

    # Another person with an approver role resolves it.
    assert may_resolve(user=editor, approval=approval)
    with mock.patch.object(tasks.run_segment, "delay"):
        decided = approval_resolve(user=editor, approval_id=approval.pk, status="approved")
    assert decided.status == ApprovalRequest.Status.APPROVED
