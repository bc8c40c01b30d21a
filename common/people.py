"""How the API names a person in a response: their id, username and display name."""

from __future__ import annotations

from rest_framework import serializers


class PersonRefSerializer(serializers.Serializer):
    """A user as a read-only reference (``null`` when there is none, or their account
    was deleted)."""

    id = serializers.IntegerField(read_only=True)
    username = serializers.CharField(source="get_username", read_only=True)
    display_name = serializers.SerializerMethodField()

    def get_display_name(self, user) -> str:
        return person_label(user)


def person_label(user) -> str:
    """The name a page or a response shows for a person: their full name, else their username."""
    full = (user.get_full_name() or "").strip() if hasattr(user, "get_full_name") else ""
    return full or user.get_username()
