from django.apps import AppConfig


class CommonConfig(AppConfig):
    name = "common"
    verbose_name = "Common"

    def ready(self):
        _strict_strings()


def _strict_strings() -> None:
    """A number where the API documents a string is a 400, for every serializer at once.

    DRF's CharField turns ``{"name": 123}`` into ``"123"`` quietly; River's schema says
    string, so the fuzz test (and any client) should get the same answer as for any
    other wrong type. Done once here so that serializers added later are covered too.
    """
    from rest_framework import fields

    lenient = fields.CharField.to_internal_value
    if getattr(lenient, "river_strict", False):
        return

    def to_internal_value(self, data):
        if not isinstance(data, str):
            raise fields.ValidationError("Not a valid string.", code="invalid")
        return lenient(self, data)

    to_internal_value.river_strict = True
    fields.CharField.to_internal_value = to_internal_value
