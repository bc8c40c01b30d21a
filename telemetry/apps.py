from django.apps import AppConfig


class TelemetryConfig(AppConfig):
    name = "telemetry"
    verbose_name = "Telemetry"

    def ready(self) -> None:
        from rivercore.observe import observer_install
        from telemetry.logs import turn_log_observer

        observer_install("turn_log", turn_log_observer)  # one JSON line per turn (docs/observability.md)
