"""``manage.py issue_token`` refuses with a one-line CommandError and writes no token."""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command

from tenancy.models import AccessToken
from tenancy.services import service_principal_create

pytestmark = pytest.mark.django_db


def test_a_service_principal_is_refused_without_a_token(owner, workspace):
    principal = service_principal_create(workspace=workspace, created_by=owner, label="Trigger x", role="analyst")
    with pytest.raises(CommandError, match="service identity"):
        call_command("issue_token", principal.user.username)
    assert not AccessToken.objects.filter(user=principal.user).exists()


def test_an_unknown_user_is_refused(db):
    with pytest.raises(CommandError, match="No user named 'nobody'"):
        call_command("issue_token", "nobody")
    assert not AccessToken.objects.exists()


def test_an_inactive_user_is_refused(owner):
    owner.is_active = False
    owner.save(update_fields=["is_active"])
    with pytest.raises(CommandError, match="inactive"):
        call_command("issue_token", owner.username)
    assert not AccessToken.objects.filter(user=owner).exists()


@pytest.mark.parametrize("days", ["٣", "²", "0", "-1", "99999999999", "1e3"])
def test_an_odd_lifetime_is_refused(owner, days):
    with pytest.raises(CommandError, match="expires-in-days"):
        call_command("issue_token", owner.username, "--expires-in-days", days)
    assert not AccessToken.objects.filter(user=owner).exists()


@pytest.mark.parametrize("name", ["", "x" * 101, "a\x00b"])
def test_an_odd_token_name_is_refused(owner, name):
    with pytest.raises(CommandError, match="--name"):
        call_command("issue_token", owner.username, "--name", name)
    assert not AccessToken.objects.filter(user=owner).exists()


def test_a_nul_in_the_username_is_refused_before_the_database(db):
    with pytest.raises(CommandError, match="No such user"):
        call_command("issue_token", "ow\x00ner")


def test_a_lifetime_in_ascii_days_sets_the_expiry(owner, capsys):
    call_command("issue_token", owner.username, "--expires-in-days", "3")
    token = AccessToken.objects.get(user=owner)
    assert 2 < (token.expires_at - token.created_at).total_seconds() / 86400 <= 3
