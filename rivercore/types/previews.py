"""The effect of a write, computed before a person approves it (docs/approvals.md,
"Effect preview"): the rows a SQL write would change, with their keys and the before
and after values of the changed columns, or the file a save would write and its diff
against the previous version. Computed in a transaction that is always rolled back,
stored on the approval request, and checked again in the write's own transaction."""

from __future__ import annotations

import hashlib
import json
from typing import Any, Literal

from pydantic import BaseModel, Field

ROWS_KEPT = 50  # changes kept for the card and the API; every row is counted
ROWS_INDEXED = 1_000  # (key, before) digests kept to say what changed when a preview goes stale
NO_PREVIEW = "no preview: the effect is unknown"


class RowChange(BaseModel):
    key: dict[str, Any]
    before: dict[str, Any] | None = None  # None for an inserted row
    after: dict[str, Any] | None = None  # None for a deleted row


class StaleNote(BaseModel):
    """What moved between two previews of the same call."""

    no_longer_match: int = 0
    new_matches: int = 0
    changed: int = 0  # rows still matched whose before-values changed
    previous_fingerprint: str = ""
    message: str = ""
    # Set when the write found more rows than the approver's (or the grant's) ceiling.
    max_rows: int | None = None
    # Set when it was the write itself that found the change (after the approval): it
    # rolled back and the call waits for a new decision.
    at_write: bool = False


class EffectPreview(BaseModel):
    available: bool = True
    reason: str = ""  # why there is no preview (available False)
    kind: Literal["rows", "file", "none"] = "rows"
    target: str = ""  # the table, or the file's name
    operation: str = ""
    columns: list[str] = Field(default_factory=list)  # the columns the write sets
    rows_affected: int = 0
    changes: list[RowChange] = Field(default_factory=list)
    truncated: bool = False
    fingerprint: str = ""
    summary: str = ""
    # A file (save_artifact): the previous version it replaces and the unified diff.
    previous_version: int | None = None
    diff: str = ""
    # [[key as JSON, digest of its before-values]], for the stale note; never shown.
    index: list[list[str]] = Field(default_factory=list)
    stale: StaleNote | None = None
    arguments: dict[str, Any] | None = None  # the arguments this preview is of
    policy_id: str | None = None  # the policy that asked for the approval, if one did

    def public(self) -> dict[str, Any]:
        """The preview as the API and the card show it (without the digest index)."""
        return self.model_dump(mode="json", exclude={"index"})


def no_preview(reason: str = NO_PREVIEW) -> EffectPreview:
    return EffectPreview(available=False, kind="none", reason=reason)


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def digest(value: Any) -> str:
    return hashlib.sha256(canonical(value).encode()).hexdigest()


def stale_note(old: EffectPreview, new: EffectPreview) -> StaleNote:
    """How ``new`` differs from ``old``, by row key and before-values (a file: its
    previous version)."""
    if new.kind == "file":
        version = f"version {new.previous_version}" if new.previous_version else "a first version"
        return StaleNote(changed=1, previous_fingerprint=old.fingerprint,
                         message=f"The file changed since the preview: {version} is there now. "
                                 "Review the new preview.")
    before = dict((key, value) for key, value in old.index)
    after = dict((key, value) for key, value in new.index)
    gone = len(before.keys() - after.keys())
    added = len(after.keys() - before.keys())
    changed = sum(1 for key in before.keys() & after.keys() if before[key] != after[key])
    parts = []
    if gone:
        parts.append(f"{gone} row{'s' if gone != 1 else ''} no longer match{'es' if gone == 1 else ''}")
    if added:
        parts.append(f"{added} new row{'s' if added != 1 else ''} match{'es' if added == 1 else ''}")
    if changed:
        parts.append(f"{changed} row{'s have' if changed != 1 else ' has'} different values now")
    if not parts:
        parts.append("the data changed since the preview")
    message = "The data changed since the preview: " + ", ".join(parts) + ". Review the new preview."
    return StaleNote(no_longer_match=gone, new_matches=added, changed=changed,
                     previous_fingerprint=old.fingerprint, message=message)


def ceiling_note(fresh: EffectPreview, *, max_rows: int, previous_fingerprint: str = "") -> StaleNote:
    rows = f"{fresh.rows_affected} row{'s' if fresh.rows_affected != 1 else ''}"
    return StaleNote(max_rows=max_rows, previous_fingerprint=previous_fingerprint,
                     message=f"The write would now change {rows}, more than the ceiling of {max_rows}; "
                             "nothing was written. Review the new preview.")
