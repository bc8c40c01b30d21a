from django.apps import AppConfig


class TelemetryConfig(AppConfig):
    name = "telemetry"
    verbose_name = "Telemetry"

    def ready(self) -> None:
        from django.core.signals import setting_changed

        from rivercore.observe import observer_install
        from telemetry.logs import secrets_forget, turn_log_observer

        setting_changed.connect(secrets_forget, dispatch_uid="telemetry.logs.secrets_forget")
        observer_install("turn_log", turn_log_observer)  # one JSON line per turn (docs/observability.md)
