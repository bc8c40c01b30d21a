from django.apps import AppConfig


class TelemetryConfig(AppConfig):
    name = "telemetry"
    verbose_name = "Telemetry"

    def ready(self) -> None:
        from rivercore.observe import observer_install
        from telemetry.metrics import MetricsObserver

        observer_install("metrics", MetricsObserver())  # engine steps and model calls → Prometheus
