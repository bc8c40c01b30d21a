"""The names the admin shows for River's models read as English: Django adds an "s" to a
model's name for its plural, which gives "memorys" unless the model names its own, and
lower-cases a class name's capitals."""

from __future__ import annotations

import re

from django.apps import apps

RIVER_APPS = {"tenancy", "agents", "datasources", "artifacts", "governance", "executions", "triggers", "telemetry",
              "toolservers", "web", "riverapp"}


def test_no_river_model_has_a_plural_made_by_adding_s_to_a_y():
    wrong = {f"{model._meta.label}: {model._meta.verbose_name_plural}"
             for model in apps.get_models() if model._meta.app_label in RIVER_APPS
             and re.search(r"[^aeiou]ys$", str(model._meta.verbose_name_plural))}

    assert wrong == set()
    assert str(apps.get_model("agents", "WorkspaceMemory")._meta.verbose_name_plural) == "workspace memories"


def test_an_acronym_keeps_its_capitals():
    """The admin capitalizes only a name's first letter: "llm providers" would read "Llm providers"."""
    meta = apps.get_model("executions", "LLMProvider")._meta
    assert (str(meta.verbose_name), str(meta.verbose_name_plural)) == ("LLM provider", "LLM providers")
