from django.apps import AppConfig


class TenancyConfig(AppConfig):
    name = "tenancy"
    verbose_name = "Tenancy and access"

    def ready(self) -> None:
        from tenancy import time_zones  # noqa: F401 - connects the sign-in receiver
