"""Executions' side of effect previews: the previewer governance asks when an approver
edits a paused call or approves one (``governance.previews``), installed when the app
is ready. The call is previewed with the run's own context (its user, agent and data
sources, as stored when the run started), exactly as the engine previews it when the
run pauses (rivercore.previews)."""

from __future__ import annotations

from executions.models import Execution
from executions.services.load import run_state_build
from governance.models import ApprovalRequest
from rivercore.previews import effect_preview
from rivercore.tools import ToolContext, get_tool
from rivercore.types.previews import EffectPreview, no_preview


class ExecutionEffectPreviewer:
    def preview(self, approval: ApprovalRequest, arguments: dict) -> EffectPreview:
        tool = get_tool(approval.tool_name)
        execution = Execution.objects.filter(pk=approval.execution_id, workspace_id=approval.workspace_id).first()
        if tool is None or execution is None:
            return no_preview("no preview: the tool or the run is gone")
        request = run_state_build(execution).request
        ctx = ToolContext(execution_id=execution.pk, user=request.user_context, agent=request.agent_config,
                          data_sources=request.data_source_metadata, input_prompt=request.input_prompt,
                          extras={"workspace_id": execution.workspace_id, "call_id": approval.tool_call_id})
        preview = effect_preview(tool, ctx, arguments)
        previous = approval.preview or {}
        preview.policy_id = previous.get("policy_id")
        return preview
