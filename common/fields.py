"""A JSONField whose content is checked by a pydantic model on the way in."""

from __future__ import annotations

import pydantic
from django.core.exceptions import ValidationError
from django.db import models

from rivercore.errors import pydantic_details


class PydanticJSONField(models.JSONField):
    """Stores plain JSON; every write is validated (and normalised) by ``schema``.

    ``schema`` is a pydantic model, or a TypeAdapter-able type such as
    ``list[str]``. It is not part of the migration state: it describes content,
    not the column.
    """

    def __init__(self, *args, schema=None, **kwargs):
        self.schema = schema
        super().__init__(*args, **kwargs)

    def deconstruct(self):
        name, path, args, kwargs = super().deconstruct()
        kwargs.pop("schema", None)
        return name, "django.db.models.JSONField", args, kwargs

    def _adapter(self):
        return pydantic.TypeAdapter(self.schema)

    def clean_value(self, value):
        if self.schema is None or value is None:
            return value
        try:
            adapter = self._adapter()
            return adapter.dump_python(adapter.validate_python(value), mode="json")
        except pydantic.ValidationError as exc:
            details = pydantic_details(exc)
            raise ValidationError(
                {self.name: [f"{path}: {'; '.join(msgs)}" for path, msgs in details.items()]}
            ) from exc

    def get_prep_value(self, value):
        if isinstance(value, pydantic.BaseModel):
            value = value.model_dump(mode="json")
        return super().get_prep_value(self.clean_value(value))

    def validate(self, value, model_instance):
        super().validate(value, model_instance)
        self.clean_value(value)
