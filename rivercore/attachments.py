"""How an attached file is named in a prompt (spec 002: the message part that held the
file becomes text naming the artifact). The artifacts app writes these notes, one per
line after the message; the offline planner reads a question without them, so a file's
name is never taken for a value to filter on."""

from __future__ import annotations

ATTACHED_FILE_PREFIX = "[Attached file "


def attachment_notes_removed(text: str) -> str:
    """``text`` without its attachment notes (whole lines that start with the prefix and
    end with ``]``), stripped."""
    kept = [line for line in text.splitlines()
            if not (line.strip().startswith(ATTACHED_FILE_PREFIX) and line.strip().endswith("]"))]
    return "\n".join(kept).strip()
