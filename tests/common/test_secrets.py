"""common.secrets: the one place bearer secrets (access tokens, trigger keys) are
issued, parsed and checked. Every path does exactly one constant-time comparison, and
text that does not have the form of a secret never reaches the lookup."""

import re
from dataclasses import dataclass

import pytest

from common import secrets as river_secrets
from common.secrets import MAX_LENGTH, secret_digest, secret_issue, secret_prefix, secret_verify


@dataclass
class Row:
    digest: str


@pytest.fixture
def comparisons(monkeypatch):
    """Every hmac.compare_digest call made by common.secrets, in order."""
    calls = []
    real = river_secrets.hmac.compare_digest

    def spy(a, b):
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(river_secrets.hmac, "compare_digest", spy)
    return calls


class Lookup:
    def __init__(self, rows: dict[str, Row]):
        self.rows, self.asked = rows, []

    def __call__(self, prefix: str) -> Row | None:
        self.asked.append(prefix)
        return self.rows.get(prefix)


def test_an_issued_secret_has_the_marker_a_hex_prefix_and_only_its_digest_is_kept():
    issued = secret_issue(marker="rtk")
    assert re.fullmatch(r"rtk_[0-9a-f]{12}_[A-Za-z0-9_-]{43}", issued.plaintext)
    assert issued.prefix == issued.plaintext.split("_")[1]
    assert issued.digest == secret_digest(issued.plaintext)
    assert issued.plaintext.split("_", 2)[2] not in issued.digest
    assert secret_issue(marker="rtk").plaintext != issued.plaintext


def test_the_right_secret_returns_its_row_even_with_white_space_around_it():
    issued = secret_issue(marker="rvr")
    row = Row(issued.digest)
    lookup = Lookup({issued.prefix: row})
    assert secret_verify(plaintext=issued.plaintext, marker="rvr", lookup=lookup) is row
    assert secret_verify(plaintext=f"  {issued.plaintext}\t", marker="rvr", lookup=lookup) is row
    assert lookup.asked == [issued.prefix, issued.prefix]


def test_a_secret_of_the_other_kind_is_refused_before_any_lookup(comparisons):
    issued = secret_issue(marker="rvr")
    lookup = Lookup({issued.prefix: Row(issued.digest)})
    assert secret_verify(plaintext=issued.plaintext, marker="rtk", lookup=lookup) is None
    assert lookup.asked == [] and len(comparisons) == 1


def test_an_unknown_prefix_and_a_wrong_secret_each_compare_once(comparisons):
    issued = secret_issue(marker="rtk")
    lookup = Lookup({issued.prefix: Row(issued.digest)})
    wrong_secret = issued.plaintext[:-4] + ("AAAA" if not issued.plaintext.endswith("AAAA") else "BBBB")
    unknown_prefix = f"rtk_{'0' * 12}_{issued.plaintext.split('_', 2)[2]}"
    assert secret_verify(plaintext=wrong_secret, marker="rtk", lookup=lookup) is None
    assert secret_verify(plaintext=unknown_prefix, marker="rtk", lookup=lookup) is None
    assert len(comparisons) == 2
    assert lookup.asked == [issued.prefix, "0" * 12]


@pytest.mark.parametrize("text", [
    None, "", "   ", "rtk", "rtk_", "rtk__", "rtk_abc", "rtk_abc_", "rtk__secret", "RTK_abcdef123456_s",
    "rtk_ABCDEF123456_s", "rtk_abcdef12345g_s", "rtk_" + "a" * 17 + "_s", "rtk_ab\x00cd_s", "rtk_abcd\u0663_s",
    "xrtk_abcdef123456_s", "rtk_abcdef123456_" + "s" * MAX_LENGTH, "rtk_\ud800_s",
])
def test_text_not_of_the_form_never_reaches_the_lookup_and_still_compares_once(text, comparisons):
    lookup = Lookup({})
    assert secret_verify(plaintext=text, marker="rtk", lookup=lookup) is None
    assert lookup.asked == []
    assert len(comparisons) == 1


def test_the_secret_part_may_hold_underscores():
    assert secret_prefix(plaintext="rvr_abcdef123456_a_b_c", marker="rvr") == "abcdef123456"


def test_odd_characters_in_the_secret_part_are_refused_not_raised(comparisons):
    lookup = Lookup({"abcdef123456": Row("not-ascii-é")})
    for text in ("rvr_abcdef123456_\ud800", "rvr_abcdef123456_é", "rvr_abcdef123456_\x00"):
        assert secret_verify(plaintext=text, marker="rvr", lookup=lookup) is None
    assert len(comparisons) == 3
