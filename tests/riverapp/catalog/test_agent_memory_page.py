"""The workspace memory on an agent's page: shown to those who may see it, deleted with
the API's rules and audit entry, and a 404 for anything the user may not see."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from agents.models import WorkspaceMemory
from governance.models import AuditLogEntry
from tests.factories import make_agent

pytestmark = pytest.mark.django_db


def _memory(agent, *, content: str, user=None, run: int | None = None) -> WorkspaceMemory:
    return WorkspaceMemory.objects.create(workspace_id=agent.workspace_id, agent=agent, user=user,
                                          content=content, keywords=f" {content.lower()} ",
                                          source_execution_id=run)


def _delete_url(agent, memory) -> str:
    return f"/agents/{agent.pk}/memory/{memory.pk}/delete"


def test_shared_and_own_personal_memories_are_shown_not_others_personal_ones(client_for, owner, member, agent):
    _memory(agent, content="Question: open tickets in Oslo\nAnswer: 17", run=501)
    _memory(agent, content="Member's own note about refunds", user=member)
    _memory(agent, content="Owner's private note", user=owner)
    page = client_for(member).get(f"/agents/{agent.pk}/").content.decode()
    assert "Remembered for the workspace" in page
    assert "open tickets in Oslo" in page and "/runs/501/" in page and "Shared with the workspace" in page
    assert "Member&#x27;s own note about refunds" in page and "Personal: only you" in page
    assert "Owner&#x27;s private note" not in page


def test_an_empty_memory_says_what_fills_it(client_for, owner, agent):
    page = client_for(owner).get(f"/agents/{agent.pk}/").content.decode()
    assert "Nothing remembered for the workspace yet" in page


def test_an_editor_deletes_a_shared_memory_and_it_is_audited_without_its_content(client_for, editor, agent):
    memory = _memory(agent, content="Question: secret revenue figure", run=502)
    response = client_for(editor).post(_delete_url(agent, memory), follow=True)
    assert response.status_code == 200 and "The memory is deleted" in response.content.decode()
    assert not WorkspaceMemory.objects.filter(pk=memory.pk).exists()
    entry = AuditLogEntry.objects.get(event_type="memory_deleted")
    assert entry.actor_id == editor.pk and entry.agent_id == agent.pk
    assert entry.details["memory_id"] == memory.pk and entry.details["personal"] is False
    assert "secret revenue" not in str(entry.details)


def test_a_member_deletes_their_own_personal_memory_but_not_a_shared_one(client_for, member, agent):
    shared = _memory(agent, content="Shared answer")
    own = _memory(agent, content="My answer", user=member)
    client = client_for(member)
    page = client.get(f"/agents/{agent.pk}/").content.decode()
    assert _delete_url(agent, own) in page and _delete_url(agent, shared) not in page
    assert client.post(_delete_url(agent, shared)).status_code == 403
    assert client.post(_delete_url(agent, own)).status_code == 302
    assert list(WorkspaceMemory.objects.values_list("pk", flat=True)) == [shared.pk]
    assert AuditLogEntry.objects.filter(event_type="memory_deleted").count() == 1


def test_another_users_personal_memory_is_a_404_even_for_the_workspace_admin(client_for, owner, member, agent):
    theirs = _memory(agent, content="Member's private answer", user=member)
    assert client_for(owner).post(_delete_url(agent, theirs)).status_code == 404
    assert WorkspaceMemory.objects.filter(pk=theirs.pk).exists()
    assert not AuditLogEntry.objects.filter(event_type="memory_deleted").exists()


def test_another_workspace_gets_404_for_the_agent_and_the_memory(client_for, outsider, other_workspace, agent):
    memory = _memory(agent, content="Acme's answer")
    client = client_for(outsider)
    assert client.post(_delete_url(agent, memory)).status_code == 404
    # Through one of their own agents, the memory id still is not theirs.
    theirs = make_agent(workspace=other_workspace, owner=outsider, name="Globex agent")
    assert client.post(_delete_url(theirs, memory)).status_code == 404
    assert WorkspaceMemory.objects.filter(pk=memory.pk).exists()


def test_a_memory_of_another_agent_is_a_404_through_this_agent(client_for, owner, workspace, agent):
    other = make_agent(workspace=workspace, owner=owner, name="Other agent")
    memory = _memory(other, content="Other agent's answer")
    assert client_for(owner).post(_delete_url(agent, memory)).status_code == 404
    assert WorkspaceMemory.objects.filter(pk=memory.pk).exists()


def test_delete_needs_post_and_sign_in(client, client_for, owner, agent):
    memory = _memory(agent, content="Kept")
    assert client_for(owner).get(_delete_url(agent, memory)).status_code == 405
    response = client.post(_delete_url(agent, memory))
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]
    assert client_for(owner).post(f"/agents/{agent.pk}/memory/not-a-number/delete").status_code == 404
    assert WorkspaceMemory.objects.filter(pk=memory.pk).exists()


def test_the_memory_adds_a_bounded_number_of_queries(client_for, owner, agent):
    client = client_for(owner)
    client.get(f"/agents/{agent.pk}/")
    with CaptureQueriesContext(connection) as few:
        client.get(f"/agents/{agent.pk}/")
    WorkspaceMemory.objects.bulk_create([
        WorkspaceMemory(workspace_id=agent.workspace_id, agent=agent, content=f"Answer {n}", keywords=" answer ",
                        source_execution_id=10_000 + n) for n in range(200)])
    with CaptureQueriesContext(connection) as many:
        page = client.get(f"/agents/{agent.pk}/").content.decode()
    assert page.count('class="memory-content"') == 50
    assert len(many) <= len(few) + 1, [q["sql"][:120] for q in many.captured_queries]


# --- memory settings ---------------------------------------------------------------------


def _settings_url(agent) -> str:
    return f"/agents/{agent.pk}/memory/settings"


def test_a_member_gives_and_withdraws_consent_from_the_page_and_a_run_then_remembers(client_for, member, agent):
    from agents.selectors import memory_consent_given
    from agents.services import workspace_memory_from_run

    client = client_for(member)
    page = client.get(f"/agents/{agent.pk}/").content.decode()
    assert "Memory settings: Personal, your runs are not remembered" in page
    assert '<select name="mode"' not in page  # the mode is a workspace admin's
    response = client.post(_settings_url(agent), {"mode": "personal", "personal_consent": "on"}, follow=True)
    assert "Memory settings saved." in response.content.decode()
    assert memory_consent_given(workspace_id=agent.workspace_id, user_id=member.pk)
    assert "your runs are remembered for you" in client.get(f"/agents/{agent.pk}/").content.decode()
    remembered = workspace_memory_from_run(workspace_id=agent.workspace_id, agent_id=agent.pk, user_id=member.pk,
                                           execution_id=9001, question="Open tickets?", answer="Seven.")
    assert remembered is not None and remembered.user_id == member.pk  # a personal memory, now consented
    client.post(_settings_url(agent), {"mode": "personal"})  # the box unticked
    assert workspace_memory_from_run(workspace_id=agent.workspace_id, agent_id=agent.pk, user_id=member.pk,
                                     execution_id=9002, question="Open tickets?", answer="Eight.") is None
    assert not memory_consent_given(workspace_id=agent.workspace_id, user_id=member.pk)


def test_only_a_workspace_admin_changes_the_mode_and_it_is_audited(client_for, owner, member, agent):
    from governance.selectors import workspace_memory_mode

    assert client_for(member).post(_settings_url(agent), {"mode": "shared"}).status_code == 403
    assert workspace_memory_mode(workspace_id=agent.workspace_id) == "personal"
    assert not AuditLogEntry.objects.filter(event_type="memory_mode_changed").exists()
    # A member posting the current mode back (as a stale form would) changes nothing and is fine.
    assert client_for(member).post(_settings_url(agent), {"mode": "personal"}).status_code == 302

    client = client_for(owner)
    assert '<select name="mode"' in client.get(f"/agents/{agent.pk}/").content.decode()
    assert client.post(_settings_url(agent), {"mode": "shared"}).status_code == 302
    assert workspace_memory_mode(workspace_id=agent.workspace_id) == "shared"
    entry = AuditLogEntry.objects.get(event_type="memory_mode_changed")
    assert entry.actor_id == owner.pk
    for bad in ({"mode": "everything"}, {}):
        response = client.post(_settings_url(agent), bad, follow=True)
        assert "The memory settings were not saved: What completed runs remember:" in response.content.decode()
    assert workspace_memory_mode(workspace_id=agent.workspace_id) == "shared"


def test_memory_settings_of_another_workspace_are_a_404(client_for, outsider, agent):
    from agents.models import MemoryConsent

    assert client_for(outsider).post(_settings_url(agent), {"personal_consent": "on", "mode": "off"}).status_code == 404
    assert not MemoryConsent.objects.exists()
