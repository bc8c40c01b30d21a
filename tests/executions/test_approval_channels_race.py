"""The approval storm with mixed channels (issue 29 §4): 200 paused runs, each request
raced at once by 8 contenders on four channels, two each: the inbox card's POST (signed
in, with the CSRF token), the REST API, e-mail links (the confirm page's POST, signed in)
and Slack buttons (interactions signed as Slack signs them: HMAC-SHA256 over
``v0:{timestamp}:{body}`` with the signing secret; slack_sdk is not a dependency). Every
channel lands on the same request row, so each is decided exactly once: one audit entry
naming the winning channel, one resume, the approved write in the table once; every
inbox, API and e-mail loser gets 409, every Slack loser's message shows the decision
that won.

Real HTTP (the live server: one thread and one PostgreSQL connection per request), real
runs paused at the gate of ``write_back`` into a SQLite table, as in
test_approval_storm.py (the same size, 200 × 8)."""

from __future__ import annotations

import re
import sqlite3
import threading
from collections import Counter
from unittest import mock

import httpx
import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.test import Client

from benchmarks import approval_storm as storm
from datasources.services import data_source_create, data_source_discover
from executions.models import Execution
from governance import tasks as governance_tasks
from governance.email_links import approval_link_url
from governance.models import ApprovalRequest, AuditLogEntry, SlackIdentity
from tenancy.models import Membership
from tenancy.permissions import Role
from tenancy.services import token_issue
from tests.datasources.fixtures import *  # noqa: F403
from tests.factories import make_agent
from tests.governance.channel_support import SIGNING_SECRET, interaction_body, slack_signed

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not settings.DATABASES["default"]["ENGINE"].endswith("postgresql"),
                       reason="row-lock concurrency needs PostgreSQL"),
]

APPROVALS = 200
RACERS = 8  # two per channel
RESPONSE_URL = "https://hooks.slack.com/actions/T0001/race"
API_DECISIONS = ({"status": "approved"}, {"status": "rejected", "resolution_comment": "no"})
LINK_DECISIONS = ("approved", "rejected")
INBOX_DECISIONS = ({"decision": "approved"}, {"decision": "rejected", "resolution_comment": "no"})
SLACK_ACTIONS = ("river_approve", "river_reject")


def _approver(workspace, name: str):
    user = get_user_model().objects.create_user(username=name, password="x", email=f"{name}@example.com")
    Membership.objects.create(workspace=workspace, user=user, role=Role.ADMIN)
    return user


def _signed_in_http(base_url: str, user, first_link: str) -> tuple[httpx.Client, str]:
    """An HTTP client with ``user``'s session, and a CSRF token read from a page with a
    form (an e-mail link's confirm page, a request's card)."""
    session = Client()
    session.force_login(user)
    client = httpx.Client(base_url=base_url, timeout=60, cookies={"sessionid": session.cookies["sessionid"].value})
    page = client.get(first_link)
    assert page.status_code == 200, page.text[:300]
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
    return client, token


def _rows(path, index: int) -> list[tuple]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute("SELECT amount FROM charges WHERE status = ?", [storm.marker(index)]).fetchall()
    finally:
        conn.close()


