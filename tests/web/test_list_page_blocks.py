"""The list pages share their filter form, their "no workspace" and their "nothing
matches" blocks (templates/_filter_form.html, _no_workspace.html, _no_match.html): the
same markup, each with its own words and links."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from web.context import SESSION_KEY

pytestmark = pytest.mark.django_db


def _client(user, workspace=None) -> Client:
    client = Client()
    client.force_login(user)
    if workspace is not None:
        session = client.session
        session[SESSION_KEY] = workspace.pk
        session.save()
    return client


@pytest.mark.parametrize(("url", "label"), [
    ("/runs/?status=sleeping", "Filter runs"),
    ("/approvals/?status=sleeping", "Filter approval requests"),
    ("/sessions/?archived=2", "Filter conversations"),
])
def test_a_refused_filter_is_marked_and_announced_once(member, workspace, url, label):
    response = _client(member, workspace).get(url)
    html = response.content.decode()
    assert response.status_code == 400
    assert f'aria-label="{label}"' in html
    assert html.count('role="alert">Nothing was filtered') == 1
    assert 'aria-invalid="true"' in html
    assert f'<a class="btn btn-quiet" href="{url.split("?")[0]}">Clear</a>' in html


@pytest.mark.parametrize(("url", "message", "show_all"), [
    ("/runs/?status=failed", "No runs match these filters.", '<a href="/runs/">Show all runs</a>'),
    ("/agents/?q=nothing-like-this", "No agent matches these filters.", '<a href="/agents/">Show all agents</a>'),
    ("/triggers/?q=nothing-like-this", "No trigger matches these filters.",
     '<a href="/triggers/">Show all triggers</a>'),
    ("/audit/?actor=nobody-at-all", "No entry matches these filters.", '<a href="/audit/">Show all entries</a>'),
])
def test_a_filter_matching_nothing_links_back_to_the_whole_list(owner, workspace, url, message, show_all):
    response = _client(owner, workspace).get(url)
    html = response.content.decode()
    assert response.status_code == 200
    assert f'<p class="empty">{message} {show_all}.</p>' in html


@pytest.mark.parametrize(("url", "text"), [
    ("/runs/", "You are not a member of any workspace yet. Ask an administrator to add you to one."),
    ("/sessions/", "You are not a member of any workspace yet. Ask an administrator to add you to one."),
    ("/agents/", "You are not a member of any workspace yet. Ask an admin of your organization to add you."),
    ("/approvals/", "You are not a member of any workspace yet.</p>"),
    ("/triggers/", "You are not a member of any workspace yet.</p>"),
    ("/data-sources/", "You are not a member of any workspace yet.</p>"),
])
def test_a_user_of_no_workspace_is_told_so(db, url, text):
    loner = get_user_model().objects.create_user(username="loner", password="x" * 12)
    response = _client(loner).get(url)
    assert response.status_code == 200
    assert text in response.content.decode()
