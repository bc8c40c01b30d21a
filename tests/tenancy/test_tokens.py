from datetime import timedelta

from django.core import checks
from django.core.management import call_command
from django.utils import timezone

from tenancy.management.commands.issue_token import Command as IssueToken
from tenancy.models import AccessToken
from tenancy.services import token_authenticate, token_issue, token_revoke


def test_token_is_stored_hashed_and_authenticates(owner):
    issued = token_issue(user=owner)
    stored = AccessToken.objects.get(pk=issued.token.pk)
    assert issued.plaintext not in (stored.digest, stored.prefix)
    assert issued.plaintext.split("_", 2)[2] not in stored.digest  # the secret may itself hold "_"
    assert token_authenticate(plaintext=issued.plaintext).user == owner


def test_wrong_secret_with_right_prefix_is_refused(owner):
    issued = token_issue(user=owner)
    forged = issued.plaintext[:-4] + "AAAA"
    assert token_authenticate(plaintext=forged) is None


def test_revoked_token_is_refused(owner):
    issued = token_issue(user=owner)
    token_revoke(user=owner, token_id=issued.token.pk)
    assert token_authenticate(plaintext=issued.plaintext) is None


def test_expired_token_is_refused(owner):
    issued = token_issue(user=owner, expires_at=timezone.now() - timedelta(seconds=1))
    assert token_authenticate(plaintext=issued.plaintext) is None


def test_issue_token_command_prints_a_working_token(owner, capsys):
    call_command("issue_token", "owner")
    printed = capsys.readouterr().out.strip()
    assert token_authenticate(plaintext=printed).user == owner


def test_issue_token_command_runs_no_system_checks(owner, capsys):
    """The checks import every URL module and view, which issuing a token never uses
    (a third of the command's CPU); ``manage.py check`` runs them."""
    ran = []

    def failing_check(app_configs, **kwargs):
        ran.append(True)
        return [checks.Error("a deliberately failing check", id="tests.E001")]

    checks.register(failing_check)
    try:
        command = IssueToken()  # as manage.py runs it: options parsed from the command line
        command.execute(**vars(command.create_parser("manage.py", "issue_token").parse_args(["owner"])))
    finally:
        checks.registry.registry.registered_checks.discard(failing_check)
    assert ran == []
    assert token_authenticate(plaintext=capsys.readouterr().out.strip()).user == owner


def test_api_rejects_bad_bearer_token(db, client):
    response = client.get("/api/v1/workspaces/", HTTP_AUTHORIZATION="Bearer rvr_nope_nope")
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "authentication_failed"
