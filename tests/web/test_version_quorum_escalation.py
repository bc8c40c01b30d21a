"""An agent version's quorum rules and escalation chain on the new-version page (issue 29
§3): saved through ``agent_version_create`` (the API's service), refused with the API's
messages on the row and field they name, nothing half saved; shown read-only on the agent
page; members without the right 403, other workspaces 404; hostile input refused."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from agents.models import AgentVersion
from tests.factories import make_agent

pytestmark = pytest.mark.django_db


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def agent(workspace, owner):
    return make_agent(
        workspace=workspace,
        owner=owner,
        name="Ticket fixer",
        tools=["write_back", "execute_query"],
        require_approval_for=["write_back"],
        action_level="act_with_approval",
    )


def _post(*, quorum: list[dict] = (), escalation: list[dict] = (), **overrides) -> dict:
    data = {
        "goal": "Help.",
        "instructions": "Be careful.",
        "action_level": "act_with_approval",
        "governance_level": "standard",
        "tools": ["write_back", "execute_query"],
        "require_approval_for": ["write_back"],
        "approver_roles": ["editor"],
        "escalation_timeout_minutes": "240",
        "max_turns": "15",
        "token_budget": "100000",
        "auto-TOTAL_FORMS": "0",
        "auto-INITIAL_FORMS": "0",
        "quorum-TOTAL_FORMS": str(len(quorum)),
        "quorum-INITIAL_FORMS": "0",
        "escalation-TOTAL_FORMS": str(len(escalation)),
        "escalation-INITIAL_FORMS": "0",
    }
    for index, rule in enumerate(quorum):
        data[f"quorum-{index}-approvals"] = rule.get("approvals", "")
        data[f"quorum-{index}-when"] = rule.get("when", "")
    for index, step in enumerate(escalation):
        data[f"escalation-{index}-after_minutes"] = step.get("after_minutes", "")
        data[f"escalation-{index}-approver_roles"] = step.get("approver_roles", [])
    data.update(overrides)
    return data


TWO_FOR_DELETES = {"approvals": "2", "when": "args.operation == 'delete' OR rows > 100"}
CHAIN = [
    {"after_minutes": "30", "approver_roles": ["admin"]},
    {"after_minutes": "120", "approver_roles": ["org_admin"]},
]


def test_saves_quorum_and_chain_and_the_agent_page_shows_them(owner, agent):
    client = _client(owner)
    response = client.post(
        f"/agents/{agent.pk}/versions/new/", _post(quorum=[TWO_FOR_DELETES, {}], escalation=[*CHAIN, {}])
    )
    assert response.status_code == 302, re.findall(r'class="field-error"[^>]*>([^<]*)', response.content.decode())
    version = AgentVersion.objects.get(agent=agent, version=2)
    assert version.approval_rules["quorum"] == [{"when": TWO_FOR_DELETES["when"], "approvals": 2}]
    assert version.approval_rules["escalation"] == [
        {"after_minutes": 30, "approver_roles": ["admin"]},
        {"after_minutes": 120, "approver_roles": ["org_admin"]},
    ]
    agent.current_version = version
    agent.save(update_fields=["current_version"])
    page = client.get(f"/agents/{agent.pk}/").content.decode()
    quorum_read = page.split('id="quorum-read"')[1].split("</dd>")[0]
    assert "2 when <code>args.operation == &#x27;delete&#x27; OR rows &gt; 100</code>" in quorum_read
    chain = page.split('id="escalation-read"')[1].split("</dd>")[0]
    assert "after 30 minutes to Admin" in chain and "after 120 minutes to Org admin" in chain
    assert "expires after 240 minutes" in chain
    # the next version's form starts from them
    form = client.get(f"/agents/{agent.pk}/versions/new/").content.decode()
    assert 'name="quorum-0-approvals" value="2"' in form and 'name="escalation-1-after_minutes" value="120"' in form


def test_a_rule_without_a_condition_applies_to_every_call(owner, agent):
    response = _client(owner).post(f"/agents/{agent.pk}/versions/new/", _post(quorum=[{"approvals": "3"}]))
    assert response.status_code == 302
    assert AgentVersion.objects.get(agent=agent, version=2).approval_rules["quorum"] == [{"when": None, "approvals": 3}]


def _refused(owner, agent, **kwargs) -> str:
    response = _client(owner).post(f"/agents/{agent.pk}/versions/new/", _post(**kwargs))
    assert response.status_code == 400
    assert not AgentVersion.objects.filter(agent=agent, version=2).exists()
    return response.content.decode()


def test_service_errors_land_on_the_row_and_field_with_the_apis_message(owner, agent, api_client_for):
    bad_when = {"approvals": "2", "when": "args.operation == "}
    late = [
        {"after_minutes": "60", "approver_roles": ["admin"]},
        {"after_minutes": "30", "approver_roles": ["org_admin"]},
    ]
    body = _refused(owner, agent, quorum=[{}, bad_when], escalation=late)
    api = api_client_for(owner).post(
        f"/api/v1/agents/{agent.pk}/versions/",
        {
            "goal": "Help.",
            "instructions": "Be careful.",
            "action_level": "act_with_approval",
            "tools": ["write_back"],
            "approval_rules": {
                "quorum": [{"approvals": 2, "when": "args.operation == "}],
                "escalation_timeout_minutes": 240,
                "escalation": [
                    {"after_minutes": 60, "approver_roles": ["admin"]},
                    {"after_minutes": 30, "approver_roles": ["org_admin"]},
                ],
            },
        },
        format="json",
    )
    assert api.status_code == 400, api.content
    rules = api.json()["error"]["details"]["approval_rules"]
    assert 'id="id_quorum-1-when_error"' in body
    row = body.split('id="id_quorum-1-when_error"')[1].split("</span>")[0]
    assert rules["quorum.0.when"][0] in row.replace("&#x27;", "'")
    step = body.split('id="id_escalation-1-after_minutes_error"')[1].split("</span>")[0]
    assert rules["escalation.1.after_minutes"][0] in step.replace("&#x27;", "'")


def test_a_step_at_or_after_the_expiry_is_refused(owner, agent):
    body = _refused(owner, agent, escalation=[{"after_minutes": "240", "approver_roles": ["admin"]}])
    assert 'id="id_escalation-0-after_minutes_error"' in body and "must be less than escalation_timeout_minutes" in body


def test_half_filled_rows_are_refused_at_the_field(owner, agent):
    body = _refused(
        owner, agent, quorum=[{"when": "rows > 5"}], escalation=[{"approver_roles": ["admin"]}, {"after_minutes": "90"}]
    )
    assert 'id="id_quorum-0-approvals_error"' in body
    assert 'id="id_escalation-0-after_minutes_error"' in body and 'id="id_escalation-1-approver_roles_error"' in body


@pytest.mark.parametrize(
    ("quorum", "escalation", "field"),
    [
        ([{"approvals": "11"}], [], "quorum-0-approvals"),
        ([{"approvals": "0"}], [], "quorum-0-approvals"),
        ([{"approvals": "two"}], [], "quorum-0-approvals"),
        ([{"approvals": "2", "when": "rows > 1\x00"}], [], "quorum-0-when"),
        ([{"approvals": "2", "when": "x" * 5000}], [], "quorum-0-when"),
        ([{"approvals": "2", "when": "<script>alert(1)</script>"}], [], "quorum-0-when"),
        ([], [{"after_minutes": "-5", "approver_roles": ["admin"]}], "escalation-0-after_minutes"),
        ([], [{"after_minutes": "9" * 40, "approver_roles": ["admin"]}], "escalation-0-after_minutes"),
        ([], [{"after_minutes": "30", "approver_roles": ["superuser"]}], "escalation-0-approver_roles"),
        ([], [{"after_minutes": "30", "approver_roles": ["<b>admin</b>"]}], "escalation-0-approver_roles"),
    ],
)
def test_hostile_input_is_refused_and_nothing_is_saved(owner, agent, quorum, escalation, field):
    body = _refused(owner, agent, quorum=quorum, escalation=escalation)
    assert f'id="id_{field}_error"' in body
    assert "<script>alert(1)</script>" not in body and "<b>admin</b>" not in body


def test_more_rows_than_allowed_are_refused(owner, agent):
    steps = [{"after_minutes": str(10 * (i + 1)), "approver_roles": ["admin"]} for i in range(6)]
    body = _refused(owner, agent, escalation=steps)
    assert "Please submit at most 5 forms." in body


def test_a_post_without_the_lists_keeps_the_base_versions_rules(owner, agent):
    AgentVersion.objects.filter(agent=agent).update(
        approval_rules={
            "require_approval_for": ["write_back"],
            "approver_roles": ["editor"],
            "escalation_timeout_minutes": 240,
            "quorum": [{"approvals": 2}],
            "escalation": [{"after_minutes": 30, "approver_roles": ["admin"]}],
        }
    )
    data = {key: value for key, value in _post().items() if not key.startswith(("quorum-", "escalation-"))}
    assert _client(owner).post(f"/agents/{agent.pk}/versions/new/", data).status_code == 302
    rules = AgentVersion.objects.get(agent=agent, version=2).approval_rules
    assert rules["quorum"] == [{"when": None, "approvals": 2}] and rules["escalation"][0]["after_minutes"] == 30


def test_a_member_without_the_right_gets_403(member, agent):
    client = _client(member)
    assert client.get(f"/agents/{agent.pk}/versions/new/").status_code == 403
    assert client.post(f"/agents/{agent.pk}/versions/new/", _post(quorum=[TWO_FOR_DELETES])).status_code == 403
    assert not AgentVersion.objects.filter(agent=agent, version=2).exists()


def test_an_outsider_gets_404(outsider, agent):
    client = _client(outsider)
    assert client.get(f"/agents/{agent.pk}/versions/new/").status_code == 404
    assert client.post(f"/agents/{agent.pk}/versions/new/", _post(quorum=[TWO_FOR_DELETES])).status_code == 404
    assert client.get(f"/agents/{agent.pk}/").status_code == 404
    assert not AgentVersion.objects.filter(agent=agent, version=2).exists()


def test_the_card_shows_every_step_of_the_chain(workspace, owner, editor):
    from datetime import timedelta

    from governance.models import ApprovalRequest
    from tests.governance.test_approval_quorum import pause, quorum_agent

    agent = quorum_agent(
        workspace,
        owner,
        approver_roles=("editor",),
        timeout=240,
        escalation=[
            {"after_minutes": 30, "approver_roles": ["admin"]},
            {"after_minutes": 120, "approver_roles": ["org_admin"]},
        ],
    )
    _, approval = pause(agent)
    page = _client(owner).get(f"/approvals/{approval.pk}/").content.decode()
    line = page.split('class="approval-escalation"')[1].split("</p>")[0]
    assert "Waiting for editor; escalates to admin at" in line and ", then to org_admin at" in line

    ApprovalRequest.objects.filter(pk=approval.pk).update(
        approver_roles=["admin"], escalation_level=1, escalated_at=approval.created_at + timedelta(minutes=30)
    )
    line = (
        _client(owner)
        .get(f"/approvals/{approval.pk}/")
        .content.decode()
        .split('class="approval-escalation"')[1]
        .split("</p>")[0]
    )
    assert "escalates to org_admin at" in line and "then to" not in line
