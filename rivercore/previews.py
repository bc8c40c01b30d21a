"""Asking a tool for the effect of a call before a person approves it.

A tool that can say what a call would change declares ``Tool.preview`` (a handler
with the tool's own context and arguments, returning an ``EffectPreview``; it must
undo whatever it tried, e.g. a SQL write run in a transaction that is rolled back).
A tool without one, or whose preview fails, gets "no preview" with the reason: the
card shows it and a policy may refuse approval without a preview."""

from __future__ import annotations

import logging
from typing import Any

import pydantic

from rivercore.tools import Tool, ToolContext, ToolError
from rivercore.types.previews import NO_PREVIEW, EffectPreview, StaleNote, ceiling_note, no_preview, stale_note

logger = logging.getLogger("river.engine")


def effect_preview(tool: Tool, ctx: ToolContext, arguments: dict[str, Any]) -> EffectPreview:
    """The call's effect, or "no preview" with the reason. Never raises: a preview
    that fails leaves the decision to the person, who is told it is unknown."""
    if tool.preview is None:
        return no_preview()
    try:
        parsed = tool.input_model.model_validate(arguments)
        preview = tool.preview(ctx, parsed)
    except pydantic.ValidationError:
        return no_preview(f"{NO_PREVIEW} (the arguments do not fit the tool)")
    except ToolError as exc:
        return no_preview(f"{NO_PREVIEW} ({exc.message})")
    except Exception:  # noqa: BLE001 - a broken preview must not stop the approval
        logger.exception("the effect preview of %s failed", tool.name)
        return no_preview()
    preview = EffectPreview.model_validate(preview)
    preview.arguments = arguments
    return preview


# The codes a checked write raises when its effect is not the agreed one (it wrote nothing).
EFFECT_MOVED = frozenset({"preview_stale", "row_ceiling_exceeded"})


def effect_moved_preview(details: dict[str, Any], *, terms: dict[str, Any], arguments: dict[str, Any],
                         agreed: dict[str, Any] | None) -> EffectPreview:
    """The fresh preview a write found in its own transaction (and rolled back), with a
    note of what moved since ``agreed`` (the preview the approval or the grant was of,
    when the steps hold it; governance fills the note in from the approval request
    otherwise) or of the ceiling it would exceed."""
    raw = details.get("preview")
    fresh = EffectPreview.model_validate(raw) if isinstance(raw, dict) else no_preview()
    fresh.arguments = arguments
    if agreed is not None:
        fresh.policy_id = agreed.get("policy_id")
    previous = str(terms.get("fingerprint") or "")
    ceiling = details.get("max_rows", terms.get("max_rows"))  # the one the write held to
    if details.get("code") == "row_ceiling_exceeded" and isinstance(ceiling, int):
        fresh.stale = ceiling_note(fresh, max_rows=ceiling, previous_fingerprint=previous)
    elif agreed is not None and fresh.available:
        fresh.stale = stale_note(EffectPreview.model_validate(agreed), fresh)
    if fresh.stale is not None:
        at_write_mark(fresh.stale)
    return fresh


def at_write_mark(note: StaleNote) -> None:
    """Mark a note as found by the write itself (after the approval)."""
    if not note.at_write and note.max_rows is None:
        note.message = f"Nothing was written: {note.message[0].lower()}{note.message[1:]}"
    note.at_write = True
