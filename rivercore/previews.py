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
from rivercore.types.previews import NO_PREVIEW, EffectPreview, no_preview

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
