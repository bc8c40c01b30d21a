from django.apps import AppConfig


class TelemetryConfig(AppConfig):
    name = "telemetry"
    verbose_name = "Telemetry"

    def ready(self) -> None:
        from django.conf import settings

        from rivercore.observe import observer_install
        from telemetry.metrics import MetricsObserver
        from telemetry.traces import traces_setup

        observer_install("metrics", MetricsObserver())  # engine steps and model calls → Prometheus

        # Off (and free) unless an OTLP endpoint is configured.
        traces_setup(endpoint=settings.OTEL_EXPORTER_OTLP_ENDPOINT, service_name=settings.OTEL_SERVICE_NAME)
