"""The worker's claim (PostgreSQL's one statement) reads a trigger identity's responsible
person's standing with the run, so building the run's user context costs no query, and
the cap it applies is the one ``workspace_roles`` applies."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from executions.services.claim import execution_claim_load
from executions.services.load import user_context_build
from tenancy.models import Membership
from tenancy.selectors import workspace_roles
from tests.factories import make_agent
from triggers.services import trigger_create, trigger_fire

pytestmark = [pytest.mark.django_db,
              pytest.mark.skipif(connection.vendor != "postgresql", reason="the one-statement claim is PostgreSQL's")]


@pytest.fixture
def quiet_queue(monkeypatch):
    from executions import tasks

    for task in (tasks.run_segment, tasks.post_process):
        monkeypatch.setattr(task, "delay", lambda *args, **kwargs: None)


def _fired_run(owner, workspace, *, run_as_role="admin"):
    agent = make_agent(workspace=workspace, owner=owner, name="Ops")
    trigger = trigger_create(actor=owner, workspace=workspace, agent=agent, name="Ops", trigger_type="api",
                             run_as_role=run_as_role)
    firing = trigger_fire(trigger=trigger, payload={}, source="test")
    assert firing.execution_id is not None
    return trigger, firing.execution_id


@pytest.mark.parametrize(("owner_role", "expected"), [
    ("admin", ["admin"]), ("editor", ["editor"]), ("analyst", ["analyst"]), (None, []),
], ids=["as-much", "demoted-editor", "demoted-analyst", "removed"])
def test_the_claim_carries_the_responsible_persons_standing_so_the_roles_cost_no_query(
        owner, workspace, quiet_queue, owner_role, expected):
    trigger, execution_id = _fired_run(owner, workspace)
    if owner_role is None:
        Membership.objects.filter(user=owner, workspace=workspace).delete()
    else:
        Membership.objects.filter(user=owner, workspace=workspace).update(role=owner_role)
    claimed = execution_claim_load(execution_id=execution_id)
    assert claimed is not None
    run = claimed[1]
    assert run.run_as_principal is True

    with CaptureQueriesContext(connection) as queries:
        context = user_context_build(execution=run)

    assert len(queries) == 0, [q["sql"][:80] for q in queries]
    assert context.roles == expected == workspace_roles(user=trigger.run_as.user, workspace=workspace)


def test_a_persons_run_claims_with_no_principal_and_its_own_roles(owner, workspace, member, quiet_queue):
    from executions.services import execution_start, person_run_request

    agent = make_agent(workspace=workspace, owner=owner, name="Ops")
    execution = execution_start(agent=agent, request=person_run_request(agent=agent, user=member, prompt="x"))
    run = execution_claim_load(execution_id=execution.pk)[1]

    with CaptureQueriesContext(connection) as queries:
        context = user_context_build(execution=run)

    assert len(queries) == 0
    assert run.run_as_principal is False and run.responsible_role is None
    assert context.roles == workspace_roles(user=member, workspace=workspace) == ["analyst"]
