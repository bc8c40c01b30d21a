from django.apps import AppConfig


class DemoConfig(AppConfig):
    """The demo workspace River starts with (``seed_demo``, ``demo_reset``): content, not
    wiring, so it lives beside the project rather than in ``riverapp``."""

    name = "demo"
    default_auto_field = "django.db.models.BigAutoField"
