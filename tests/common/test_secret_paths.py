"""Access tokens (rvr_) and trigger API keys (rtk_) go through the same check
(common.secrets): an unknown prefix and a wrong secret for a known one take the same
path, one lookup and one constant-time comparison, and get the same answer."""

import pytest

from common import secrets as river_secrets
from tenancy.services import token_authenticate, token_issue
from triggers.apikeys import NotAuthenticated, api_key_authenticate, api_key_issue

pytestmark = pytest.mark.django_db


@pytest.fixture
def comparisons(monkeypatch):
    calls = []
    real = river_secrets.hmac.compare_digest

    def spy(a, b):
        calls.append(1)
        return real(a, b)

    monkeypatch.setattr(river_secrets.hmac, "compare_digest", spy)
    return calls


def _forgeries(plaintext: str) -> dict[str, str]:
    marker, prefix, secret = plaintext.split("_", 2)
    flipped = secret[:-1] + ("A" if secret[-1] != "A" else "B")
    unknown = "f" * 12 if prefix != "f" * 12 else "e" * 12
    return {"wrong secret": f"{marker}_{prefix}_{flipped}", "unknown prefix": f"{marker}_{unknown}_{secret}"}


def _token_answer(plaintext: str):
    return token_authenticate(plaintext=plaintext)


def _key_answer(plaintext: str):
    try:
        return api_key_authenticate(plaintext=plaintext)
    except NotAuthenticated as refused:
        return (refused.status_code, refused.code, refused.message)


@pytest.mark.parametrize("kind", ["token", "key"])
def test_an_unknown_prefix_and_a_wrong_secret_take_the_same_path(kind, owner, workspace, comparisons,
                                                                 django_assert_num_queries):
    if kind == "token":
        plaintext, answer = token_issue(user=owner).plaintext, _token_answer
    else:
        plaintext, answer = api_key_issue(created_by=owner, workspace=workspace, name="K").plaintext, _key_answer
    answers = {}
    for case, forged in _forgeries(plaintext).items():
        before = len(comparisons)
        with django_assert_num_queries(1):  # the lookup by prefix, nothing after it
            answers[case] = answer(forged)
        assert len(comparisons) - before == 1, case
    assert answers["wrong secret"] == answers["unknown prefix"]
    assert answers["wrong secret"] in (None, (401, "authentication_failed", "Invalid API key."))


@pytest.mark.parametrize("kind", ["token", "key"])
def test_the_genuine_secret_also_compares_once(kind, owner, workspace, comparisons):
    if kind == "token":
        issued = token_issue(user=owner)
        assert token_authenticate(plaintext=issued.plaintext).pk == issued.token.pk
    else:
        issued = api_key_issue(created_by=owner, workspace=workspace, name="K")
        assert api_key_authenticate(plaintext=f" {issued.plaintext} ").pk == issued.key.pk
    assert len(comparisons) == 1


def test_a_key_is_not_a_token_and_a_token_is_not_a_key(owner, workspace):
    token = token_issue(user=owner).plaintext
    key = api_key_issue(created_by=owner, workspace=workspace, name="K").plaintext
    assert token_authenticate(plaintext=key) is None
    assert token_authenticate(plaintext="rtk" + token[3:]) is None
    with pytest.raises(NotAuthenticated):
        api_key_authenticate(plaintext=token)
    with pytest.raises(NotAuthenticated):
        api_key_authenticate(plaintext="rtk" + token[3:])
