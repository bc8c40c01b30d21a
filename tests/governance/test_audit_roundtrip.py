"""Property: whatever JSON a caller audits, the stored entry verifies after the database
round trip (jsonb reorders keys, turns 1e20 into an integer, refuses NUL and lone
surrogates), and changing any value in it breaks the entry."""

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from governance.audit import _content_canonical, audit_record, audit_seal, audit_verify, content_mac
from governance.models import AuditLogEntry

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)


@pytest.mark.django_db
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(details=st.dictionaries(st.text(max_size=8), json_values, max_size=5), label=st.text(max_size=30))
@example(details={"neg_zero": -0.0, "exp": 1e20, "max": 1.7976931348623157e308, "tiny": 5e-324}, label="")
@example(details={"#": {"#": "1"}, "{}": {"{}": 1}, "nul": "\x00", "lone": "\udfff"}, label="\x00")
def test_any_audited_json_verifies_after_the_round_trip(org, details, label):
    entry = audit_record(organization_id=org.pk, event_type="property", actor_label=label, details=details)
    audit_seal(organization_id=org.pk)
    stored = AuditLogEntry.objects.get(pk=entry.pk)
    assert content_mac(stored) == stored.content_hash
    assert _content_canonical(stored) == _content_canonical(entry)
    report = audit_verify(organization_id=org.pk).organizations[0]
    assert report.verdict == "ok"


@given(
    value=st.integers(min_value=-(10**6), max_value=10**6) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=5) | st.booleans() | st.none(),
    other=st.integers(min_value=-(10**6), max_value=10**6) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=5) | st.booleans() | st.none(),
)
def test_different_values_never_share_a_canonical_form(value, other):
    """Numbers compare by value (1 and 1.0 are one number); anything else that differs,
    including a string that looks like a number's encoding, stays different."""
    from governance.audit import _canonical_json

    same_number = (
        not isinstance(value, bool) and not isinstance(other, bool)
        and isinstance(value, int | float) and isinstance(other, int | float) and value == other
    )
    if value == other and type(value) is type(other) or same_number:
        assert _canonical_json({"k": value}) == _canonical_json({"k": other})
    else:
        assert _canonical_json({"k": value}) != _canonical_json({"k": other})
        assert _canonical_json({"#": value}) != _canonical_json({"#": other})


@pytest.mark.django_db
def test_the_canonical_form_ignores_the_threads_decimal_context(org):
    """A library, or a context copied back from another thread, may leave the thread's
    decimal context with a tiny precision and every signal trapped: auditing still
    works, and the entry's MAC is the one the default context gives."""
    import decimal

    details = {"n": 51345, "f": 0.1, "big": 10**30, "tiny": 5e-324, "exp": 1e20}
    from governance.audit import _canonical_json

    expected = _canonical_json(details)
    hostile = decimal.Context(prec=3, Emin=-5, Emax=5, traps=[decimal.Inexact, decimal.Rounded, decimal.Subnormal,
                                                             decimal.Clamped, decimal.Overflow, decimal.Underflow])
    with decimal.localcontext(hostile):
        entry = audit_record(organization_id=org.pk, event_type="e", details=details)
        assert _canonical_json(details) == expected
    audit_seal(organization_id=org.pk)
    assert audit_verify(organization_id=org.pk).ok
    stored = AuditLogEntry.objects.get(pk=entry.pk)
    assert content_mac(stored) == stored.content_hash
