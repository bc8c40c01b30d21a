"""The cells of the authority matrix (issue 24 §6) and what every cell checks, shared by
``test_authority_matrix`` (paths that start a run on the test's transaction) and
``test_authority_matrix_chained`` (delegation and hand-off, which need committed rows).

A cell is the role the responsible person holds when the run starts and what happens to
them before its next segment: nothing, a demotion to each lower role, or removal from
the workspace. The person is never the agent's owner, so removing them leaves the agent
alone; the other approver is the workspace admin who owns the agent."""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth import get_user_model

from executions.models import Execution
from executions.services.load import execution_for_segment, request_build
from governance.models import ApprovalRequest, AuditLogEntry
from tenancy.models import Membership
from tenancy.permissions import AGENT_EXECUTE, ROLE_ORDER, permissions_for_role
from tests.governance import approval_tools
from tests.governance.test_requester_rule import resolve

APPROVER_ROLES = ("admin", "editor")  # the gated agents' approver roles


@dataclass(frozen=True)
class Cell:
    role: str  # the person's role when the run starts
    now: str | None  # their role at the run's next segment; None once removed

    @property
    def state(self) -> str:
        if self.now is None:
            return "removed"
        return "unchanged" if self.now == self.role else "demoted"

    @property
    def id(self) -> str:
        return {"unchanged": f"{self.role}-unchanged", "removed": f"{self.role}-removed"}.get(
            self.state, f"{self.role}-demoted_to_{self.now}")

    @property
    def may_execute(self) -> bool:
        """Whether the person may still start runs (``agent:execute`` in the workspace)."""
        return AGENT_EXECUTE in permissions_for_role(self.now or "")


def _cells() -> list[Cell]:
    cells = []
    for role in ("admin", "editor", "analyst"):
        cells.append(Cell(role, role))
        cells.extend(Cell(role, lower) for lower in reversed(ROLE_ORDER[:ROLE_ORDER.index(role)]))
        cells.append(Cell(role, None))
    return cells


CELLS = _cells()
CELL_IDS = [cell.id for cell in CELLS]


def person_with_role(*, workspace, role: str, username: str = "person"):
    person = get_user_model().objects.create_user(username=username, password=f"pw-{username}")
    Membership.objects.create(workspace=workspace, user=person, role=role)
    return person


def change_apply(*, cell: Cell, person, workspace) -> None:
    """Demote or remove the person, as an admin would on the members page (live reads:
    nothing else is touched)."""
    memberships = Membership.objects.filter(user=person, workspace=workspace)
    if cell.now is None:
        assert memberships.delete()[0] == 1
    elif cell.now != cell.role:
        assert memberships.update(role=cell.now) == 1


def assert_run_holds_at_most_the_persons_current_role(execution_id: int, cell: Cell) -> None:
    """What the run may do, as the engine sees it when its next segment loads: exactly
    the person's current role (every run of the matrix acts with the role they held at
    the start), nothing once they are removed."""
    context = request_build(execution_for_segment(execution_id)).user_context
    expected = permissions_for_role(cell.now) if cell.now else frozenset()
    assert context.roles == ([cell.now] if cell.now else [])
    assert set(context.permissions) == expected
    assert set(context.permissions) <= permissions_for_role(cell.now or "")


def assert_requester_cannot_approve(approval: ApprovalRequest, *, person, role: str | None) -> None:
    """The requester's decision is refused whatever role they hold now: as the requester
    while they are an approver, for want of the role otherwise, and as a stranger once
    removed (the request is not theirs to see). Nothing is decided or written."""
    refused = resolve(person, approval)
    if role is None:
        assert refused.status_code == 404, refused.content
    else:
        assert refused.status_code == 403, refused.content
        code = refused.json()["error"]["code"]
        if role in APPROVER_ROLES:
            assert code == "self_approval_forbidden"
        else:
            assert code == "permission_denied"
    approval.refresh_from_db()
    assert approval.status == ApprovalRequest.Status.PENDING and approval.resolved_by_id is None
    assert not AuditLogEntry.objects.filter(approval_id=approval.pk, event_type="approval_approved").exists()
    assert approval_tools.CALLS == []


def assert_another_admin_decides(approval: ApprovalRequest, *, approver) -> None:
    decided = resolve(approver, approval)
    assert decided.status_code == 200, decided.content
    approval.refresh_from_db()
    assert approval.status == ApprovalRequest.Status.APPROVED and approval.resolved_by_id == approver.pk


def assert_cell(*, cell: Cell, execution: Execution, approval: ApprovalRequest, person, approver,
                workspace) -> None:
    """The three questions of a cell, asked of a run that paused on a write while the
    person held ``cell.role``: who may approve before the change; after it, what the run
    may do and who may approve."""
    assert execution.requester_id == person.pk and approval.run_started_by_id == person.pk
    assert_requester_cannot_approve(approval, person=person, role=cell.role)

    change_apply(cell=cell, person=person, workspace=workspace)

    assert_run_holds_at_most_the_persons_current_role(execution.pk, cell)
    assert_requester_cannot_approve(approval, person=person, role=cell.now)
    assert_another_admin_decides(approval, approver=approver)
