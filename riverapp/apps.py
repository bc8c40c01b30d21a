from django.apps import AppConfig


class RiverappConfig(AppConfig):
    name = "riverapp"
    verbose_name = "River"