def test_inbox_api_email_and_slack_race_on_each_request_and_one_wins(live_server, workspace, owner, sqlite_file,
                                                                     settings):
    settings.RIVER_SLACK_SIGNING_SECRET = SIGNING_SECRET
    source = data_source_create(workspace=workspace, name="Refunds", type="sqlite",
                                connection_config={"path": sqlite_file.name}, credentials={},
                                access_level="read_write")
    data_source_discover(data_source=source)
    agent = make_agent(workspace=workspace, owner=owner, tools=["write_back"], action_level="act_with_approval",
                       require_approval_for=["write_back"], approver_roles=["admin"], data_sources=[source])
    inbox_users = [_approver(workspace, f"inbox{n}") for n in range(2)]
    api_users = [_approver(workspace, f"api{n}") for n in range(2)]
    mail_users = [_approver(workspace, f"mail{n}") for n in range(2)]
    slack_users = [_approver(workspace, f"slack{n}") for n in range(2)]
    for number, user in enumerate(slack_users):
        SlackIdentity.objects.create(user=user, team_id="T0001", slack_user_id=f"U{number}")
    tokens = [token_issue(user=user).plaintext for user in api_users]
    slack_answers: list[tuple[str, dict]] = []
    lock = threading.Lock()

    def record_answer(response_url, message):
        with lock:
            slack_answers.append((response_url, message))

    with storm.resumes_recorded() as queued, mock.patch.object(governance_tasks.slack_respond, "delay",
                                                               record_answer):
        paused = storm.storm_prepare(agent=agent, starter=owner, data_source_id=source.pk, count=APPROVALS)
        queued.clear()
        links = {(user.pk, p.approval_id): approval_link_url(
            approval_id=p.approval_id, user_id=user.pk, decision=LINK_DECISIONS[(p.index + n) % 2])
            for n, user in enumerate(mail_users) for p in paused}
        mail_clients = [_signed_in_http(live_server.url, user, links[(user.pk, paused[0].approval_id)])
                        for user in mail_users]
        inbox_clients = [_signed_in_http(live_server.url, user, f"/approvals/{paused[0].approval_id}/")
                         for user in inbox_users]
        codes: dict[str, Counter] = {"inbox": Counter(), "api": Counter(), "email": Counter(), "slack": Counter()}
        won: dict[str, list[str]] = {}
        unexpected: list[tuple] = []
        start = threading.Barrier(RACERS)  # cyclic: all eight racers set off together on each request

        def note(channel: str, approval_id: str, status: int, text: str) -> None:
            with lock:
                codes[channel][status] += 1
                if status == 200 and channel != "slack":
                    won.setdefault(approval_id, []).append(channel)
                if status not in (200, 409):
                    unexpected.append((channel, approval_id, status, text[:300]))

        def api_racer(number: int) -> None:
            with httpx.Client(base_url=live_server.url, timeout=60,
                              headers={"Authorization": f"Bearer {tokens[number]}"}) as client:
                for p in paused:
                    start.wait(timeout=60)
                    response = client.post(f"/api/v1/approvals/{p.approval_id}/resolve",
                                           json=API_DECISIONS[(p.index + number) % 2])
                    note("api", p.approval_id, response.status_code, response.text)

        def inbox_racer(number: int) -> None:
            client, csrf = inbox_clients[number]
            for p in paused:
                start.wait(timeout=60)
                response = client.post(f"/approvals/{p.approval_id}/resolve",
                                       data={"csrfmiddlewaretoken": csrf, **INBOX_DECISIONS[(p.index + number) % 2]},
                                       headers={"Referer": live_server.url + "/", "HX-Request": "true"})
                note("inbox", p.approval_id, response.status_code, response.text)

        def mail_racer(number: int) -> None:
            client, csrf = mail_clients[number]
            for p in paused:
                start.wait(timeout=60)
                response = client.post(links[(mail_users[number].pk, p.approval_id)],
                                       data={"csrfmiddlewaretoken": csrf, "resolution_comment": ""},
                                       headers={"Referer": live_server.url + "/"})
                note("email", p.approval_id, response.status_code, response.text)

        def slack_racer(number: int) -> None:
            with httpx.Client(base_url=live_server.url, timeout=60) as client:
                for p in paused:
                    start.wait(timeout=60)
                    body = interaction_body(approval_id=p.approval_id, action_id=SLACK_ACTIONS[(p.index + number) % 2],
                                            response_url=RESPONSE_URL, user=f"U{number}")
                    response = client.post("/integrations/slack/interactions", content=body, headers={
                        **slack_signed(body), "Content-Type": "application/x-www-form-urlencoded"})
                    note("slack", p.approval_id, response.status_code, response.text)

        def guarded(racer, number: int) -> None:
            try:
                racer(number)
            except Exception as exc:  # noqa: BLE001 - a racer that broke fails the test below
                with lock:
                    unexpected.append((racer.__name__, number, "raised", repr(exc)))
                start.abort()

        threads = [threading.Thread(target=guarded, args=(target, n))
                   for target in (inbox_racer, api_racer, mail_racer, slack_racer) for n in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=300)
        for client, _ in mail_clients + inbox_clients:
            client.close()

        assert unexpected == []
        assert codes["slack"] == Counter({200: 2 * APPROVALS})  # Slack always hears 200; the answer says more
        assert all(set(codes[channel]) <= {200, 409} for channel in ("inbox", "api", "email")), codes
        by_channel = Counter()
        for p in paused:
            [decision] = AuditLogEntry.objects.filter(approval_id=p.approval_id).exclude(
                event_type="approval_requested")
            channel = decision.details["channel"]
            by_channel[channel] += 1
            # The 200s agree with the audit: API and e-mail winners got one 200; a Slack win none.
            assert won.get(p.approval_id, []) == ([] if channel == "slack" else [channel])
            approval = ApprovalRequest.objects.get(pk=p.approval_id)
            assert approval.status != ApprovalRequest.Status.PENDING
            assert approval.resolved_by.username.startswith(
                {"inbox": "inbox", "api": "api", "email": "mail", "slack": "slack"}[channel])
        # A genuine race: more than one channel won somewhere (which ones varies by run).
        assert len(by_channel) >= 2, by_channel
        # Each Slack click was answered, by the decision that won (whichever channel it was).
        assert len(slack_answers) == 2 * APPROVALS
        assert all(message.get("replace_original") is True for _, message in slack_answers), slack_answers[:3]
        assert Counter(queued) == Counter(p.execution_id for p in paused)
        assert set(Execution.objects.filter(pk__in=[p.execution_id for p in paused])
                   .values_list("status", flat=True)) == {Execution.Status.QUEUED}

        resumed = storm.storm_resume(execution_ids=sorted(set(queued)))

    assert all(first == "success" and again is None for first, again in resumed.values())
    for p in paused:
        rejected = ApprovalRequest.objects.get(pk=p.approval_id).status == ApprovalRequest.Status.REJECTED
        assert _rows(sqlite_file, p.index) == ([] if rejected else [(storm.PROPOSED_AMOUNT,)])
    print(f"\nmixed-channel race: {APPROVALS} requests × {RACERS} racers; wins by channel {dict(by_channel)}; "
          f"codes {({k: dict(v) for k, v in codes.items()})}")
