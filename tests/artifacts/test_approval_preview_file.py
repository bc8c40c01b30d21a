"""save_artifact's effect preview (issue 29 §1): the file and its diff against the
latest version; a version saved between the pause and the approval makes the preview
stale (nothing saved, the request keeps waiting with a fresh preview)."""

from __future__ import annotations

from unittest import mock

import pytest

from artifacts.models import Artifact
from artifacts.services import artifact_create_from_run
from executions import services, tasks
from governance import tasks as governance_tasks
from governance.models import ApprovalRequest
from governance.resolution import approval_resolve
from rivercore.errors import Conflict
from tests.factories import ScriptedLLM, make_agent, text_reply, tool_reply

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def paused(workspace, owner, artifact_dirs):
    artifact_create_from_run(workspace=workspace, execution_id=None, created_by=owner, name="report.md",
                             content="# Report\nopen: 4\nclosed: 1\n")
    agent = make_agent(workspace=workspace, owner=owner, tools=["save_artifact"], action_level="act_with_approval",
                       require_approval_for=["save_artifact"], approver_roles=["admin", "editor"])
    with mock.patch.object(tasks.run_segment, "delay"), mock.patch.object(tasks.post_process, "delay"), \
            mock.patch.object(governance_tasks.notify_approval, "delay"):
        execution = services.execution_start(agent=agent, request=services.person_run_request(
            agent=agent, user=owner, prompt="Update the report"))
        services.execution_run_segment(execution_id=execution.pk, llm=ScriptedLLM([tool_reply(
            "save_artifact", {"name": "report.md", "content": "# Report\nopen: 1\nclosed: 4\n"})]))
        yield execution, ApprovalRequest.objects.get(execution_id=execution.pk)


def test_the_preview_is_the_diff_against_the_latest_version(paused):
    _, approval = paused
    preview = approval.preview
    assert preview["kind"] == "file" and preview["previous_version"] == 1
    assert preview["summary"] == "Replaces report.md version 1 with version 2: +2 −2 lines."
    assert "-open: 4\n-closed: 1\n+open: 1\n+closed: 4" in preview["diff"]
    assert Artifact.objects.filter(name="report.md").count() == 1  # nothing saved by the preview


def test_a_version_saved_meanwhile_makes_the_preview_stale(paused, workspace, owner, editor):
    execution, approval = paused
    artifact_create_from_run(workspace=workspace, execution_id=None, created_by=owner, name="report.md",
                             content="# Report\nsomeone else\n")
    with pytest.raises(Conflict) as raised:
        approval_resolve(user=editor, approval_id=approval.pk, status="approved")
    assert raised.value.code == "preview_stale"
    assert "version 2 is there now" in raised.value.message
    approval.refresh_from_db()
    assert approval.status == ApprovalRequest.Status.PENDING and approval.preview["previous_version"] == 2

    with mock.patch.object(tasks.run_segment, "delay"), mock.patch.object(tasks.post_process, "delay"):
        approval_resolve(user=editor, approval_id=approval.pk, status="approved")
        services.execution_run_segment(execution_id=execution.pk, llm=ScriptedLLM([text_reply("Saved.")]))
    assert list(Artifact.objects.filter(name="report.md").order_by("version").values_list("version", flat=True)) \
        == [1, 2, 3]


def test_a_version_saved_after_the_approval_re_pauses_the_run(paused, workspace, owner, editor):
    from executions.models import Execution
    from governance.models import AuditLogEntry

    execution, approval = paused
    with mock.patch.object(tasks.run_segment, "delay"), mock.patch.object(tasks.post_process, "delay"), \
            mock.patch.object(governance_tasks.notify_approval, "delay"):
        approval_resolve(user=editor, approval_id=approval.pk, status="approved")
        # Someone saves a version between the approval and the write.
        artifact_create_from_run(workspace=workspace, execution_id=None, created_by=owner, name="report.md",
                                 content="# Report\nsomeone else\n")
        assert services.execution_run_segment(execution_id=execution.pk,
                                              llm=ScriptedLLM([text_reply("Saved.")])) == "awaiting_approval"

        assert list(Artifact.objects.filter(name="report.md").values_list("version", flat=True)
                    .order_by("version")) == [1, 2]  # nothing saved by the run
        assert Execution.objects.get(pk=execution.pk).status == Execution.Status.AWAITING_APPROVAL
        again = ApprovalRequest.objects.get(execution_id=execution.pk, status="pending")
        assert again.pk != approval.pk and again.preview["previous_version"] == 2
        assert again.preview["stale"]["at_write"] is True
        assert "version 2 is there now" in again.preview["stale"]["message"]
        assert AuditLogEntry.objects.filter(approval_id=again.pk, event_type="approval_preview_stale").exists()

        approval_resolve(user=editor, approval_id=again.pk, status="approved")
        assert services.execution_run_segment(execution_id=execution.pk,
                                              llm=ScriptedLLM([text_reply("Saved.")])) == "success"
    saved = Artifact.objects.get(name="report.md", version=3)
    assert saved.created_by_execution_id == execution.pk
