"""Form fields for Django admin and page forms that take hostile text."""

from __future__ import annotations

from django import forms
from django.core.exceptions import ValidationError

MAX_JSON_CHARS = 100_000
MAX_JSON_DEPTH = 64


def _depth_exceeded(text: str, limit: int) -> bool:
    """Whether brackets outside strings nest deeper than ``limit`` (checked before
    parsing, so the parser never recurses into a 5,000-deep document)."""
    depth, in_string, escaped = 0, False, False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > limit:
                return True
        elif ch in "]}":
            depth -= 1
    return False


class BoundedJSONField(forms.JSONField):
    """A JSON field that refuses oversized or deeply nested documents with a form
    error instead of a RecursionError (a 500) from the JSON parser."""

    def to_python(self, value):
        if isinstance(value, str):
            if len(value) > MAX_JSON_CHARS:
                raise ValidationError(f"Enter at most {MAX_JSON_CHARS} characters of JSON.", code="too_long")
            if _depth_exceeded(value, MAX_JSON_DEPTH):
                raise ValidationError(f"JSON nested more than {MAX_JSON_DEPTH} levels deep.", code="too_deep")
            if "\x00" in value or "\\u0000" in value:
                raise ValidationError("JSON may not contain NUL characters.", code="null_characters")
        try:
            return super().to_python(value)
        except (ValueError, RecursionError):
            # e.g. an integer of 5,000 digits: the parser raises ValueError, not JSONDecodeError
            raise ValidationError("Enter valid JSON (numbers of at most 4,300 digits).", code="invalid") from None

    def bound_data(self, data, initial):
        if isinstance(data, str) and (len(data) > MAX_JSON_CHARS or _depth_exceeded(data, MAX_JSON_DEPTH)):
            return forms.fields.InvalidJSONInput(data[:MAX_JSON_CHARS])
        try:
            return super().bound_data(data, initial)
        except (RecursionError, ValueError):
            return forms.fields.InvalidJSONInput(data)

    def has_changed(self, initial, data):
        try:
            return super().has_changed(initial, data)
        except (RecursionError, ValueError):
            return True

