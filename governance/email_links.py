"""Deciding an approval from e-mail: signed, single-use links to a confirm page.

A link names one request, one recipient (a River user) and one decision, signed with
Django's signing (``SECRET_KEY``, a salt of its own) and dated, so it expires after
``RIVER_APPROVAL_LINK_HOURS``. It identifies, it does not authenticate: the confirm
page needs the recipient signed in. Opening it (GET) never decides; the page's POST
does, through ``approval_resolve`` like every other way in (role, requester rule,
quorum, exactly once), and records the link's use (``ApprovalLinkUse``, unique per
link) in the decision's transaction, so a link decides at most once.
"""

from __future__ import annotations

import secrets
import uuid
from dataclasses import dataclass

from django.conf import settings
from django.core import signing
from django.core.mail import EmailMessage, get_connection
from django.db import IntegrityError, connection, transaction

from common.dberrors import Backoff, error_is_transient, retry_transient
from governance.models import ApprovalLinkUse, ApprovalRequest
from rivercore.errors import RiverError
from rivercore.types.governance import DecisionChannel, ResolutionStatus

SALT = "river.governance.approval-link"
# An e-mail link decides one way only: edits need the card and its editor.
USED_MESSAGE = ("Each link decides once, and this one was already used. "
                "Open the request in River to see what was decided.")
LINK_DECISIONS = (ResolutionStatus.APPROVED.value, ResolutionStatus.REJECTED.value)


class LinkRefused(RiverError):
    """A link that cannot decide. ``code``: ``link_invalid`` (tampered or malformed, 400),
    ``link_expired`` or ``link_used`` (410), ``link_other_user`` (403)."""

    def __init__(self, message: str, *, code: str, status_code: int):
        super().__init__(message, code=code)
        self.status_code = status_code


@dataclass(frozen=True)
class ApprovalLink:
    approval_id: uuid.UUID
    user_id: int
    decision: str
    nonce: str


def approval_link_token(*, approval_id, user_id: int, decision: str) -> str:
    """A new signed link token (each call a new nonce, so each e-mail's links are its own)."""
    assert decision in LINK_DECISIONS, decision
    return signing.dumps({"a": str(approval_id), "u": int(user_id), "d": decision, "n": secrets.token_urlsafe(18)},
                         salt=SALT, compress=True)


def approval_link_url(*, approval_id, user_id: int, decision: str) -> str:
    token = approval_link_token(approval_id=approval_id, user_id=user_id, decision=decision)
    return f"/approvals/link/{token}"  # web.approval_links


def approval_link_read(*, token: str, user) -> ApprovalLink:
    """The link in ``token`` if it is intact, current, unused and addressed to ``user``;
    otherwise LinkRefused. Says nothing about the request itself (the caller reads it
    through the tenant-scoped selector)."""
    max_age = settings.RIVER_APPROVAL_LINK_HOURS * 3600
    try:
        data = signing.loads(token, salt=SALT, max_age=max_age)
    except signing.SignatureExpired:
        raise LinkRefused("This link has expired. Open the request in River to decide it.",
                          code="link_expired", status_code=410) from None
    except (signing.BadSignature, ValueError, TypeError):
        raise LinkRefused("This link is not valid: it may have been cut short or altered.",
                          code="link_invalid", status_code=400) from None
    try:
        link = ApprovalLink(approval_id=uuid.UUID(str(data["a"])), user_id=int(data["u"]), decision=str(data["d"]),
                            nonce=str(data["n"]))
    except (KeyError, TypeError, ValueError):
        raise LinkRefused("This link is not valid.", code="link_invalid", status_code=400) from None
    if link.decision not in LINK_DECISIONS:
        raise LinkRefused("This link is not valid.", code="link_invalid", status_code=400)
    if link.user_id != getattr(user, "pk", None):
        raise LinkRefused("This link was sent to someone else. Sign in as them, or open the request in River.",
                          code="link_other_user", status_code=403)
    if ApprovalLinkUse.objects.filter(nonce=link.nonce).exists():
        raise LinkRefused(USED_MESSAGE, code="link_used", status_code=410)
    return link


def approval_link_decide(*, user, token: str, comment: str = "") -> ApprovalRequest:
    """Decide through a link: the link's checks, then ``approval_resolve`` (channel
    ``email``) with the link's use recorded in the same transaction. A link POSTed twice
    at once: the second insert waits for the first and finds it (``link_used``)."""
    from governance.resolution import approval_resolve

    link = approval_link_read(token=token, user=user)

    def decide() -> ApprovalRequest:
        try:
            with transaction.atomic():
                ApprovalLinkUse.objects.create(nonce=link.nonce, approval_id=link.approval_id, user=user,
                                               decision=link.decision)
                return approval_resolve(user=user, approval_id=link.approval_id, status=link.decision,
                                        comment=comment, channel=DecisionChannel.EMAIL)
        except IntegrityError:
            raise LinkRefused(USED_MESSAGE, code="link_used", status_code=410) from None

    attempts = 1 if connection.in_atomic_block else 5
    return retry_transient(decide, backoff=Backoff(attempts=attempts, base_seconds=0.02, cap_seconds=0.5),
                           is_transient=error_is_transient)


# --- the e-mails ----------------------------------------------------------------------


def approval_emails_send(*, approval: ApprovalRequest, recipients: list[str], subject: str, body: str,
                         absolute) -> int:
    """One e-mail per configured recipient. A recipient who is a person allowed to decide
    the request now (``approval_deciders``: never the run's requester) gets their own
    Approve and Reject links; any other address gets the review link only. Returns how
    many were sent; a backend failure raises (the delivery task retries)."""
    from governance.notifications import approval_deciders

    deciders: dict[str, list] = {}
    for person in approval_deciders(approval=approval):
        if person.email:
            deciders.setdefault(person.email.strip().lower(), []).append(person)
    messages = []
    for address in recipients:
        people = deciders.get(address.strip().lower(), [])
        text = body
        if len(people) == 1:  # an address shared by two accounts names nobody
            text += _decision_lines(approval=approval, user=people[0], absolute=absolute)
        messages.append(EmailMessage(subject[:200], text, settings.DEFAULT_FROM_EMAIL, [address]))
    with get_connection(fail_silently=False) as mail:
        return mail.send_messages(messages) or 0


def _decision_lines(*, approval: ApprovalRequest, user, absolute) -> str:
    hours = settings.RIVER_APPROVAL_LINK_HOURS
    approve = absolute(approval_link_url(approval_id=approval.pk, user_id=user.pk, decision="approved"))
    reject = absolute(approval_link_url(approval_id=approval.pk, user_id=user.pk, decision="rejected"))
    return (
        "\n\nDecide from here (each link opens a confirmation page in River; you need to be signed in as "
        f"{user.get_username()}; the links work once and for {hours} hours):\n"
        f"Approve: {approve}\nReject: {reject}\n"
    )
