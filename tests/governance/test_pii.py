"""contains_pii: which personal data is detected, and what is not mistaken for it."""

import pytest

from governance import pii
from governance.expressions import matches


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("write to jane.doe+billing@example.co.uk please", pii.EMAIL),
        ("CALL +44 20 7946 0958", pii.PHONE),
        ("intl +49-30-901820", pii.PHONE),
        ("compact +4930901820", pii.PHONE),
        ("us (415) 555-0132", pii.PHONE),
        ("us 415-555-0132", pii.PHONE),
        ("us 415.555.0132", pii.PHONE),
        ("us 1-415-555-0132", pii.PHONE),
        ("us +1 415 555 0132", pii.PHONE),
        ("visa 4111 1111 1111 1111", pii.CARD),
        ("visa 4111-1111-1111-1111", pii.CARD),
        ("amex 378282246310005", pii.CARD),
        ("mastercard 5555555555554444", pii.CARD),
        ("discover 6011000990139424", pii.CARD),
        ("13 digits 4222222222222", pii.CARD),
        ("ssn 123-45-6789", pii.SSN),
        ("ssn 078 05 1120", pii.SSN),
        ("NI AB 12 34 56 C", pii.UK_NINO),
        ("NI JG103759A", pii.UK_NINO),
        ("iban GB82 WEST 1234 5698 7654 32", pii.IBAN),
        ("iban DE89370400440532013000", pii.IBAN),
    ],
)
def test_detects(text, kind):
    assert kind in pii.pii_kinds(text)
    assert pii.contains_pii(text)


@pytest.mark.parametrize(
    "text",
    [
        "card 4111 1111 1111 1112",  # fails Luhn
        "card 4111-1111 1111-1111",  # mixed separators
        "zeros 0000 0000 0000 0000",  # Luhn-valid but not a card
        "ssn 000-12-3456",  # area 000 never issued
        "ssn 666-12-3456",  # area 666 never issued
        "ssn 912-34-5678",  # 900-999 never issued
        "ssn 123-00-4567",  # group 00
        "ssn 123-45-0000",  # serial 0000
        "ni BG 12 34 56 C",  # BG prefix not allocated
        "ni QQ123456A",  # Q is never a first letter
        "iban GB82 WEST 1234 5698 7654 33",  # bad check digits
        "us 115-555-0132",  # area code cannot start with 1
        "date 2024-03-10 at 18:30",
        "order #12345678 shipped",
        "version 1.2.3, price 415.00",
        "ip 192.168.100.200",
        "ticket 98821 solved",
        "+ 1 - 2",
        "not an email: user@localhost",
        "",
    ],
)
def test_does_not_flag(text):
    assert pii.pii_kinds(text) == set()


def test_luhn():
    assert pii.luhn_valid("79927398713")
    assert not pii.luhn_valid("79927398710")


def test_nested_values_and_numbers_are_scanned():
    assert pii.pii_kinds({"to": ["ops", {"cc": "x@example.org"}]}) == {pii.EMAIL}
    assert pii.pii_kinds({"card": 4111111111111111}) == {pii.CARD}
    assert pii.pii_kinds({"n": 42, "ok": True, "none": None}) == set()


def test_spans_are_reported():
    text = "mail a@b.io or call 415-555-0132"
    found = pii.pii_find(text)
    assert [(m.kind, text[m.start:m.end]) for m in found] == [(pii.EMAIL, "a@b.io"), (pii.PHONE, "415-555-0132")]


def test_contains_pii_in_the_condition_language():
    condition = "contains_pii(args.message) == true"
    assert matches(condition, {"args": {"message": "SSN 123-45-6789"}})
    assert not matches(condition, {"args": {"message": "Refund approved for ticket 98821."}})
