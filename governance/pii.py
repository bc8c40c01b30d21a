"""Personal-data detection for content policies (``contains_pii(args.message)``).

Pattern-based and deliberately conservative: each kind has a shape check plus a
validity check where one exists (Luhn for cards, mod-97 for IBANs, the SSA's
never-issued ranges for SSNs, NANP rules for US numbers), so ordinary numbers,
dates and ids rarely trip it. Kinds detected: email, phone (international ``+``
form and US formats), payment card, US SSN, UK National Insurance number, IBAN.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

EMAIL = "email"
PHONE = "phone"
CARD = "payment_card"
SSN = "us_ssn"
UK_NINO = "uk_nino"
IBAN = "iban"


@dataclass(frozen=True)
class PiiMatch:
    kind: str
    start: int
    end: int


_EMAIL_RE = re.compile(r"(?<![\w.%+-])[A-Za-z0-9._%+-]+@[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
                       r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*\.[A-Za-z]{2,}(?![\w-])")
# +44 20 7946 0958, +1 (415) 555-0132, +49-30-901820, +4930901820
_PHONE_INTL_RE = re.compile(r"(?<![\w+])\+\d[\d\s().-]{5,22}\d(?!\d)")
# (415) 555-0132, 415-555-0132, 415.555.0132, 415 555 0132, 1-415-555-0132, +1 415 555 0132
_PHONE_US_RE = re.compile(
    r"(?<![\w+-])(?:\+?1[\s.-]?)?(?:\(([2-9]\d{2})\)\s?|([2-9]\d{2})[\s.-])([2-9]\d{2})[\s.-](\d{4})(?![\w-])"
)
_CARD_RE = re.compile(r"(?<![\d-])\d(?:[ -]?\d){12,18}(?![\d-])")
_SSN_RE = re.compile(r"(?<![\d-])(\d{3})([- ])(\d{2})\2(\d{4})(?![\d-])")
_NINO_RE = re.compile(
    r"\b(?!BG|GB|KN|NK|NT|TN|ZZ)[A-CEGHJ-PR-TW-Z][A-CEGHJ-NPR-TW-Z] ?\d{2} ?\d{2} ?\d{2} ?[A-D]\b"
)
_IBAN_RE = re.compile(r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]){11,30}\b")


def luhn_valid(digits: str) -> bool:
    total = 0
    for index, char in enumerate(reversed(digits)):
        value = int(char)
        if index % 2 == 1:
            value *= 2
            if value > 9:
                value -= 9
        total += value
    return total % 10 == 0


def _card(candidate: str) -> bool:
    digits = re.sub(r"[ -]", "", candidate)
    if not 13 <= len(digits) <= 19 or len(set(digits)) == 1:
        return False
    separators = set(re.findall(r"[ -]", candidate))
    if len(separators) > 1:
        return False
    return luhn_valid(digits)


def _ssn(area: str, group: str, serial: str) -> bool:
    # Never issued: area 000, 666 or 900-999; group 00; serial 0000.
    return area != "000" and area != "666" and not area.startswith("9") and group != "00" and serial != "0000"


def _phone_intl(candidate: str) -> bool:
    digits = re.sub(r"\D", "", candidate)
    if not 8 <= len(digits) <= 15:
        return False
    # Brackets must balance; the separators must not run together ("+1 -- 2").
    return candidate.count("(") == candidate.count(")") and not re.search(r"[\s.-]{2,}", candidate)


def _iban(candidate: str) -> bool:
    compact = candidate.replace(" ", "")
    if not 15 <= len(compact) <= 34:
        return False
    rearranged = compact[4:] + compact[:4]
    number = "".join(str(int(ch, 36)) for ch in rearranged)
    return int(number) % 97 == 1


def pii_find(text: str) -> list[PiiMatch]:
    """Every personal-data span found in ``text``, in order of position."""
    found: list[PiiMatch] = []
    for m in _EMAIL_RE.finditer(text):
        found.append(PiiMatch(EMAIL, m.start(), m.end()))
    for m in _CARD_RE.finditer(text):
        if _card(m.group()):
            found.append(PiiMatch(CARD, m.start(), m.end()))
    for m in _SSN_RE.finditer(text):
        if _ssn(m.group(1), m.group(3), m.group(4)):
            found.append(PiiMatch(SSN, m.start(), m.end()))
    for m in _PHONE_US_RE.finditer(text):
        found.append(PiiMatch(PHONE, m.start(), m.end()))
    for m in _PHONE_INTL_RE.finditer(text):
        if _phone_intl(m.group()):
            found.append(PiiMatch(PHONE, m.start(), m.end()))
    for m in _NINO_RE.finditer(text):
        found.append(PiiMatch(UK_NINO, m.start(), m.end()))
    for m in _IBAN_RE.finditer(text):
        if _iban(m.group()):
            found.append(PiiMatch(IBAN, m.start(), m.end()))
    return sorted(found, key=lambda match: (match.start, match.kind))


def pii_kinds(value) -> set[str]:
    """The kinds of personal data anywhere in ``value`` (strings, numbers, lists, dicts)."""
    kinds: set[str] = set()
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            kinds |= {match.kind for match in pii_find(item)}
        elif isinstance(item, bool) or item is None:
            continue
        elif isinstance(item, int | float):
            kinds |= {match.kind for match in pii_find(str(item))}
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return kinds


def contains_pii(value) -> bool:
    return bool(pii_kinds(value))
